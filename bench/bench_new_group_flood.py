"""A flood of new consumer-group names against a real alert: how long a known group's REWIND takes from its commit
to the alert at the webhook receiver, on `make run`'s system, with and without a flood written just before it.

Setup: `lagwatch dev up` (the whole demo system: Kafka mock, Redis, the five services, the webhook receiver) in a
temporary state directory. A group `bench-known-<n>` commits at the log end of its own topic three times (OK), then
`--groups` brand-new group names each commit once (written at once, straight into `__consumer_offsets` as the
coordinator would), then the known group commits an offset far behind its last one (REWIND, ERR). Timed: from that
commit's acknowledgement by Kafka to the `open` notification for the group arriving at the receiver (its record in
the demo's alerts file). Each round runs the same steps with no flood first (the baseline), then with the flood.

    python bench/bench_new_group_flood.py --groups 100000
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from lagwatch.devkit import offsets_encoders as encoders
from lagwatch.devkit.offsets_topic_writer import offsets_partition_for

OFFSETS_TOPIC = "__consumer_offsets"
ALERT_TIMEOUT_S = 300


def start_system(state_dir: Path) -> tuple[subprocess.Popen, str]:
    """`lagwatch dev up` until its banner has printed; (the process, Kafka's bootstrap address)."""
    lagwatch = Path(sys.executable).parent / "lagwatch"
    command = [str(lagwatch), "dev", "up", "--state-dir", str(state_dir), "--api-port", "0"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ)
    bootstrap = None
    assert proc.stdout is not None
    for line in proc.stdout:
        found = re.search(r"Kafka:\s+(\S+)", line)
        if found:
            bootstrap = found.group(1)
        if line.startswith("Demo workload") and bootstrap:
            break
    else:
        raise SystemExit(f"lagwatch dev up ended before it was running (exit {proc.wait()})")
    os.set_blocking(proc.stdout.fileno(), False)  # its further output is not read: never let it block the pipe
    return proc, bootstrap


class Offsets:
    """Writes offset commits into `__consumer_offsets` as the group coordinator would (librdkafka's producer)."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
        self.bootstrap = bootstrap

    def commit_many(self, groups: list[str], topic: str, offset: int) -> None:
        now = int(time.time() * 1000)
        value = encoders.encode_offset_commit_value(offset, now, version=3)
        for i, group in enumerate(groups):
            key = encoders.encode_offset_commit_key(group, topic, 0)
            self._produce(key, value, offsets_partition_for(group))
            if i % 10_000 == 0:
                self.producer.poll(0)
        self.producer.flush(60)

    def commit(self, group: str, topic: str, offset: int) -> float:
        """One commit; when Kafka acknowledged it (time.time())."""
        value = encoders.encode_offset_commit_value(offset, int(time.time() * 1000), version=3)
        key = encoders.encode_offset_commit_key(group, topic, 0)
        self._produce(key, value, offsets_partition_for(group))
        self.producer.flush(30)
        return time.time()

    def _produce(self, key: bytes, value: bytes, partition: int) -> None:
        while True:
            try:
                self.producer.produce(OFFSETS_TOPIC, value, key, partition=partition)
                return
            except BufferError:
                self.producer.poll(0.05)

    def messages(self, topic: str, n: int) -> int:
        """Produce `n` messages to `topic` (created by the mock on first use); its log end after."""
        for i in range(n):
            self.producer.produce(topic, b"m%d" % i, partition=0)
        self.producer.flush(30)
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-flood-watermarks"})
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        finally:
            consumer.close()


def alert_for(alerts_file: Path, group: str, since: float) -> tuple[float, float] | None:
    """When the `open` notification of `group` reached the receiver's webhook path, and when the evaluator judged
    the status it announces (None: not yet)."""
    if not alerts_file.exists():
        return None
    for line in alerts_file.read_text().splitlines():
        alert = json.loads(line)
        ours = alert["channel"] == "webhook" and alert["kind"] == "open" and f'"{group}"' in alert["body"]
        if ours and alert["received_at"] >= since:
            return float(alert["received_at"]), json.loads(alert["body"])["evaluated_at"] / 1000
    return None


def new_groups_waiting(state_dir: Path) -> float:
    """What the evaluator's /metrics says of new groups still queued for their first evaluation."""
    env = dict(line.split("=", 1) for line in (state_dir / "env").read_text().splitlines() if "=" in line)
    with urllib.request.urlopen(f"{env['EVALUATOR_URL']}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = re.search(r"^lagwatch_evaluator_new_groups_waiting\{[^}]*\} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def until_drained(state_dir: Path) -> float:
    """Wait until the evaluator has judged every new group of the flood before (a round's own new group would
    queue behind them); how long that took."""
    started = time.time()
    while new_groups_waiting(state_dir) > 0 and time.time() - started < ALERT_TIMEOUT_S:
        time.sleep(0.5)
    return time.time() - started


def one_round(offsets: Offsets, alerts_file: Path, name: str, flood: int) -> tuple[float, float, float]:
    """(seconds from the REWIND commit to its alert, of which to its evaluation; seconds to write the flood)."""
    group, topic = f"bench-known-{name}", f"bench-topic-{name}"
    log_end = offsets.messages(topic, 100)
    for _ in range(3):
        offsets.commit(group, topic, log_end)
        time.sleep(1.0)
    time.sleep(3.0)  # evaluated OK (a window of three caught-up commits)
    started = time.time()
    if flood:
        offsets.commit_many([f"flood-{name}-{i}" for i in range(flood)], topic, 0)
    written = time.time() - started
    committed = offsets.commit(group, topic, 1)  # far behind its last commit: REWIND
    deadline = committed + ALERT_TIMEOUT_S
    while time.time() < deadline:
        found = alert_for(alerts_file, group, committed - 1)
        if found is not None:
            return found[0] - committed, found[1] - committed, written
        time.sleep(0.05)
    return float("inf"), float("inf"), written


def run(groups: int = 100_000, rounds: int = 1) -> dict:
    """Per round, the baseline's and the flood's seconds from the REWIND commit to its alert (and to its
    evaluation), and the seconds the flood took to write."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="lagwatch-flood-") as tmp:
        proc, bootstrap = start_system(Path(tmp))
        try:
            time.sleep(15)  # the demo's groups and services settle
            offsets = Offsets(bootstrap)
            alerts = Path(tmp) / "alerts.jsonl"
            for r in range(rounds):
                for flood in (0, groups):
                    drained = until_drained(Path(tmp))
                    latency, evaluated, written = one_round(offsets, alerts, f"{r}-{flood}", flood)
                    timings = {"written_s": written, "alert_s": latency, "evaluated_s": evaluated}
                    rows.append({"round": r, "flood": flood, **timings, "drained_before_s": drained})
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    flooded = [row["alert_s"] for row in rows if row["flood"]]
    return {"groups": groups, "rounds": rows, "worst_alert_after_flood_s": max(flooded)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=100_000, help="new group names in the flood")
    parser.add_argument("--rounds", type=int, default=1, help="baseline and flood rounds")
    args = parser.parse_args()
    result = run(args.groups, args.rounds)
    header = f"{'round':>5} {'flood':>8} {'flood written':>14} {'REWIND commit -> alert':>23} {'of it, evaluated':>17}"
    print(header + "   (waited for the flood before to be judged)")
    for row in result["rounds"]:
        print(
            f"{row['round']:>5} {row['flood']:>8} {row['written_s']:>13.1f}s {row['alert_s']:>22.2f}s"
            f" {row['evaluated_s']:>16.2f}s   ({row['drained_before_s']:.1f}s)"
        )


if __name__ == "__main__":
    main()
