"""What the log probe costs (services/ingest/probe_schedule.py over log_probe.py), against the same run without it.

Setup, once per run: a fresh redis-server and an in-process Kafka mock (in-process so that its own request counts can
be read: librdkafka's `rd_kafka_mock_start_request_tracking`), topics of 4 partitions each read by 25 groups (the
shape of bench_scale.py), `--partitions` group partitions in all (default 100,000: 25k groups, 1,000 topics):

* 1 % of them lagging: every group of the first 1 % of the topics commits a few records (1-25) short of the log end,
  within the probe's bound (1,000): each such (partition, committed offset) is a probe to make;
* 1 % on transactional topics: the next 1 % of the topics are written by a real transactional producer (three
  committed transactions of 3 records on each partition), and their groups commit last record + 1 every time, as
  caught-up read_committed consumers do: the offsets read lag 1 (the commit marker) that never moves (STALL, ERR);
  the probe finds nothing unread (OK: `transactional_ok_*` counts them);
* the rest caught up on plain topics.

Each group partition commits 10 times a minute apart (written straight into `__consumer_offsets` as the coordinator
writes it), then `lagwatch run ingest --workers 1` and `lagwatch run evaluator` start with default settings
(offset-refresh 10 s) and `LAGWATCH__INGEST__LOG_PROBE` false in the first run, true in the second. Measured, once
every group has its first status and the first probes have settled (`SETTLE_S`):

* idle (`IDLE_S`, nothing moves): probes and probe failures per minute (the ingest's /metrics), broker requests per
  minute (the mock's request log, by API), the ingest's, the evaluator's and redis-server's CPU seconds per minute;
* STOP delay as bench_scale.py measures it (p50/p99/max of 120 groups that STOP at known instants);
* active (`ACTIVE_S`): every offset-refresh, 25 records on each partition of the lagging topics and one committed
  transaction on each transactional partition, and every group of those topics commits again: lagging ones a step
  behind (where the log end stood before the step's records, past every offset their topic's groups stood at: below
  the log end the poller sampled last, whenever their commit is read, so each is a new (partition, committed
  offset) to probe, 1,000 a tick at 100k, more than the 500 a tick the default rate gives one worker);
  transactional ones at their new last record + 1 (caught up: ahead of the poller's sample until it sees the
  transaction, so they are probed only when a tick falls between that sample and their next commit): the same
  figures.

With `--py-spy`, the probing run's ingest is sampled by py-spy (`--nonblocking`: not paused) through the idle, STOP
and active spans, and the CPU seconds it spent in all, in the probe's schedule (`ProbeSchedule.due`, judging the rings
whose commits or log end changed; `ProbeSchedule.touched`, noting each stored batch's groups; `ProbeSchedule.tick`)
and on the probe's own thread are printed; the collapsed stacks stay in
PROFILE (flamegraph.pl or speedscope read them).

Usage: `python bench/bench_log_probe.py [--partitions 100000] [--py-spy]`.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench_scale import (
    CLUSTER,
    GROUPS_PER_TOPIC,
    PARTITIONS,
    PROBE_TOPIC,
    cpu_seconds,
    lagwatch_process,
    percentile,
    stop_delays,
    wait_for_hash,
)
from confluent_kafka import Producer
from redis import Redis

from lagwatch.devkit import offsets_encoders as encoders
from lagwatch.devkit.mock_kafka import MockKafkaCluster, _lib, stop_process
from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OFFSETS_TOPIC, offsets_partition_for
from lagwatch.devkit.ports import free_port
from lagwatch.devkit.redis_server import RedisServer
from lagwatch.shared.protocol import keys

COMMITS = 10
MINUTE = 60_000
PLAIN_RECORDS = 10  # per partition of a plain topic: its groups commit 1..10
LAGGING_RECORDS = 40  # per partition of a lagging topic: its groups commit up to 15-39
TRANSACTIONS, PER_TRANSACTION = 3, 3
SHARE = 0.01  # of the topics lagging, and as many transactional
STOP_TOPIC_END = 1100  # bench_scale's STOP groups read a log end of 1,100 on their topic
OFFSET_REFRESH_S = 10.0
SETTLE_S = 40.0
IDLE_S = 60.0
ACTIVE_S = 60.0
SAMPLED = {  # where the probing ingest's time goes (py-spy stacks), by a frame its stacks hold
    "ProbeSchedule.due (judging what changed)": "due (lagwatch/services/ingest/probe_schedule.py",
    "ProbeSchedule.touched (noting stored groups)": "touched (lagwatch/services/ingest/probe_schedule.py",
    "ProbeSchedule.tick (all of the schedule's loop)": "tick (lagwatch/services/ingest/probe_schedule.py",
    "the probe's thread (log_probe.py)": "_probe_all (lagwatch/services/ingest/log_probe.py",
}
SAMPLE_RATE = 50  # py-spy samples a second
PROFILE = Path(tempfile.gettempdir()) / "lagwatch-bench-log-probe-ingest.txt"  # the probing ingest's stacks
API_NAMES = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
             10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 14: "SyncGroup", 18: "ApiVersions",
             22: "InitProducerId", 24: "AddPartitionsToTxn", 26: "EndTxn", 71: "GetTelemetrySubscriptions"}  # fmt: skip


@dataclass(frozen=True)
class Layout:
    groups: int
    topics: int
    lagging: list[str]
    transactional: list[str]

    @classmethod
    def of(cls, partitions: int) -> Layout:
        groups = max(1, partitions // PARTITIONS)
        topics = (groups + GROUPS_PER_TOPIC - 1) // GROUPS_PER_TOPIC
        share = max(1, round(topics * SHARE))
        names = [f"topic-{t}" for t in range(topics)]
        return cls(groups, topics, names[:share], names[share : 2 * share])

    def topic_of(self, group: int) -> str:
        return f"topic-{group % self.topics}"


class MockRequests:
    """The mock cluster's own log of the requests it answered (librdkafka >= 2.4), counted by API."""

    def __init__(self, cluster: MockKafkaCluster) -> None:
        lib = _lib()
        vp = ctypes.c_void_p
        for name, argtypes, restype in (
            ("rd_kafka_mock_start_request_tracking", [vp], None),
            ("rd_kafka_mock_clear_requests", [vp], None),
            ("rd_kafka_mock_get_requests", [vp, ctypes.POINTER(ctypes.c_size_t)], ctypes.POINTER(vp)),
            ("rd_kafka_mock_request_api_key", [vp], ctypes.c_int16),
            ("rd_kafka_mock_request_destroy_array", [ctypes.POINTER(vp), ctypes.c_size_t], None),
        ):
            getattr(lib, name).argtypes, getattr(lib, name).restype = argtypes, restype
        self.lib, self.mcluster = lib, cluster._mcluster
        lib.rd_kafka_mock_start_request_tracking(self.mcluster)

    def take(self) -> Counter[str]:
        """Requests since the last take, by API name; the log is emptied."""
        count = ctypes.c_size_t(0)
        requests = self.lib.rd_kafka_mock_get_requests(self.mcluster, ctypes.byref(count))
        by_api: Counter[str] = Counter()
        for i in range(count.value):
            key = self.lib.rd_kafka_mock_request_api_key(requests[i])
            by_api[API_NAMES.get(key, f"api-{key}")] += 1
        if count.value:
            self.lib.rd_kafka_mock_request_destroy_array(requests, count)
        self.lib.rd_kafka_mock_clear_requests(self.mcluster)
        return by_api


def produce_plain(bootstrap: str, topics: list[str], records: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for topic in topics:
        for partition in range(PARTITIONS):
            for i in range(records):
                producer.produce(topic, b"r%d" % i, partition=partition)
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("plain records not delivered")


class Transactions:
    """A real transactional producer (one `transactional.id`), writing committed transactions."""

    def __init__(self, bootstrap: str) -> None:
        self.last: dict[tuple[str, int], int] = {}  # the offset of each partition's last record
        # log_level 3: the producer outlives the cluster of its run, whose end it would report at length
        settings = {"bootstrap.servers": bootstrap, "transactional.id": "bench-log-probe", "log_level": 3}
        self.producer = Producer(settings)
        self.producer.init_transactions(30)

    def write(self, topics: list[str], transactions: int) -> dict[tuple[str, int], int]:
        """`transactions` committed transactions of PER_TRANSACTION records on every partition of `topics`;
        (topic, partition) -> the offset of its last record."""
        for _ in range(transactions):
            self.producer.begin_transaction()
            for topic in topics:
                for partition in range(PARTITIONS):
                    for i in range(PER_TRANSACTION):
                        self.producer.produce(topic, b"t%d" % i, partition=partition, on_delivery=self._delivered)
            self.producer.commit_transaction(30)
        self.producer.flush(30)
        return dict(self.last)

    def _delivered(self, error, message) -> None:
        if error is None:
            key = (message.topic(), message.partition())
            self.last[key] = max(self.last.get(key, -1), message.offset())


def final_offsets(layout: Layout, transactional_last: dict[tuple[str, int], int]) -> dict[tuple[int, int], int]:
    """(group, partition) -> the offset the group commits last."""
    lagging, finals = set(layout.lagging), {}
    for g in range(layout.groups):
        topic = layout.topic_of(g)
        for p in range(PARTITIONS):
            if topic in lagging:
                finals[(g, p)] = LAGGING_RECORDS - 1 - g // layout.topics % GROUPS_PER_TOPIC  # 1-25 short
            elif (topic, p) in transactional_last:
                finals[(g, p)] = transactional_last[(topic, p)] + 1  # last record + 1, short of the marker
            else:
                finals[(g, p)] = PLAIN_RECORDS
    return finals


Committed = tuple[int, int, int, int]  # (group, partition, offset, commit timestamp)


def write_commits(producer: Producer, layout: Layout, commits: list[Committed]) -> None:
    """Offset commits into `__consumer_offsets`, as the group coordinator writes them."""
    for g, p, offset, at in commits:
        group = f"group-{g}"
        key = encoders.encode_offset_commit_key(group, layout.topic_of(g), p)
        value = encoders.encode_offset_commit_value(offset, at, version=3)
        while True:
            try:
                producer.produce(OFFSETS_TOPIC, value, key, partition=offsets_partition_for(group))
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("commits not delivered")


def commits_producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000})


def history(layout: Layout, finals: dict[tuple[int, int], int]) -> list[Committed]:
    """COMMITS commits a minute apart per group partition, the last one now: up to its final offset, or all at it
    on the transactional topics (a caught-up consumer commits where it stands: offsets alone read STALL there)."""
    now = int(time.time() * 1000)
    transactional = set(layout.transactional)
    standing = {g for g in range(layout.groups) if layout.topic_of(g) in transactional}
    commits = []
    for k in range(COMMITS):
        at, behind = now - (COMMITS - 1 - k) * MINUTE, COMMITS - 1 - k
        commits += [(g, p, final if g in standing else max(final - behind, 0), at) for (g, p), final in finals.items()]
    return commits


def build(cluster: MockKafkaCluster, layout: Layout) -> tuple[float, Transactions, dict[tuple[int, int], int]]:
    """Topics, records and commits of the workload; seconds it took, the transactional producer, and each group
    partition's committed offset."""
    started = time.perf_counter()
    for t in range(layout.topics):
        cluster.create_topic(f"topic-{t}", PARTITIONS)
    cluster.create_topic(PROBE_TOPIC, 1)  # bench_scale's STOP groups' topic: the ingest removes topics Kafka lacks
    special = set(layout.lagging) | set(layout.transactional)
    plain = [f"topic-{t}" for t in range(layout.topics) if f"topic-{t}" not in special]
    produce_plain(cluster.bootstrap, plain, PLAIN_RECORDS)
    produce_plain(cluster.bootstrap, layout.lagging, LAGGING_RECORDS)
    produce_stop_topic(cluster.bootstrap)
    transactions = Transactions(cluster.bootstrap)
    finals = final_offsets(layout, transactions.write(layout.transactional, TRANSACTIONS))
    write_commits(commits_producer(cluster.bootstrap), layout, history(layout, finals))
    return time.perf_counter() - started, transactions, finals


def produce_stop_topic(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(STOP_TOPIC_END):
        producer.produce(PROBE_TOPIC, b"s%d" % i, partition=0)
    if producer.flush(60):
        raise RuntimeError("STOP topic records not delivered")


def transactional_ok(redis_url: str, layout: Layout) -> str:
    """How many of the groups on transactional topics (caught up past the markers) read OK, of how many."""
    topics = set(layout.transactional)
    groups = [f"group-{g}" for g in range(layout.groups) if layout.topic_of(g) in topics]
    client = Redis.from_url(redis_url)
    try:
        statuses = client.hmget(keys.statuses_index(CLUSTER), groups)
    finally:
        client.close()
    return f"{sum(status == b'OK' for status in statuses)}/{len(groups)}"


def probe_counts(port: int) -> tuple[float, float]:
    """(probes, failures) so far, from the ingest's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    probes = sum(float(v) for v in re.findall(r"^lagwatch_ingest_log_probes_total\{[^}]*\} (\S+)$", text, re.M))
    failed = re.findall(r"^lagwatch_ingest_log_probe_failures_total\{[^}]*\} (\S+)$", text, re.M)
    return probes, sum(float(v) for v in failed)


def wait_metrics(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            probe_counts(port)
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"the ingest's /metrics on port {port} did not answer")


@dataclass
class Watched:
    """The processes measured, and a way to read their counters all at once."""

    ingest: subprocess.Popen
    evaluator: subprocess.Popen
    redis_pid: int
    ingest_port: int
    requests: MockRequests
    bootstrap: str

    def snapshot(self) -> dict[str, float]:
        probes, failures = probe_counts(self.ingest_port)
        return {
            "ingest": cpu_seconds(self.ingest.pid),
            "evaluator": cpu_seconds(self.evaluator.pid),
            "redis": cpu_seconds(self.redis_pid),
            "probes": probes,
            "failures": failures,
            "at": time.monotonic(),
        }


@dataclass
class Phase:
    """Per-minute figures over a measured span."""

    figures: dict[str, float] = field(default_factory=dict)
    requests: Counter[str] = field(default_factory=Counter)

    @classmethod
    def measure(cls, watched: Watched, seconds: float, during=None) -> Phase:
        watched.requests.take()  # forget what came before
        before = watched.snapshot()
        if during is None:
            time.sleep(seconds)
        else:
            during(seconds)
        after = watched.snapshot()
        requests = watched.requests.take()
        per_minute = 60 / (after["at"] - before["at"])
        figures = {f"{k}_per_min": (after[k] - before[k]) * per_minute for k in before if k != "at"}
        figures["requests_per_min"] = sum(requests.values()) * per_minute
        return cls(figures, Counter({k: round(v * per_minute) for k, v in requests.items()}))


class Moving:
    """A `during` for Phase.measure: every offset-refresh, 25 records on each lagging partition and a transaction on
    each transactional one, and their groups commit again (lagging ones a step behind, transactional ones at their new
    last record + 1): each commit is a new (partition, offset) to probe."""

    def __init__(self, bootstrap: str, layout: Layout, transactions: Transactions, finals: dict) -> None:
        self.layout, self.transactions, self.finals = layout, transactions, finals
        self.plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.commits = commits_producer(bootstrap)
        self.lagging, self.transactional = set(layout.lagging), set(layout.transactional)

    def __call__(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.step()
            time.sleep(min(OFFSET_REFRESH_S, max(deadline - time.monotonic(), 0)))

    def step(self) -> None:
        for topic in self.layout.lagging:
            for partition in range(PARTITIONS):
                for _ in range(GROUPS_PER_TOPIC):
                    self.plain.produce(topic, b"more", partition=partition)
        self.plain.flush(10)
        last = self.transactions.write(self.layout.transactional, 1)
        now, commits = int(time.time() * 1000), []
        for (g, p), offset in self.finals.items():
            topic = self.layout.topic_of(g)
            if topic in self.lagging:
                # a step behind the records just written: below any log end the poller sampled since the last step,
                # so offsets alone read it lagging whenever its commit is read (a commit ahead of the sample is not)
                self.finals[(g, p)] = offset + GROUPS_PER_TOPIC
                commits.append((g, p, offset, now))
            elif topic in self.transactional:
                self.finals[(g, p)] = last[(topic, p)] + 1
                commits.append((g, p, self.finals[(g, p)], now))
        write_commits(self.commits, self.layout, commits)


def start_services(cluster: MockKafkaCluster, redis: RedisServer, probing: bool) -> tuple[Watched, list]:
    env = dict(
        os.environ,
        REDIS_URL=redis.url,
        KAFKA_BOOTSTRAP_SERVERS=cluster.bootstrap,
        LAGWATCH__INGEST__LOG_PROBE=str(probing).lower(),
        LAGWATCH__INGEST__WORKERS="1",  # one worker process: the command's own pid is the one measured
    )
    port = free_port()
    ingest = lagwatch_process("ingest", env, port)
    services = [ingest]
    evaluator = lagwatch_process("evaluator", env)
    services.append(evaluator)
    return Watched(ingest, evaluator, redis.pid, port, MockRequests(cluster), cluster.bootstrap), services


class Sampler:
    """py-spy recording a process's stacks (raw, collapsed) until stopped; where its samples were."""

    def __init__(self, pid: int, out: Path) -> None:
        self.out = out
        spy = Path(sys.executable).parent / "py-spy"
        command = [str(spy), "record", "-p", str(pid), "--nonblocking", "--format", "raw", "-o", str(out),
                   "-r", str(SAMPLE_RATE)]  # fmt: skip
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def seconds(self) -> dict[str, float]:
        """Seconds on a CPU (samples / rate; py-spy records running threads only) in all, and in each of SAMPLED."""
        self.proc.send_signal(signal.SIGINT)  # py-spy writes what it has on SIGINT
        self.proc.wait(timeout=60)
        counts: Counter[str] = Counter()
        for line in self.out.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            counts["all of the ingest"] += int(n)
            for name, needle in SAMPLED.items():
                if needle in stack:
                    counts[name] += int(n)
        return {name: counts[name] / SAMPLE_RATE for name in ["all of the ingest", *SAMPLED]}


@dataclass(frozen=True)
class Spans:
    settle_s: float = SETTLE_S
    idle_s: float = IDLE_S
    active_s: float = ACTIVE_S
    py_spy: bool = False


def one_run(layout: Layout, probing: bool, spans: Spans) -> dict:
    out: dict = {"probing": probing}
    with RedisServer() as redis:
        redis.start()
        topics = {OFFSETS_TOPIC: DEFAULT_PARTITIONS, "lagwatch.changes": 4, "lagwatch.status": 4}
        cluster = MockKafkaCluster(topics=topics)
        cluster.start()
        services: list[subprocess.Popen] = []
        try:
            built, transactions, finals = build(cluster, layout)
            out["build_s"] = round(built, 1)
            started = time.perf_counter()
            watched, services = start_services(cluster, redis, probing)
            wait_metrics(watched.ingest_port)
            judged = asyncio.run(wait_for_hash(redis.url, keys.group_results(CLUSTER), layout.groups, 900, started))
            out["first_statuses_s"] = round(judged, 1)
            time.sleep(spans.settle_s)  # the first probes (500 a tick at most), and their evaluations
            out["settled_probes"], out["settled_failures"] = probe_counts(watched.ingest_port)
            out["transactional_ok_settled"] = transactional_ok(redis.url, layout)
            out |= measured(watched, redis.url, spans, Moving(cluster.bootstrap, layout, transactions, finals))
        finally:
            for proc in services:
                stop_process(proc, timeout=20)
            cluster.stop()
    return out


def measured(watched: Watched, redis_url: str, spans: Spans, moving: Moving) -> dict:
    """The idle span, the STOP delays, the active span (py-spy through all three if asked)."""
    out: dict = {}
    sampler = Sampler(watched.ingest.pid, PROFILE) if spans.py_spy else None
    out["idle"] = Phase.measure(watched, spans.idle_s)
    delays = asyncio.run(stop_delays(watched.bootstrap, redis_url, lead_s=5.0))
    out["stop_p50_s"], out["stop_p99_s"], out["stop_max_s"] = (
        statistics.median(delays),
        percentile(delays, 0.99),
        max(delays),
    )
    out["active"] = Phase.measure(watched, spans.active_s, moving)
    time.sleep(3)  # the last tick's evaluations
    out["transactional_ok_active"] = transactional_ok(redis_url, moving.layout)
    if sampler is not None:
        out["py_spy"] = sampler.seconds()
    return out


def run(partitions: int = 100_000, spans: Spans = Spans()) -> dict:
    """Both runs on the same workload, without the probe first."""
    layout = Layout.of(partitions)
    runs = [one_run(layout, False, replace(spans, py_spy=False)), one_run(layout, True, spans)]
    return {"partitions": layout.groups * PARTITIONS, "groups": layout.groups, "topics": layout.topics,
            "lagging_topics": len(layout.lagging), "transactional_topics": len(layout.transactional),
            "off": runs[0], "on": runs[1]}  # fmt: skip


def ratio(on: float, off: float) -> str:
    return f"{on / off:.2f}x" if off else "-"


def report(result: dict) -> None:
    off, on = result["off"], result["on"]
    print(
        f"log probe: {result['partitions']} group partitions ({result['groups']} groups x {PARTITIONS}, "
        f"{result['topics']} topics: {result['lagging_topics']} lagging, {result['transactional_topics']} "
        "transactional)"
    )
    print(f"{'':38} {'probe off':>12} {'probe on':>12} {'on/off':>8}")
    for name in ("build_s", "first_statuses_s", "settled_probes", "settled_failures", "transactional_ok_settled"):
        print(f"{name:38} {off[name]:>12} {on[name]:>12}")
    for phase in ("idle", "active"):
        for name, value in on[phase].figures.items():
            before = off[phase].figures[name]
            print(f"{phase + ' ' + name:38} {before:>12.2f} {value:>12.2f} {ratio(value, before):>8}")
        apis = sorted(set(off[phase].requests) | set(on[phase].requests))
        for api in apis:
            before, value = off[phase].requests[api], on[phase].requests[api]
            print(f"{phase + ' requests/min ' + api:38} {before:>12} {value:>12} {ratio(value, before):>8}")
    print(f"{'transactional_ok_active':38} {off['transactional_ok_active']:>12} {on['transactional_ok_active']:>12}")
    for name in ("stop_p50_s", "stop_p99_s", "stop_max_s"):
        print(f"{name:38} {off[name]:>12.3f} {on[name]:>12.3f}")
    for name, seconds in on.get("py_spy", {}).items():
        print(f"py-spy, probing ingest, idle + STOP + active spans: {seconds:7.2f} CPU-s in {name}")
    if "py_spy" in on:
        print(f"py-spy stacks (collapsed): {PROFILE}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=100_000, help="group partitions (4 per group)")
    parser.add_argument("--settle-s", type=float, default=SETTLE_S, help="wait after the first statuses")
    parser.add_argument("--idle-s", type=float, default=IDLE_S, help="the idle span measured")
    parser.add_argument("--active-s", type=float, default=ACTIVE_S, help="the span with lagging log ends moving")
    parser.add_argument("--py-spy", action="store_true", help="sample the probing ingest with py-spy")
    args = parser.parse_args()
    report(run(args.partitions, Spans(args.settle_s, args.idle_s, args.active_s, args.py_spy)))


if __name__ == "__main__":
    main()
