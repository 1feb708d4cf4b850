"""Burrow and lagwatch on one timed stream, on a loaded machine: does each see a consumer falling behind?

    python bench/burrow_timed_differential.py [--runs 10] [--hogs 4] [--steps 14] [--intervals 10]

burrow_differential.py waits for both systems between rounds, so each of its commits is stored by both against the
same log end; it cannot show what happens when a monitor gets to a commit late. Here nothing waits: every step
produces records, and a moment later (a phase drawn per run, so that each system's polls fall anywhere between)
commits, stamped with the time it is written, while `--hogs` CPU-bound processes run beside both systems, as on
any machine shared with other work. A commit made after the log end moved and stored after the next poll is
measured by Burrow against that newer log end; lagwatch measures it against the log end of when it was made
(docs/rules.md §2).

Groups, one data partition each:
  g-falling  20 produced and 10 more committed per step: its lag grows every step (WARN)
  g-keeping  commits the log end every step (OK)
  g-wiggle   5 or 15 behind, alternately: its lag goes down every other step (OK)

After the steps, once both show every group's last commit, both are asked `/v3/kafka/<c>/consumer/<g>/lag`. A run
agrees when each group has the same status in both. Prints a row per run and the count; exit status 0 when every run
agreed on every group.

Needs the `burrow` and `zookeeper` packages (scripts/install-system-deps.sh), java and redis-server.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_burrow import burrow_available, get_json
from burrow_differential import (
    BASE,
    CLUSTER,
    LAGWATCH_TOPICS,
    OFFSETS_PARTITIONS,
    Writer,
    commit_visible,
    log_ends_shown,
    start_burrow,
    start_lagwatch,
    wait_until,
)

from lagwatch.devkit.mock_kafka import start_mock_kafka_process, stop_process
from lagwatch.devkit.offsets_topic_writer import OFFSETS_TOPIC
from lagwatch.shared.runtime.clock import now_ms

STEP_S = 1.3  # a little over the systems' offset-refresh (1 s), so that min-distance (1 s) merges no commit
EXPECTED = {"g-falling": "WARN", "g-keeping": "OK", "g-wiggle": "OK"}
TOPIC = {group: "t-" + group.removeprefix("g-") for group in EXPECTED}


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


def play(writer: Writer, steps: int, phase_s: float) -> dict[str, tuple[int, int]]:
    """The timed stream; each group's last commit (offset, timestamp)."""
    last: dict[str, tuple[int, int]] = {}
    for step in range(1, steps + 1):
        started = time.monotonic()
        writer.log_ends(log_ends(step))  # type: ignore[arg-type]
        time.sleep(phase_s)
        for group, offset in commits(step).items():
            ts = now_ms()
            writer.commit(group, TOPIC[group], 0, offset, ts)
            last[group] = (offset, ts)
        writer.flush()
        time.sleep(max(0.0, STEP_S - (time.monotonic() - started)))
    return last


def statuses(api: str) -> dict[str, str]:
    answer = {}
    for group in EXPECTED:
        code, body = get_json(f"{api}/v3/kafka/{CLUSTER}/consumer/{group}/lag")
        answer[group] = (
            (body.get("status") or {}).get("status", "?") if code == 200 and isinstance(body, dict) else str(code)
        )
    return answer


def one_run(args: argparse.Namespace, phase_s: float) -> dict[str, dict[str, str]] | None:
    """Both systems on a fresh Kafka mock and Redis; their statuses, or None when they did not start."""
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
        _, lagwatch_api = start_lagwatch(stack, tmp, control.bootstrap, args.intervals)
        apis = {"burrow": burrow_api, "lagwatch": lagwatch_api}
        for name, api in apis.items():
            for topic in topics:
                if not wait_until(
                    lambda api=api, topic=topic: log_ends_shown(api, topic, [BASE]), f"{name} {topic}", 90
                ):
                    return None
        hogs(stack, args.hogs)
        last = play(writer, args.steps, phase_s)
        for name, api in apis.items():
            for group, (offset, ts) in last.items():
                wait_until(
                    lambda api=api, g=group, o=offset, t=ts: commit_visible(api, g, TOPIC[g], 0, o, t),
                    f"{name} {group}",
                )
        time.sleep(2)  # Burrow's status cache (1 s) and lagwatch's evaluator catch up
        return {name: statuses(api) for name, api in apis.items()}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--hogs", type=int, default=4, help="CPU-bound processes beside both systems")
    parser.add_argument("--steps", type=int, default=14, help="steps per run (more than --intervals: a full window)")
    parser.add_argument("--intervals", type=int, default=10, help="ring size of both systems")
    parser.add_argument("--seed", type=int, default=None, help="for the phases")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    missing = burrow_available()
    if missing:
        print(f"burrow_timed_differential: missing {missing} (scripts/install-system-deps.sh)", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    groups = list(EXPECTED)
    print(f"{args.runs} runs, {args.steps} steps of {STEP_S} s, {args.hogs} CPU hogs; expected {EXPECTED}", flush=True)
    print("| run | phase s | " + " | ".join(f"{g} Burrow / lagwatch" for g in groups) + " | agree |")
    print("| --- | --- | " + " | ".join("---" for _ in groups) + " | --- |")
    agreed = {group: 0 for group in groups}
    whole = 0
    for run in range(1, args.runs + 1):
        phase = rng.uniform(0.05, STEP_S - 0.15)
        answer = one_run(args, phase)
        if answer is None:
            print(f"| {run} | {phase:.2f} | did not start | no |", flush=True)
            continue
        same = {g: answer["burrow"][g] == answer["lagwatch"][g] for g in groups}
        for g in groups:
            agreed[g] += same[g]
        whole += all(same.values())
        cells = " | ".join(f"{answer['burrow'][g]} / {answer['lagwatch'][g]}" for g in groups)
        print(f"| {run} | {phase:.2f} | {cells} | {'yes' if all(same.values()) else 'no'} |", flush=True)
    print("\nagreed per group: " + ", ".join(f"{g} {n}/{args.runs}" for g, n in agreed.items()))
    print(f"every group agreed in {whole}/{args.runs} runs")
    return 0 if whole == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
