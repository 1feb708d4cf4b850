"""Burrow and lagwatch on one timed stream, on a loaded machine: does each see a consumer falling behind?

    python bench/burrow_timed_differential.py [--runs 10] [--hogs 4] [--steps 14] [--intervals 10] [--gap 1.5]
                                              [--stall-ingest]

burrow_differential.py waits for both systems between rounds, so each of its commits is stored by both against the
same log end; it cannot show what happens when a monitor gets to a commit late. Here every step produces records,
waits until both systems have polled the new log ends, and commits at once (stamped with the time it is written);
the next step follows `--gap` seconds later, while `--hogs` CPU-bound processes run beside both systems, as on any
machine shared with other work. Nothing waits for the commits to be stored: a commit a system gets to after its next
poll is measured by Burrow against that newer log end, by lagwatch against the log end of when it was made
(docs/rules.md §2). With `--gap 0` the next step's records come at once, and Burrow, slowed by the hogs, gets to
some commits after its next poll. With `--stall-ingest` lagwatch's ingest is the late one: it is paused (SIGSTOP)
from before each step's commits until Burrow has polled the next step's log ends, as a worker starved of CPU or
stalled on Redis would be; its poller, in the same process, resumes with it.

Groups, one data partition each:
  g-falling  20 produced and 10 more committed per step: its lag grows every step (WARN)
  g-keeping  commits the log end every step (OK)
  g-wiggle   5 or 15 behind, alternately: its lag goes down every other step (OK)

After the steps, once both show every group's last commit, both are asked `/v3/kafka/<c>/consumer/<g>/lag`. A run
agrees when each group has the same status in both. lagwatch records its history topic meanwhile, and the Spark
replay's rules (spark/replay.py) replay it to the same instant: the replay column is their status, which should be
lagwatch's. Prints a row per run and the count; exit status 0 when every run agreed on every group, the replay
included.

Needs the `burrow` and `zookeeper` packages (scripts/install-system-deps.sh), java and redis-server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aiokafka import AIOKafkaConsumer, TopicPartition
from bench_vs_burrow import burrow_available, get_json
from burrow_differential import (
    BASE,
    CLUSTER,
    LAGWATCH_TOPICS,
    OFFSETS_PARTITIONS,
    Writer,
    lagwatch_env,
    log_ends_shown,
    start_burrow,
    start_lagwatch,
    wait_until,
)

from lagwatch.devkit.mock_kafka import start_mock_kafka_process, stop_process
from lagwatch.devkit.offsets_topic_writer import OFFSETS_TOPIC
from lagwatch.shared.records.history import HistoryRecord, decode, records_of
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.config import load_config
from lagwatch.spark.replay import ReplayConfig, replay_group, replay_inputs, status_changes

EXPECTED = {"g-falling": "WARN", "g-keeping": "OK", "g-wiggle": "OK"}
TOPIC = {group: "t-" + group.removeprefix("g-") for group in EXPECTED}
HISTORY_TOPIC = "lagwatch.history"
HISTORY_ENV = {"LAGWATCH__HISTORY__ENABLED": "true"}


def log_ends(step: int) -> dict[tuple[str, int], int]:
    """Each data partition's log end after `step` steps (0: before the first)."""
    return {
        (TOPIC["g-falling"], 0): BASE + 20 * step,
        (TOPIC["g-keeping"], 0): BASE + 10 * step,
        (TOPIC["g-wiggle"], 0): BASE + 10 * step,
    }


def commits(step: int) -> dict[str, int]:
    """Each group's commit at step `step` (from 1)."""
    return {
        "g-falling": BASE + 10 * step,
        "g-keeping": BASE + 10 * step,
        "g-wiggle": BASE + 10 * step - (15 if step % 2 else 5),
    }


def hogs(stack: contextlib.ExitStack, n: int) -> None:
    """`n` CPU-bound processes until the stack closes."""
    for _ in range(n):
        proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        stack.callback(proc.wait)
        stack.callback(proc.kill)


def play(writer: Writer, apis: dict[str, str], args: argparse.Namespace, ingest: subprocess.Popen) -> dict[str, int]:
    """The timed stream; each group's last committed offset."""
    last: dict[str, int] = {}
    for step in range(1, args.steps + 1):
        ends = log_ends(step)
        writer.log_ends(ends)  # type: ignore[arg-type]
        for name, api in apis.items():  # this step's log ends polled: the commits below are made after they moved
            if args.stall_ingest and name == "lagwatch" and step > 1:
                _pause(ingest, signal.SIGCONT)  # late: Burrow has polled these log ends already
            for (topic, _), end in ends.items():
                wait_until(lambda api=api, t=topic, e=end: log_ends_shown(api, t, [e]), f"{name} {topic} at {end}", 10)
        if args.stall_ingest and step < args.steps:
            _pause(ingest, signal.SIGSTOP)
        for group, offset in commits(step).items():
            writer.commit(group, TOPIC[group], 0, offset, now_ms())
            last[group] = offset
        writer.flush()
        time.sleep(args.gap)
    return last


def _pause(process: subprocess.Popen, sig: signal.Signals) -> None:
    """SIGSTOP or SIGCONT to the process and its children."""
    os.killpg(os.getpgid(process.pid), sig)


def newest_offset(api: str, group: str) -> int | None:
    """The newest entry's offset in the group's window (a commit within min-distance replaces the newest entry)."""
    window = windows(api).get(group) or []
    return window[-1][0] if window else None


def windows(api: str) -> dict[str, list]:
    """Each group's window as (offset, lag) pairs, oldest first."""
    out = {}
    for group in EXPECTED:
        code, body = get_json(f"{api}/v3/kafka/{CLUSTER}/consumer/{group}")
        slots = ((body.get("topics") or {}).get(TOPIC[group]) or [None]) if code == 200 else [None]
        out[group] = [(e["offset"], e.get("lag")) for e in (slots[0] or {}).get("offsets") or [] if e]
    return out


def statuses(api: str) -> dict[str, str]:
    answer = {}
    for group in EXPECTED:
        code, body = get_json(f"{api}/v3/kafka/{CLUSTER}/consumer/{group}/lag")
        answer[group] = (
            (body.get("status") or {}).get("status", "?") if code == 200 and isinstance(body, dict) else str(code)
        )
    return answer


def replayed(bootstrap: str, intervals: int, until_ms: int) -> dict[str, str]:
    """Each group's status as the replay gives it from lagwatch's history topic, at `until_ms`."""
    config = load_config(env={**lagwatch_env(bootstrap, "redis://127.0.0.1:1", intervals), **HISTORY_ENV})
    replay = ReplayConfig(config.window(), config.rules(), tick_ms=250)
    records = sorted(asyncio.run(history(bootstrap)), key=lambda r: r.observed_at)
    answer = {}
    for group in EXPECTED:
        commits, samples = replay_inputs(r for r in records if r.group in (group, None))
        changes = status_changes(replay_group(CLUSTER, group, commits, samples, replay, end_ms=until_ms).events)
        answer[group] = changes[-1][1] if changes else "NOTFOUND"
    return answer


async def history(bootstrap: str) -> list[HistoryRecord]:
    """Every record on the history topic."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    partitions = [TopicPartition(HISTORY_TOPIC, p) for p in range(LAGWATCH_TOPICS[HISTORY_TOPIC])]
    await consumer.start()
    try:
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)
        records: list[HistoryRecord] = []
        while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                records += [decode(line) for m in messages for line in records_of(m.value)]
        return records
    finally:
        await consumer.stop()


def one_run(args: argparse.Namespace) -> dict[str, dict[str, str]] | None:
    """Both systems on a fresh Kafka mock and Redis; their statuses and the replay's, or None when they did not
    start."""
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="burrow-timed-")))
        topics = {topic: 1 for topic in TOPIC.values()}
        mock, control = start_mock_kafka_process(
            tmp / "kafka", {OFFSETS_TOPIC: OFFSETS_PARTITIONS, **LAGWATCH_TOPICS, **topics}
        )
        stack.callback(stop_process, mock)
        writer = Writer(control.bootstrap)
        stack.callback(writer.close)
        writer.log_ends(log_ends(0))  # type: ignore[arg-type]
        _, burrow_api = start_burrow(stack, tmp, control.bootstrap, args.intervals)
        lagwatch, lagwatch_api = start_lagwatch(stack, tmp, control.bootstrap, args.intervals, **HISTORY_ENV)
        apis = {"burrow": burrow_api, "lagwatch": lagwatch_api}
        for name, api in apis.items():
            for topic in topics:
                if not wait_until(
                    lambda api=api, topic=topic: log_ends_shown(api, topic, [BASE]), f"{name} {topic}", 90
                ):
                    return None
        hogs(stack, args.hogs)
        last = play(writer, apis, args, lagwatch["ingest"])
        for name, api in apis.items():
            for group, offset in last.items():
                wait_until(lambda api=api, g=group, o=offset: newest_offset(api, g) == o, f"{name} {group}")
        time.sleep(2)  # Burrow's status cache (1 s) and lagwatch's evaluator catch up
        if args.windows:
            for name, api in apis.items():
                print(f"  {name}: {windows(api)['g-falling']}", flush=True)
        answer = {name: statuses(api) for name, api in apis.items()}
        time.sleep(1)  # the ingest's last history batch: sent before the batch's commit, which the window showed
        if args.replay:
            answer["replay"] = replayed(control.bootstrap, args.intervals, now_ms())
        return answer


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--hogs", type=int, default=4, help="CPU-bound processes beside both systems")
    parser.add_argument("--steps", type=int, default=14, help="steps per run (more than --intervals: a full window)")
    parser.add_argument("--intervals", type=int, default=10, help="ring size of both systems")
    parser.add_argument("--gap", type=float, default=1.5, help="seconds from a step's commits to the next step")
    parser.add_argument("--stall-ingest", action="store_true", help="pause lagwatch's ingest over each step's commits")
    parser.add_argument("--windows", action="store_true", help="print g-falling's window (offset, lag) in both")
    parser.add_argument(
        "--no-replay", dest="replay", action="store_false", help="skip the replay (a lagwatch build without it)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    missing = burrow_available()
    if missing:
        print(f"burrow_timed_differential: missing {missing} (scripts/install-system-deps.sh)", file=sys.stderr)
        return 2
    groups = list(EXPECTED)
    stall = ", lagwatch's ingest stalled over each step's commits" if args.stall_ingest else ""
    print(f"{args.runs} runs, {args.steps} steps {args.gap} s apart, {args.hogs} CPU hogs{stall}", flush=True)
    print(f"expected {EXPECTED}", flush=True)
    print("| run | " + " | ".join(f"{g} Burrow / lagwatch / replay" for g in groups) + " | agree |")
    print("| --- | " + " | ".join("---" for _ in groups) + " | --- |")
    agreed = {group: 0 for group in groups}
    whole = replays = 0
    for run in range(1, args.runs + 1):
        answer = one_run(args)
        if answer is None:  # a system that did not come up on a loaded machine: the run is made again, once
            print(f"  run {run} did not start; once more", flush=True)
            answer = one_run(args)
        if answer is None:
            print(f"| {run} | did not start | no |", flush=True)
            continue
        same = {g: answer["burrow"][g] == answer["lagwatch"][g] for g in groups}
        for g in groups:
            agreed[g] += same[g]
        whole += all(same.values())
        replay = answer.get("replay", dict.fromkeys(groups, "-"))
        replays += replay == answer["lagwatch"]
        cells = " | ".join(f"{answer['burrow'][g]} / {answer['lagwatch'][g]} / {replay[g]}" for g in groups)
        print(f"| {run} | {cells} | {'yes' if all(same.values()) else 'no'} |", flush=True)
    print("\nagreed per group: " + ", ".join(f"{g} {n}/{args.runs}" for g, n in agreed.items()))
    print(f"every group agreed in {whole}/{args.runs} runs; the replay gave lagwatch's statuses in {replays}")
    return 0 if whole == args.runs and (replays == args.runs or not args.replay) else 1


if __name__ == "__main__":
    sys.exit(main())
