"""A differential check of lagwatch against the real Burrow 1.2.1 binary, for teams migrating from Burrow.

    python bench/burrow_differential.py [--intervals 10] [--keep DIR] [--json FILE]

Both systems watch the same Kafka mock (its own process): Burrow 1.2.1 (`/usr/bin/Burrow`, on a ZooKeeper started
here) and lagwatch (a fresh redis-server, `lagwatch run ingest`, `lagwatch run evaluator`, `lagwatch run api`).
Both poll log ends every second (`offset-refresh` 1) and keep `--intervals` commits per partition (Burrow's TOML
is bench/bench_vs_burrow.py's `burrow_config` with these settings).

Scenario groups are written live, round by round, in coordinator format into `__consumer_offsets`: each round
first moves the data topics' log ends (messages produced) and waits until BOTH systems show the new log ends on
`/v3/kafka/<cluster>/topic/<topic>`, then writes that round's commits and waits until BOTH show them on
`/v3/kafka/<cluster>/consumer/<group>`. So every stored commit's lag is computed by both against the same log end.
Commit timestamps are relative to the wall clock (recent groups: the newest now, 60 s apart; "old" groups 20 min
back), so the time rule (STOP) applies. Each group exercises one rule (see `build`): OK, WARN, STOP, STALL, REWIND
(and the two REWIND cases where 1.2.1 and v1.3.7+ disagree), never-committed and assigned-only partitions, fewer
commits than the ring, lag 0 throughout, commits above the log end, min-distance merges, a coordinator clock going
back, a mixed group with owners, group and offset tombstones, expired commits, and a topic created mid-run and
committed on before either system polled it.

Then, twice ("early": just after the last round; "late": once every kept log-end sample has rolled over, which
is what `g-quiet` needs), both are asked the same routes and compared field by field:
`/v3/kafka/<c>/consumer/<g>/lag`, `/v3/kafka/<c>/consumer`, `/v3/kafka/<c>/consumer/<g>`, `/v3/kafka/<c>/topic`
and `/v3/kafka/<c>/topic/<t>`: HTTP status, group status, complete, partition_count, maxlag, totallag, each
partition's status, current_lag, complete, start/end offsets, owners, and the JSON field names (shape).
Every difference is printed in one table; the known ones carry their explanation (KNOWN).

Needs the `burrow` and `zookeeper` packages (scripts/install-system-deps.sh), java and redis-server. Every process
started here is stopped at the end (and gets SIGTERM should this script die).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_burrow import (  # the Burrow bench's process helpers, its ZooKeeper and its Burrow TOML
    BURROW,
    BenchError,
    burrow_available,
    burrow_config,
    free_port,
    get_json,
    lagwatch_bin,
    log_tail,
    spawn,
    start_api,
    stop_group,
    wait_for,
    zookeeper,
)

from lagwatch.devkit import offsets_encoders as encoders
from lagwatch.devkit.mock_kafka import MockKafkaControl, start_mock_kafka_process, stop_process
from lagwatch.devkit.offsets_topic_writer import OFFSETS_TOPIC, member, offsets_partition_for
from lagwatch.devkit.redis_server import RedisServer

CLUSTER = "diff"
OFFSETS_PARTITIONS = 12
# the topics lagwatch's own services write to, created with the data topics
LAGWATCH_TOPICS = {"lagwatch.changes": 4, "lagwatch.status": 3, "lagwatch.dlq": 1, "lagwatch.history": 3}
BASE = 200  # every data partition's log end before the systems start
SPACING_MS = 60_000  # between two commits of a "recent" group
OLD_MS = 20 * 60_000  # how far back the newest commit of an "old" group is
EXPIRED_MS = 8 * 86_400_000  # older than expire-group (7 days)
AGE_MS = {"recent": 0, "old": OLD_MS, "expired": EXPIRED_MS}  # by Scenario.timestamps
OFFSET_REFRESH = 1  # seconds, both systems
# seconds, both systems: long, so that the commit written on NEW_TOPIC right after its creation almost always
# reaches Burrow before its next metadata refresh (a refresh in between, ~1 s of 20, would hide the difference)
TOPIC_REFRESH = 20
BURROW_EXPIRE_CACHE = (
    1  # seconds Burrow caches a group's status: the snapshots, 3 s after the last write, see a fresh one
)
WAIT_S = 45.0
NEW_TOPIC = "t-new"  # created by the harness in round new_topic_round(), not at the start
QUIET_TOPIC = "t-quiet"  # gets QUIET_MESSAGES more messages after the last round (g-quiet)
QUIET_MESSAGES = 30
WIGGLE = (5, 8, 3, 9, 4, 7, 2, 6, 3, 5)  # a lag that goes down now and then, round by round

Answer = tuple[int, Any]  # (HTTP status, JSON body or text), as `get_json` returns it


def new_topic_round(rounds: int) -> int:
    """The round (from 0) in which NEW_TOPIC is created and first committed on."""
    return rounds // 2 - 1


# --- the scenarios ----------------------------------------------------------------------------------------------


@dataclass
class Part:
    """One committed (or never committed) partition: its commits per round (None: no commit that round)."""

    topic: str
    partition: int
    commits: Sequence[int | None]


@dataclass
class Scenario:
    """One consumer group, written round by round."""

    group: str
    rule: str  # what it exercises, and what Burrow's rules say it is
    parts: list[Part]
    timestamps: str = "recent"  # recent | old | expired: how far back its newest commit is (AGE_MS)
    owners: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # member -> {topic: [partitions]}
    commit_age_ms: int = 0  # extra age of every commit (g-one: one commit, 30 s old)
    twice: bool = False  # a second commit 500 ms after each (offset + 1): merged by min-distance 1
    clock_back: int | None = None  # this round's commit is stamped 120 s before the one before it
    tombstone: tuple[str, int] | str | None = None  # after the last round: "group", or (topic, partition) of an offset


@dataclass
class Plan:
    """What the harness writes: the data topics (name -> partitions), each data partition's log end per round
    (None: its topic does not exist yet) and the scenario groups."""

    rounds: int
    topics: dict[str, int] = field(default_factory=dict)
    ends: dict[tuple[str, int], Sequence[int | None]] = field(default_factory=dict)
    scenarios: list[Scenario] = field(default_factory=list)

    def ramp(self, step: int, plus: int = 0) -> list[int]:
        """BASE + plus + step in the first round, `step` more every round after."""
        return [BASE + step * (r + 1) + plus for r in range(self.rounds)]

    def trailing(self, step: int) -> list[int]:
        """`ramp(step)` behind by a lag that shrinks by one a round, to 1 in the last."""
        return [end - (self.rounds - r) for r, end in enumerate(self.ramp(step))]

    def wiggling(self, step: int) -> list[int]:
        """`ramp(step)` behind by a lag that goes down now and then (WIGGLE)."""
        return [end - WIGGLE[r % len(WIGGLE)] for r, end in enumerate(self.ramp(step))]

    def topic(self, name: str, partitions: int, *ends: Sequence[int | None]) -> None:
        """A data topic with its log ends per partition; partitions past the given ones stay at BASE."""
        self.topics[name] = partitions
        for p in range(partitions):
            self.ends[(name, p)] = ends[p] if p < len(ends) else [BASE] * self.rounds

    def group(
        self,
        group: str,
        rule: str,
        topic: str,
        ends: Sequence[int | None],
        commits: Sequence[int | None],
        partitions: int = 1,
        **options: Any,
    ) -> None:
        """A group committing on partition 0 of its own topic (`ends`: that partition's log ends): most scenarios."""
        self.topic(topic, partitions, ends)
        self.scenarios.append(Scenario(group, rule, [Part(topic, 0, commits)], **options))

    def log_ends_at(self, topic: str, r: int) -> list[int | None]:
        return [self.ends[(topic, p)][r] for p in range(self.topics[topic])]


def build(rounds: int) -> Plan:
    """The data topics, their log ends per round and the scenario groups, in the order they are reported."""
    plan = Plan(rounds)
    for add in (add_rule_groups, add_rewind_groups, add_window_groups, add_owner_groups, add_late_groups):
        add(plan)
    return plan


def rewound(rounds: int) -> list[int]:
    """Up by 10 a round for half the rounds, then back to BASE + 20 and up by 5: a drop never made good."""
    first = [BASE + 10 * (r + 1) for r in range(rounds // 2)]
    return first + [BASE + 20 + 5 * r for r in range(rounds - len(first))]


def add_rule_groups(plan: Plan) -> None:
    """OK, WARN, STOP and STALL."""
    ramp, n = plan.ramp, plan.rounds
    plan.group("g-zero", "lag 0 throughout -> OK", "t-zero", ramp(10), ramp(10))
    plan.group("g-ok", "lag > 0, goes down now and then -> OK", "t-ok", ramp(20), plan.wiggling(20))
    plan.group("g-warn", "progressing, lag growing -> WARN", "t-warn", ramp(30), ramp(10))
    plan.group("g-warn-flat", "progressing, lag constant 50 -> WARN", "t-warnflat", ramp(10, 50), ramp(10))
    plan.group("g-stop", "commits 20 min old, lag 400 -> STOP", "t-stop", ramp(10, 400), ramp(10), timestamps="old")
    plan.group("g-stall", "same offset every commit, lag growing -> STALL", "t-stall", ramp(10), [BASE] * n)


def add_rewind_groups(plan: Plan) -> None:
    """REWIND, and the two cases where 1.2.1 and v1.3.7+ disagree."""
    n, half = plan.rounds, plan.rounds // 2
    rule = "first drop never made good, lag > 0 -> REWIND"
    plan.group("g-rewind", rule, "t-rewind", plan.ramp(10, 100), rewound(n))
    rule = "drop made good at once, lag > 0 and decreasing (1.2.1: REWIND; 1.3+: OK)"
    made_good = [BASE + 10, BASE + 5] + [BASE + 20 * (r - 1) for r in range(2, n)]
    plan.group("g-rewind-rec", rule, "t-rewrec", plan.ramp(10, 100), made_good)
    rule = "lag 0 at some entries, then a drop never made good (1.2.1: OK; 1.3+: REWIND)"
    ends = [BASE + 50] * half + [BASE + 100] * (n - half)
    commits = [BASE + 10, BASE + 30] + [BASE + 50] * (half - 2) + [BASE + 20 + 5 * i for i in range(n - half)]
    plan.group("g-rewind-zero", rule, "t-rewzero", ends, commits)


def add_window_groups(plan: Plan) -> None:
    """Partitions never committed, fewer commits than the ring, one commit, commits above the log end, a consumer
    caught up long ago, expired commits."""
    ramp, n = plan.ramp, plan.rounds
    rule = "commits on partition 0 of 4 only (lag 10..1) -> OK, 3 never-committed partitions"
    plan.group("g-never", rule, "t-never", ramp(10), plan.trailing(10), partitions=4)
    rule = "3 commits in a ring of `intervals`, lag growing -> WARN, complete 0.3"
    plan.group("g-few", rule, "t-few", ramp(20), [None if r < n - 3 else BASE + 10 * (r + 1) for r in range(n)])
    rule = "a single commit 30 s old with lag -> STOP (window spans 0 s)"
    plan.group("g-one", rule, "t-one", [BASE + 60] * n, [None] * (n - 1) + [BASE + 10], commit_age_ms=30_000)
    rule = "commits above the log end -> lag 0, OK"
    plan.group("g-ahead", rule, "t-ahead", [BASE] * n, [BASE + 5 + r for r in range(n)])
    rule = (
        f"old commits reaching the log end, then {QUIET_MESSAGES} new messages: "
        "early OK (caught up recently), late STOP"
    )
    plan.group("g-quiet", rule, QUIET_TOPIC, [BASE + 10 * n] * n, ramp(10), timestamps="old")
    rule = "commits 8 days old -> dropped, NOTFOUND"
    plan.group("g-expired", rule, "t-exp", ramp(10), ramp(10), timestamps="expired")


def add_owner_groups(plan: Plan) -> None:
    """Group metadata: a mixed group with owners, and partitions assigned but never committed."""
    ramp, n = plan.ramp, plan.rounds
    plan.topic("t-mix", 4, ramp(10), ramp(30), ramp(10))  # p3 stays at BASE
    plan.topic("t-mix2", 2, ramp(10, 100), ramp(20))
    parts = [
        Part("t-mix", 0, ramp(10)),
        Part("t-mix", 1, ramp(10)),
        Part("t-mix", 2, [BASE] * n),
        Part("t-mix2", 0, rewound(n)),
        Part("t-mix2", 1, plan.wiggling(20)),
    ]
    rule = "t-mix p0 OK (lag 0), p1 WARN, p2 STALL, p3 never committed; t-mix2 p0 REWIND, p1 OK -> ERR; owners"
    owners = {"m-1": {"t-mix": [0, 1]}, "m-2": {"t-mix": [2, 3], "t-mix2": [0, 1]}}
    plan.scenarios.append(Scenario("g-mixed", rule, parts, owners=owners))
    rule = "partitions 0 and 1 assigned (group metadata), commits on 0 only (lag 10..1) -> OK"
    owners = {"m-1": {"t-own": [0, 1]}}
    plan.group("g-owned", rule, "t-own", ramp(10), plan.trailing(10), partitions=2, owners=owners)


def add_late_groups(plan: Plan) -> None:
    """Commits merged by min-distance or a clock going back, tombstones, and a topic created mid-run."""
    ramp, n = plan.ramp, plan.rounds
    rule = "two commits 0.5 s apart per round: the second replaces the first, keeps its timestamp -> WARN"
    plan.group("g-twice", rule, "t-twice", ramp(20), ramp(10), twice=True)
    rule = "round 6 stamped 120 s before round 5 (coordinator clock went back): replaces that entry -> WARN"
    plan.group("g-clockback", rule, "t-clock", ramp(20), ramp(10), clock_back=n // 2)
    rule = "group-metadata tombstone after the last round (1.2.1 ignores it; v1.9.5 deletes the group)"
    plan.group("g-tomb", rule, "t-tomb", ramp(10), plan.trailing(10), tombstone="group")
    plan.topic("t-offtomb", 2, ramp(10), ramp(10))
    rule = "offset-commit tombstone for partition 1 after the last round (every Burrow ignores it)"
    parts = [Part("t-offtomb", p, plan.trailing(10)) for p in (0, 1)]
    plan.scenarios.append(Scenario("g-offtomb", rule, parts, tombstone=("t-offtomb", 1)))
    k = new_topic_round(n)
    rule = f"topic created in round {k + 1}, committed on at once, before either system's topic-refresh"
    ends = [None] * k + [BASE + 10 * (r + 1) for r in range(k, n)]
    plan.group("g-newtopic", rule, NEW_TOPIC, ends, [None] * k + [BASE + 10 * (r + 1) - 5 for r in range(k, n)])


# --- the systems --------------------------------------------------------------------------------------------------


def lagwatch_env(bootstrap: str, redis_url: str, intervals: int) -> dict[str, str]:
    prefix = f"LAGWATCH__CLUSTERS__{CLUSTER}__"
    return dict(
        os.environ,
        REDIS_URL=redis_url,
        **{
            f"{prefix}BOOTSTRAP_SERVERS": bootstrap,
            f"{prefix}OFFSET_REFRESH": str(OFFSET_REFRESH),
            f"{prefix}TOPIC_REFRESH": str(TOPIC_REFRESH),
            "LAGWATCH__STORAGE__INTERVALS": str(intervals),
            "LAGWATCH__STORAGE__MIN_DISTANCE": "1",
            "LAGWATCH__INGEST__SESSION_TIMEOUT": "3",
            "LAGWATCH__EVALUATOR__SWEEP_INTERVAL": "1",
        },
    )


@dataclass
class Systems:
    """What one run started (the ExitStack it was given stops it all)."""

    control: MockKafkaControl  # the Kafka mock's, which creates NEW_TOPIC mid-run
    writer: Writer
    apis: dict[str, str]  # "burrow", "lagwatch" -> base URL
    processes: dict[str, subprocess.Popen]  # Burrow and lagwatch's services, checked for exits


def start_systems(stack: contextlib.ExitStack, tmp: Path, plan: Plan, intervals: int) -> Systems:
    """The Kafka mock at the first log ends (NEW_TOPIC not created yet), then Burrow and lagwatch on it."""
    topics = {t: n for t, n in plan.topics.items() if t != NEW_TOPIC}
    print(f"Kafka mock: {len(plan.topics)} data topics, {OFFSETS_TOPIC}[{OFFSETS_PARTITIONS}]", flush=True)
    mock, control = start_mock_kafka_process(
        tmp / "kafka", {OFFSETS_TOPIC: OFFSETS_PARTITIONS, **LAGWATCH_TOPICS, **topics}
    )
    stack.callback(stop_process, mock)
    writer = Writer(control.bootstrap)
    stack.callback(writer.close)
    writer.log_ends({tp: BASE for tp in plan.ends if tp[0] != NEW_TOPIC})
    burrow, burrow_api = start_burrow(stack, tmp, control.bootstrap, intervals)
    services, lagwatch_api = start_lagwatch(stack, tmp, control.bootstrap, intervals)
    print(f"Burrow 1.2.1 on {burrow_api} (pid {burrow.pid}); lagwatch api on {lagwatch_api}", flush=True)
    apis = {"burrow": burrow_api, "lagwatch": lagwatch_api}
    return Systems(control, writer, apis, {"Burrow": burrow, **services})


def start_burrow(
    stack: contextlib.ExitStack, tmp: Path, bootstrap: str, intervals: int
) -> tuple[subprocess.Popen, str]:
    """ZooKeeper, then Burrow 1.2.1 (config, log and pidfile in tmp/burrow); the process and its base URL."""
    zk_address, _ = stack.enter_context(zookeeper(tmp / "zookeeper"))
    directory = tmp / "burrow"
    directory.mkdir(exist_ok=True)
    port = free_port()
    config = burrow_config(
        directory,
        bootstrap,
        zk_address,
        CLUSTER,
        port,
        "/burrow-differential",
        offset_refresh=OFFSET_REFRESH,
        topic_refresh=TOPIC_REFRESH,
        intervals=intervals,
        expire_cache=BURROW_EXPIRE_CACHE,
    )
    (directory / "burrow.toml").write_text(config)
    url = f"http://127.0.0.1:{port}"
    for _ in range(2):  # Burrow exits when its first ZooKeeper connection fails (seen with a JVM just started): again
        burrow = spawn([str(BURROW), "-config-dir", str(directory)], directory / "burrow.log", cwd=directory)
        stack.callback(stop_group, burrow)
        # answering before lagwatch's services start: their start-up competes for the 2 CPUs with Burrow's
        wait_for(lambda burrow=burrow: burrow.poll() is not None or get_json(f"{url}/v3/kafka")[0] == 200, "Burrow")
        if burrow.poll() is None:
            break
        print(f"  Burrow exited at start ({log_tail(directory / 'burrow.log', 1)}); starting it again", flush=True)
    return burrow, url


def start_lagwatch(
    stack: contextlib.ExitStack, tmp: Path, bootstrap: str, intervals: int, **extra_env: str
) -> tuple[dict[str, subprocess.Popen], str]:
    """A fresh redis-server, then lagwatch's api, ingest and evaluator (`extra_env` added to their environment); the
    processes and the api's base URL."""
    redis = stack.enter_context(RedisServer())
    redis.start()
    env = {**lagwatch_env(bootstrap, redis.url, intervals), **extra_env}
    api, api_url = start_api(env, tmp / "api.log")
    stack.callback(stop_group, api)
    ingest = start_service(stack, tmp, env, "ingest", "--workers", "1")
    evaluator = start_service(stack, tmp, env, "evaluator")
    return {"ingest": ingest, "evaluator": evaluator, "api": api}, api_url


def start_service(
    stack: contextlib.ExitStack, tmp: Path, env: dict[str, str], service: str, *options: str
) -> subprocess.Popen:
    """`lagwatch run <service>` for CLUSTER, logging to tmp/<service>.log."""
    command = [str(lagwatch_bin()), "run", service, "--cluster", CLUSTER, "--http-port", "0", *options]
    proc = spawn([*command, "--log-level", "WARNING"], tmp / f"{service}.log", env=env)
    stack.callback(stop_group, proc)
    return proc


def wait_until(check: Callable[[], bool], what: str, timeout: float = WAIT_S) -> bool:
    """`wait_for`, saying so and returning False (instead of stopping) when `check` is still false after `timeout`:
    one scenario not seen must not lose the comparison of the others."""
    try:
        wait_for(check, what, timeout)
    except BenchError:
        print(f"  ! {what}: not seen after {timeout:.0f} s", flush=True)
        return False
    return True


def log_ends_shown(api: str, topic: str, ends: Sequence[int | None]) -> bool:
    status, body = get_json(f"{api}/v3/kafka/{CLUSTER}/topic/{topic}")
    return status == 200 and isinstance(body, dict) and body.get("offsets") == ends


def commit_visible(api: str, group: str, topic: str, partition: int, offset: int, ts: int) -> bool:
    status, body = get_json(f"{api}/v3/kafka/{CLUSTER}/consumer/{group}")
    if status != 200 or not isinstance(body, dict):
        return False
    slots = (body.get("topics") or {}).get(topic) or []
    if partition >= len(slots) or not slots[partition]:
        return False
    entries = slots[partition].get("offsets") or []
    return any(e and e.get("offset") == offset and e.get("timestamp") == ts for e in entries)


# --- writing --------------------------------------------------------------------------------------------------------


class Writer:
    """Writes to the Kafka mock: data-topic messages (the log ends) and coordinator records in `__consumer_offsets`."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
        self.ends: dict[tuple[str, int], int] = {}

    def log_ends(self, targets: dict[tuple[str, int], int | None]) -> None:
        """Messages until each partition's log end is its target (None: left as it is), flushed."""
        for (t, p), end in targets.items():
            if end is None:
                continue
            for _ in range(end - self.ends.get((t, p), 0)):
                self.producer.produce(t, b"x", partition=p)
            self.ends[(t, p)] = max(end, self.ends.get((t, p), 0))
        self.flush()

    def commit(self, group: str, topic: str, partition: int, offset: int, ts: int) -> None:
        key = encoders.encode_offset_commit_key(group, topic, partition)
        value = encoders.encode_offset_commit_value(offset, ts)  # v3: Burrow 1.2.1 reads value versions 0, 1 and 3
        self._produce_offsets_record(group, key, value)

    def tombstone(self, group: str, key: bytes) -> None:
        self._produce_offsets_record(group, key, None)

    def owners(self, group: str, owners: dict[str, dict[str, list[int]]]) -> None:
        members = [
            member(m, f"client-{m}", f"/10.0.0.{i + 1}", assignment) for i, (m, assignment) in enumerate(owners.items())
        ]
        value = encoders.encode_group_metadata_value(
            generation=1, protocol="range", leader=members[0].member_id, members=members, version=1
        )  # v1: Burrow 1.2.1 reads group-metadata value versions 0 and 1 only
        self._produce_offsets_record(group, encoders.encode_group_metadata_key(group), value)

    def flush(self) -> None:
        if self.producer.flush(30):
            raise RuntimeError("the Kafka mock did not take every record within 30 s")

    def close(self) -> None:
        """Dropped before the mock stops, so librdkafka does not retry a closed port while the script exits."""
        self.producer.purge()
        self.producer.flush(1)
        self.producer = None  # type: ignore[assignment]

    def _produce_offsets_record(self, group: str, key: bytes, value: bytes | None) -> None:
        """Into the `__consumer_offsets` partition of the group's coordinator, as Kafka places it."""
        self.producer.produce(OFFSETS_TOPIC, value, key, partition=offsets_partition_for(group, OFFSETS_PARTITIONS))


class ExpectedCommit(NamedTuple):
    """A commit as both systems should store it: a merged one keeps the timestamp of the entry it replaces."""

    group: str
    topic: str
    partition: int
    offset: int
    timestamp: int


def play(systems: Systems, plan: Plan) -> dict[str, bool]:
    """The rounds: log ends (seen by both), then commits (seen by both). Returns when the last round is seen; and
    which system stored the commit written on NEW_TOPIC right after its creation."""
    stored_timestamps: dict[str, int] = {}  # the timestamp each group's newest entry holds
    first_on_new: dict[str, bool] = {}
    for r in range(plan.rounds):
        started = time.monotonic()
        move_log_ends(systems, plan, r)
        expected = write_commits(systems.writer, plan, r, stored_timestamps)
        if r == new_topic_round(plan.rounds):
            first_on_new = check_new_topic_commit(systems.apis, expected)
            expected = [c for c in expected if c.topic != NEW_TOPIC]
        for name, api in systems.apis.items():
            for c in expected:
                what = f"{name}: {c.group} {c.topic}[{c.partition}]={c.offset} r{r}"
                wait_until(functools.partial(commit_visible, api, *c), what)
        took = time.monotonic() - started
        print(f"  round {r + 1}/{plan.rounds}: {len(expected)} commits seen by both in {took:.1f} s", flush=True)
    return first_on_new


def move_log_ends(systems: Systems, plan: Plan, r: int) -> None:
    """Round r's log ends, seen by both. In the round NEW_TOPIC is created its messages come after that wait, just
    before its commit, so that neither system has polled its log end."""
    created = new_topic_round(plan.rounds)
    if r == created:
        systems.control.create_topic(NEW_TOPIC, plan.topics[NEW_TOPIC])
    systems.writer.log_ends({tp: e[r] for tp, e in plan.ends.items() if tp[0] != NEW_TOPIC or r > created})
    for name, api in systems.apis.items():
        for topic in plan.topics:
            if topic == NEW_TOPIC and r <= created:
                continue
            shown = functools.partial(log_ends_shown, api, topic, plan.log_ends_at(topic, r))
            wait_until(shown, f"{name}: log ends of {topic} r{r}")
    if r == created:
        systems.writer.log_ends({tp: e[r] for tp, e in plan.ends.items() if tp[0] == NEW_TOPIC})


def write_commits(writer: Writer, plan: Plan, r: int, stored_timestamps: dict[str, int]) -> list[ExpectedCommit]:
    """Round r's commits (and in round 0 the owners), flushed; the commits both systems should store."""
    now = int(time.time() * 1000)
    expected = []
    for sc in plan.scenarios:
        if r == 0 and sc.owners:
            writer.owners(sc.group, sc.owners)
        ts = now - AGE_MS[sc.timestamps] - (plan.rounds - 1 - r) * SPACING_MS - sc.commit_age_ms
        stored_ts = ts
        if sc.clock_back == r:
            ts -= SPACING_MS + 120_000  # before the previous round's commit: merged into it, its timestamp kept
            stored_ts = stored_timestamps[sc.group]
        stored_timestamps[sc.group] = stored_ts
        for part in sc.parts:
            offset = part.commits[r]
            if offset is None:
                continue
            writer.commit(sc.group, part.topic, part.partition, offset, ts)
            if sc.twice:
                offset += 1
                writer.commit(sc.group, part.topic, part.partition, offset, ts + 500)
            if sc.timestamps != "expired":
                expected.append(ExpectedCommit(sc.group, part.topic, part.partition, offset, stored_ts))
    writer.flush()
    return expected


def check_new_topic_commit(apis: dict[str, str], expected: list[ExpectedCommit]) -> dict[str, bool]:
    """Which system stored the commit on NEW_TOPIC, written before either polled the topic's log end."""
    on_new = [c for c in expected if c.topic == NEW_TOPIC]
    time.sleep(3)  # lagwatch looks the log end up at once; Burrow drops it unless it refreshed meanwhile
    stored_by = {name: all(commit_visible(api, *c) for c in on_new) for name, api in apis.items()}
    print(f"  commit on {NEW_TOPIC} written right after its creation, stored by: {stored_by}", flush=True)
    return stored_by


def write_after_last_round(systems: Systems, plan: Plan) -> None:
    """g-quiet's consumer is caught up (its newest commit is the log end): now its topic gets QUIET_MESSAGES
    messages, seen by both. Then the tombstones, and time for both evaluators to take them in."""
    quiet_end = systems.writer.ends[(QUIET_TOPIC, 0)] + QUIET_MESSAGES
    systems.writer.log_ends({(QUIET_TOPIC, 0): quiet_end})
    for name, api in systems.apis.items():
        wait_until(functools.partial(log_ends_shown, api, QUIET_TOPIC, [quiet_end]), f"{name}: {QUIET_TOPIC}")
    for sc in plan.scenarios:
        if sc.tombstone == "group":
            systems.writer.tombstone(sc.group, encoders.encode_group_metadata_key(sc.group))
        elif isinstance(sc.tombstone, tuple):
            systems.writer.tombstone(sc.group, encoders.encode_offset_commit_key(sc.group, *sc.tombstone))
    systems.writer.flush()
    time.sleep(3)  # a sweep of lagwatch's evaluator (1 s), Burrow's evaluator cache (1 s)


# --- comparing ------------------------------------------------------------------------------------------------------


@dataclass
class Diff:
    """One difference between the two systems' answers: a row of the table."""

    snapshot: str
    route: str
    where: str
    burrow: Any
    lagwatch: Any
    note: str = ""
    group: str = ""  # for rows `collapse` merges over groups


def keypaths(value: Any, prefix: str = "") -> set[str]:
    """The field names of a JSON value, as paths (`status.partitions[].start.offset`); lists merged."""
    out: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            path = f"{prefix}.{k}" if prefix else k
            out.add(path)
            out |= keypaths(v, path)
    elif isinstance(value, list):
        for v in value:
            out |= keypaths(v, prefix + "[]")
    return out


def fold_topic_names(paths: Iterable[str]) -> set[str]:
    """Paths under a map keyed by data (topic names in `/consumer/<g>`) folded into `topics.*`."""
    folded = set()
    for path in paths:
        if path.startswith("topics."):
            _, dot, rest = path.removeprefix("topics.").partition(".")
            folded.add("topics.*" + dot + rest)
        else:
            folded.add(path)
    return folded


def shape_diffs(snapshot: str, route: str, burrow: Any, lagwatch: Any) -> list[Diff]:
    """Field names on one side only; a field under one already reported is left out. The group in the route is
    replaced by `<g>`, so `collapse` can merge the same difference over every group."""
    burrow_paths, lagwatch_paths = fold_topic_names(keypaths(burrow)), fold_topic_names(keypaths(lagwatch))
    group = route.split("/")[1] if route.startswith("consumer/") and "/" in route else ""
    route = "/".join("<g>" if i == 1 and part.startswith("g-") else part for i, part in enumerate(route.split("/")))
    out = []
    for only, sides in (
        (burrow_paths - lagwatch_paths, ("present", "absent")),
        (lagwatch_paths - burrow_paths, ("absent", "present")),
    ):
        for path in sorted(only):
            if any(path.startswith(other + ".") or path.startswith(other + "[]") for other in only if other != path):
                continue
            out.append(Diff(snapshot, route, f"field {path}", *sides, group=group))
    out += number_text_diffs(snapshot, route, burrow, lagwatch)
    for d in out:
        d.group = group
    return out


def number_text_diffs(snapshot: str, route: str, burrow: Any, lagwatch: Any, path: str = "") -> list[Diff]:
    """Numbers equal in value but written differently (`1` and `1.0`): only a text comparison sees them."""
    out: list[Diff] = []
    if isinstance(burrow, dict) and isinstance(lagwatch, dict):
        for k in set(burrow) & set(lagwatch):
            out += number_text_diffs(snapshot, route, burrow[k], lagwatch[k], f"{path}.{k}" if path else k)
    elif isinstance(burrow, list) and isinstance(lagwatch, list):
        for x, y in zip(burrow, lagwatch, strict=False):  # a length difference is reported elsewhere
            found = number_text_diffs(snapshot, route, x, y, path + "[]")
            out += [d for d in found if d.where not in {o.where for o in out}]
    elif (
        isinstance(burrow, (int, float))
        and isinstance(lagwatch, (int, float))
        and not isinstance(burrow, bool)
        and abs(burrow - lagwatch) < 1e-6
        and json.dumps(burrow) != json.dumps(lagwatch)
    ):
        out.append(Diff(snapshot, route, f"number text {path}", json.dumps(burrow), json.dumps(lagwatch)))
    return out


def collapse(diffs: list[Diff]) -> list[Diff]:
    """The same field difference on many groups: one row, the groups counted."""
    merged: dict[tuple, Diff] = {}
    counts: dict[tuple, list[str]] = {}
    out: list[Diff] = []
    for d in diffs:
        if "<g>" not in d.route:
            out.append(d)
            continue
        key = (d.snapshot, d.route, d.where, str(d.burrow), str(d.lagwatch))
        if key not in merged:
            merged[key] = d
            out.append(d)
        counts.setdefault(key, []).append(d.group)
    for key, d in merged.items():
        groups = counts[key]
        d.route = d.route.replace("<g>", groups[0]) if len(groups) == 1 else d.route + f" ({len(groups)} groups)"
    return out


def same_value(a: Any, b: Any) -> bool:
    """Equal, numbers within 1e-6 (Burrow's float32 `complete`)."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) < 1e-6
    return a == b


def field_diffs(
    snapshot: str, route: str, prefix: str, burrow: dict, lagwatch: dict, keys: Iterable[str]
) -> list[Diff]:
    """The fields `keys` of two objects whose values are not the same, each named `prefix` + key."""
    return [
        Diff(snapshot, route, f"{prefix}{k}", burrow.get(k), lagwatch.get(k))
        for k in keys
        if not same_value(burrow.get(k), lagwatch.get(k))
    ]


def window_entry(e: dict | None) -> Any:
    return None if e is None else (e.get("offset"), e.get("timestamp"), e.get("lag"))


def both_objects(burrow: Answer, lagwatch: Answer) -> bool:
    return isinstance(burrow[1], dict) and isinstance(lagwatch[1], dict)


def compare_envelope(snapshot: str, route: str, burrow: Answer, lagwatch: Answer) -> list[Diff]:
    """HTTP status; for two JSON objects also their field names, `error` and `message`."""
    out: list[Diff] = []
    if burrow[0] != lagwatch[0]:
        out.append(Diff(snapshot, route, "HTTP status", burrow[0], lagwatch[0]))
    if both_objects(burrow, lagwatch):
        out += shape_diffs(snapshot, route, burrow[1], lagwatch[1])
        out += field_diffs(snapshot, route, "", burrow[1], lagwatch[1], ("error", "message"))
    return out


def compare_lag(snapshot: str, group: str, burrow: Answer, lagwatch: Answer) -> list[Diff]:
    """`/consumer/<g>/lag`: the group's status, complete, partition_count, totallag, maxlag and its partitions."""
    route = f"consumer/{group}/lag"
    out = compare_envelope(snapshot, route, burrow, lagwatch)
    if not both_objects(burrow, lagwatch):
        if burrow[1] != lagwatch[1]:
            out.append(Diff(snapshot, route, "body", str(burrow[1])[:80], str(lagwatch[1])[:80]))
        return out
    burrow_status, lagwatch_status = burrow[1].get("status") or {}, lagwatch[1].get("status") or {}
    keys = ("status", "complete", "partition_count", "totallag")
    out += field_diffs(snapshot, route, "", burrow_status, lagwatch_status, keys)
    burrow_maxlag, lagwatch_maxlag = maxlag_key(burrow_status.get("maxlag")), maxlag_key(lagwatch_status.get("maxlag"))
    if burrow_maxlag != lagwatch_maxlag:
        where = "maxlag (topic, partition, current_lag, status)"
        out.append(Diff(snapshot, route, where, burrow_maxlag, lagwatch_maxlag))
    return out + compare_partition_statuses(snapshot, route, burrow_status, lagwatch_status)


def maxlag_key(maxlag: dict | None) -> tuple | None:
    if maxlag is None:
        return None
    return maxlag.get("topic"), maxlag.get("partition"), maxlag.get("current_lag"), maxlag.get("status")


def compare_partition_statuses(snapshot: str, route: str, burrow_status: dict, lagwatch_status: dict) -> list[Diff]:
    """Each partition of two lag bodies' statuses: listed by both, its fields, its window's first and last entry."""
    burrow_parts = {(p["topic"], p["partition"]): p for p in burrow_status.get("partitions") or []}
    lagwatch_parts = {(p["topic"], p["partition"]): p for p in lagwatch_status.get("partitions") or []}
    out: list[Diff] = []
    for key in sorted(set(burrow_parts) | set(lagwatch_parts)):
        burrow_part, lagwatch_part = burrow_parts.get(key), lagwatch_parts.get(key)
        where = f"{key[0]}[{key[1]}]"
        if burrow_part is None or lagwatch_part is None:
            out.append(Diff(snapshot, route, f"{where} listed", burrow_part is not None, lagwatch_part is not None))
            continue
        keys = ("status", "current_lag", "complete", "owner", "client_id")
        out += field_diffs(snapshot, route, f"{where}.", burrow_part, lagwatch_part, keys)
        for k in ("start", "end"):
            burrow_entry, lagwatch_entry = window_entry(burrow_part.get(k)), window_entry(lagwatch_part.get(k))
            if burrow_entry != lagwatch_entry:
                out.append(Diff(snapshot, route, f"{where}.{k} (offset, timestamp, lag)", burrow_entry, lagwatch_entry))
    return out


def compare_detail(snapshot: str, group: str, burrow: Answer, lagwatch: Answer) -> list[Diff]:
    """`/consumer/<g>`: per topic the partition count, and each partition's window, owner, client_id and lag."""
    route = f"consumer/{group}"
    out = compare_envelope(snapshot, route, burrow, lagwatch)
    if not both_objects(burrow, lagwatch):
        return out
    burrow_topics, lagwatch_topics = burrow[1].get("topics") or {}, lagwatch[1].get("topics") or {}
    for topic in sorted(set(burrow_topics) | set(lagwatch_topics)):
        burrow_parts, lagwatch_parts = burrow_topics.get(topic) or [], lagwatch_topics.get(topic) or []
        if len(burrow_parts) != len(lagwatch_parts):
            out.append(Diff(snapshot, route, f"{topic}: partitions", len(burrow_parts), len(lagwatch_parts)))
        for p, (burrow_part, lagwatch_part) in enumerate(zip(burrow_parts, lagwatch_parts, strict=False)):
            burrow_window = [window_entry(e) for e in burrow_part.get("offsets") or []]
            lagwatch_window = [window_entry(e) for e in lagwatch_part.get("offsets") or []]
            if burrow_window != lagwatch_window:
                where = f"{topic}[{p}].offsets (offset, ts, lag)"
                out.append(Diff(snapshot, route, where, short_window(burrow_window), short_window(lagwatch_window)))
            keys = ("owner", "client_id", "current-lag")
            out += field_diffs(snapshot, route, f"{topic}[{p}].", burrow_part, lagwatch_part, keys)
    return out


def short_window(entries: list) -> str:
    """A window for the table: `None` slots counted, entries as offset/lag."""
    nones = sum(e is None for e in entries)
    body = [f"{e[0]}/{e[2]}" for e in entries if e is not None]
    return f"{len(entries)} slots ({nones} null) " + " ".join(body)


def ask_both(apis: dict[str, str], path: str, raw: dict[str, Any]) -> tuple[Answer, Answer]:
    """Both systems' answers to `/v3/kafka/<cluster>/<path>`, also kept in `raw` under `path`."""
    answers = {system: get_json(f"{api}/v3/kafka/{CLUSTER}/{path}") for system, api in apis.items()}
    raw[path] = answers
    return answers["burrow"], answers["lagwatch"]


def listing_order(names: list[str]) -> str:
    return "sorted" if names == sorted(names) else "unordered"


def compare_listing(snapshot: str, route: str, key: str, burrow: Answer, lagwatch: Answer) -> list[Diff]:
    """`/consumer` or `/topic`: field names, and the names (under `key`) only one system lists."""
    out = shape_diffs(snapshot, route, burrow[1], lagwatch[1])
    burrow_names, lagwatch_names = set(burrow[1].get(key) or []), set(lagwatch[1].get(key) or [])
    if burrow_names != lagwatch_names:
        only = sorted(burrow_names - lagwatch_names), sorted(lagwatch_names - burrow_names)
        out.append(Diff(snapshot, route, f"{key} (only in one)", *only))
    return out


def compare_listings(snapshot: str, apis: dict[str, str], raw: dict[str, Any]) -> list[Diff]:
    """The consumer and topic listings, and their order: Burrow's is a Go map's."""
    burrow, lagwatch = ask_both(apis, "consumer", raw)
    out = compare_listing(snapshot, "consumer", "consumers", burrow, lagwatch)
    burrow_groups = burrow[1].get("consumers") or []
    lagwatch_sorted = lagwatch[1].get("consumers") == sorted(set(lagwatch[1].get("consumers") or []))
    if burrow_groups != sorted(burrow_groups) and lagwatch_sorted:
        out.append(Diff(snapshot, "consumer", "consumers order", "unordered", "sorted"))
    burrow, lagwatch = ask_both(apis, "topic", raw)
    out += compare_listing(snapshot, "topic", "topics", burrow, lagwatch)
    burrow_order = listing_order(burrow[1].get("topics") or [])
    lagwatch_order = listing_order(lagwatch[1].get("topics") or [])
    if burrow_order != lagwatch_order:
        out.append(Diff(snapshot, "topic", "topics order", burrow_order, lagwatch_order))
    return out


def compare_topic(snapshot: str, topic: str, burrow: Answer, lagwatch: Answer) -> list[Diff]:
    """`/topic/<t>`: field names, and the HTTP status with the log ends."""
    route = f"topic/{topic}"
    out = shape_diffs(snapshot, route, burrow[1], lagwatch[1])
    burrow_ends, lagwatch_ends = (burrow[0], burrow[1].get("offsets")), (lagwatch[0], lagwatch[1].get("offsets"))
    if burrow_ends != lagwatch_ends:
        out.append(Diff(snapshot, route, "offsets", burrow_ends, lagwatch_ends))
    return out


def snapshot(name: str, apis: dict[str, str], plan: Plan) -> tuple[list[Diff], dict[str, Any]]:
    """Every route asked of both systems once: the differences (collapsed over groups) and the raw answers."""
    raw: dict[str, Any] = {}
    diffs = compare_listings(name, apis, raw)
    for topic in plan.topics:
        diffs += compare_topic(name, topic, *ask_both(apis, f"topic/{topic}", raw))
    for group in [*(sc.group for sc in plan.scenarios), "g-nobody"]:  # g-nobody: never written -> NOTFOUND
        diffs += compare_lag(name, group, *ask_both(apis, f"consumer/{group}/lag", raw))
        diffs += compare_detail(name, group, *ask_both(apis, f"consumer/{group}", raw))
    return collapse(diffs), raw


def status_table(raw: dict[str, Any], scenarios: list[Scenario]) -> list[str]:
    lines = ["| group | rule exercised | Burrow 1.2.1 | lagwatch |", "| --- | --- | --- | --- |"]
    for sc in scenarios:
        cells = [status_cell(*raw[f"consumer/{sc.group}/lag"][system]) for system in ("burrow", "lagwatch")]
        lines.append(f"| {sc.group} | {sc.rule} | {cells[0]} | {cells[1]} |")
    return lines


def status_cell(code: int, body: Any) -> str:
    """`200 WARN (t-warn[0] WARN)`: the HTTP status, the group's status and each partition's."""
    status = body.get("status", {}) if isinstance(body, dict) else {}
    partitions = sorted(status.get("partitions") or [], key=lambda p: (p["topic"], p["partition"]))
    listed = ", ".join(f"{p['topic']}[{p['partition']}] {p['status']}" for p in partitions)
    return f"{code} {status.get('status')} ({listed})" if listed else f"{code} {status.get('status')}"


# --- the known differences ----------------------------------------------------------------------------------------
# (pattern in the row, classification): (a) lagwatch bug, (b) Burrow 1.2.1 vs newer Burrow (lagwatch follows
# v1.9.5, docs/migrating-from-burrow.md), (c) timing/harness artefact, (d) documented lagwatch difference.
KNOWN: list[tuple[Callable[[Diff], bool], str]] = [
    (
        lambda d: d.where.startswith("field ") and d.where.endswith(".observedAt"),
        "(b) observedAt: added in Burrow v1.3.3 (eace499, protocol/storage.go ConsumerOffset.ObservedTimestamp)",
    ),
    (
        lambda d: (
            d.where.startswith("field ")
            and any(k in d.where for k in ("lag_seconds", "lower_bound", "velocity", "explanation", "retention"))
        ),
        "(d) lagwatch's extra status fields (migrating-from-burrow.md, 'status and lag bodies')",
    ),
    (
        lambda d: d.route.endswith("/lag") and d.where.endswith("client_id") and d.burrow == "",
        "(b) 1.2.1's evaluator never sets a partition status's client_id; v1.3.0+ does (18e261a, caching.go:232)",
    ),
    (lambda d: d.where == "consumers order", "(d) listing sorted (migrating-from-burrow.md, 'consumer listing')"),
    (lambda d: d.where == "topics order", "(d) sorted, like the consumer listing; Burrow: Go map order (undocumented)"),
    (
        lambda d: d.where.startswith("number text"),
        "(d) float32 vs float64 / 1 vs 1.0: same value (migrating-from-burrow.md, '`complete` in JSON')",
    ),
    (
        lambda d: d.where == "consumers (only in one)" and "g-tomb" in d.burrow,
        "(b) g-tomb: 1.2.1 drops group tombstones (v1.4.0+ deletes); lagwatch-<cluster>: lagwatch's own progress "
        "group, as Burrow v1.3.0+'s burrow-<cluster> (8c47395)",
    ),
    (
        lambda d: d.where == "consumers (only in one)" and d.lagwatch == [f"lagwatch-{CLUSTER}"],
        "(b) lagwatch's own progress group; Burrow v1.3.0+ reports burrow-<cluster> (8c47395); docs/operations.md",
    ),
    (
        # Burrow's window is all null slots: "N slots (N null) "
        lambda d: (
            "offsets (offset, ts, lag)" in d.where
            and str(d.burrow).endswith("null) ")
            and d.burrow.split()[0] == d.burrow.split()[2][1:]
        ),
        "(d) assigned but never committed: offsets [] (migrating-from-burrow.md)",
    ),
    (
        lambda d: d.route.endswith("/lag") and d.where.endswith(".complete") and d.burrow == 0.1 and d.lagwatch == 0,
        "(d) assigned but never committed: complete 0, Burrow 1/intervals (migrating-from-burrow.md)",
    ),
    (
        lambda d: "g-rewind-rec" in d.route or "g-rewind-zero" in d.route,
        "(b) REWIND: 1.2.1 any drop, only when lag never 0; v1.3.7+ first unrecovered drop, checked first (d69a8ec)",
    ),
    (
        lambda d: "g-tomb" in d.route,
        "(b) group tombstone: 1.2.1 drops it (kafka_client.go:239); v1.4.0+ deletes the group (855e637); spec §2",
    ),
    (
        lambda d: "g-offtomb" in d.route,
        "(d) offset-commit tombstone: every Burrow ignores it, lagwatch drops the window (migrating-from-burrow.md)",
    ),
    (
        lambda d: "g-newtopic" in d.route,
        "(d) a commit whose log end is not polled yet: lagwatch looks it up and stores the commit, Burrow (every "
        "version) drops it (migrating-from-burrow.md)",
    ),
]


def classify(d: Diff) -> str:
    for match, note in KNOWN:
        with contextlib.suppress(Exception):  # a pattern may not fit the row's types
            if match(d):
                return note
    return ""


def table_cell(value: Any) -> str:
    return str(value).replace("|", "/")[:110]


def difference_table(diffs: list[Diff]) -> list[str]:
    lines = [
        "| snapshot | route | where | Burrow 1.2.1 | lagwatch | known as |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for d in diffs:
        cells = (d.snapshot, d.route, d.where, table_cell(d.burrow), table_cell(d.lagwatch), d.note or classify(d))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


# --- main -----------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--intervals", type=int, default=10, help="ring size of both systems (= rounds written)")
    parser.add_argument("--keep", type=Path, default=None, help="keep logs and raw answers in this directory")
    parser.add_argument("--json", type=Path, default=None, help="write the raw answers and the differences here")
    return parser.parse_args(argv)


def work_directory(stack: contextlib.ExitStack, keep: Path | None) -> Path:
    """`--keep`'s directory, else a temporary one, removed at the end."""
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
        return keep
    return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="burrow-differential-")))


def first_log_ends_seen(systems: Systems, plan: Plan, tmp: Path) -> bool:
    """Both systems show every data topic but NEW_TOPIC at BASE; else what the processes and logs say."""
    for name, api in systems.apis.items():
        for topic, partitions in plan.topics.items():
            shown = functools.partial(log_ends_shown, api, topic, [BASE] * partitions)
            if topic != NEW_TOPIC and not wait_until(shown, f"{name}: first log ends of {topic}", 90):
                print_start_failure(systems, tmp)
                return False
    return True


def print_start_failure(systems: Systems, tmp: Path) -> None:
    for what in ("Burrow", "ingest", "evaluator"):
        proc = systems.processes[what]
        print(f"  {what}: {'running' if proc.poll() is None else f'exited {proc.returncode}'}")
    print(log_tail(tmp / "burrow" / "burrow.log"), log_tail(tmp / "ingest.log"), sep="\n")


def take_snapshots(apis: dict[str, str], plan: Plan) -> tuple[dict[str, Any], list[Diff]]:
    """Two snapshots: "early" just after the last round, "late" once every kept log-end sample has rolled over
    (which g-quiet needs)."""
    answers: dict[str, Any] = {}
    diffs: list[Diff] = []
    for name, delay in (("early", 0), ("late", OFFSET_REFRESH * plan.rounds + 6)):
        time.sleep(delay)
        snapshot_diffs, answers[name] = snapshot(name, apis, plan)
        diffs += snapshot_diffs
        print(f"\n## {name} snapshot: statuses\n" + "\n".join(status_table(answers[name], plan.scenarios)), flush=True)
    return answers, diffs


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    missing = burrow_available()
    if missing:
        print(f"burrow_differential: missing {missing} (scripts/install-system-deps.sh)", file=sys.stderr)
        return 2
    plan = build(args.intervals)
    with contextlib.ExitStack() as stack:
        tmp = work_directory(stack, args.keep)
        systems = start_systems(stack, tmp, plan, args.intervals)
        if not first_log_ends_seen(systems, plan, tmp):
            return 1
        print("both see the first log ends; writing the rounds", flush=True)
        first_on_new = play(systems, plan)
        write_after_last_round(systems, plan)
        answers, diffs = take_snapshots(systems.apis, plan)
        for what, proc in systems.processes.items():
            if proc.poll() is not None:
                print(f"! {what} exited with {proc.returncode} during the run", flush=True)
        print(f"\n## {len(diffs)} differences\n" + "\n".join(difference_table(diffs)), flush=True)
        if args.json:
            answers["first_commit_on_new_topic_stored"] = first_on_new
            differences = [d.__dict__ | {"known": classify(d)} for d in diffs]
            args.json.write_text(json.dumps({"answers": answers, "differences": differences}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
