"""The log probe in the ingest (services/ingest/probe_schedule.py): a read_committed consumer of transactional
topics that has read everything commits last record + 1, below the log end by the transaction markers. With the
probe its partition reads lag 0 and its group OK; a consumer with records still to read keeps its lag and status.

Real transactional producers write to the Kafka mock, the consumers' commits are mirrored into `__consumer_offsets`
as the coordinator writes them, an ingest worker stores them in a real Redis, and the groups are evaluated as the
evaluator does."""

import asyncio
import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from lagwatch.devkit.mock_kafka import MockKafkaCluster
from lagwatch.devkit.offsets_topic_writer import OffsetsTopicWriter
from lagwatch.services.ingest import probe_schedule
from lagwatch.services.ingest.log_probe import LogProbe
from lagwatch.services.ingest.probe_schedule import ProbeSchedule
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.services.ingest.window_cache import WindowCache
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import OffsetEntry, ProbedLog, WindowConfig
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.statuses.verdicts import partition_time_lag
from lagwatch.shared.windows.changes import ChangePublisher
from lagwatch.shared.windows.group_windows import GroupWindows
from lagwatch.shared.windows.log_probes import decode_probe, encode_probe
from lagwatch.shared.windows.packing import commit_entry_at, newest_offset, pack_commit_ring
from lagwatch.shared.windows.store import WindowStore
from tests.evaluated import evaluate
from tests.kafka_helpers import CLUSTER, eventually, make_config, running
from tests.services.ingest.test_ingest_admin_mode import STEP, Member
from tests.services.ingest.test_ingest_resilience import _is_set
from tests.services.ingest.test_log_probe import (
    PLAIN,
    TRANSACTIONAL,
    closed_port,
    hours_ago,
    three_transactions,
    transactional_consumers,
    write_plain,
)

HOUR_MS = 3_600_000
COMMITS = 3  # each consumer commits its offset this many times: a full window (intervals 3) that does not move


@pytest.mark.parametrize("probing", [True, False], ids=["log probe", "offsets alone"])
async def test_a_caught_up_transactional_consumer_reads_ok_and_one_behind_keeps_its_lag(
    kafka, redis_server, redis, probing
):
    kafka.create_topic(TRANSACTIONAL, 1)
    caught_up, behind, log_end = await transactional_consumers(kafka.bootstrap)  # each consumer's commit
    config = stalled_window_config(kafka, redis_server, INGEST__LOG_PROBE=str(probing).lower())
    store = WindowStore(redis, config.window())
    probes_before = _probes()
    async with OffsetsTopicWriter(kafka.bootstrap) as writer, running(IngestWorker(config, CLUSTER)) as worker:
        await eventually(lambda: _is_set(worker.caught_up), timeout=30)
        for _ in range(COMMITS):
            await writer.commit("eos-caught-up", TRANSACTIONAL, 0, caught_up)
            await writer.commit("eos-behind", TRANSACTIONAL, 0, behind)
            await asyncio.sleep(0.1)
        await eventually(lambda: _window_full(store, "eos-caught-up"), timeout=30)
        await eventually(lambda: _window_full(store, "eos-behind"), timeout=30)
        if probing:
            await eventually(lambda: _probed(redis, caught_up), timeout=30)
        await evaluate(redis, config, CLUSTER, ["eos-caught-up", "eos-behind"], now_ms())
        lags = {g: await _current_lag(store, g) for g in ("eos-caught-up", "eos-behind")}
        statuses = await redis.hgetall(f"lw:c:{{{CLUSTER}}}:statuses")

    assert lags == {"eos-caught-up": 0 if probing else log_end - caught_up, "eos-behind": log_end - behind}
    # a full window whose offset never moved, with lag: stalled (ERR), unless the probe found only markers
    assert statuses == {b"eos-caught-up": b"OK" if probing else b"ERR", b"eos-behind": b"ERR"}
    assert (_probes() > probes_before) == probing


@pytest.mark.parametrize("probing", [True, False], ids=["log probe", "offsets alone"])
async def test_in_admin_mode_a_caught_up_transactional_consumer_reads_ok_too(redis_server, redis, probing):
    """Commits polled through the admin API (no `__consumer_offsets`) reach the same windows, and the probe the same
    answer: a real group member that read three transactions commits the end of each, the last one 1 below the log
    end (its commit marker), then stops. By offsets alone it stopped with lag (ERR); it read everything (OK)."""
    with MockKafkaCluster() as kafka:
        kafka.start()
        kafka.create_topic(TRANSACTIONAL, 1)
        records = await asyncio.to_thread(three_transactions, kafka.bootstrap)
        ends = [records[i].offset + 1 for i in (19, 39, 59)]  # each transaction's last record + 1
        config = make_config(
            kafka.bootstrap,
            redis_server.url,
            STORAGE__INTERVALS="3",
            INGEST__LOG_PROBE=str(probing).lower(),
            **{f"CLUSTERS__{CLUSTER}__OFFSETS_SOURCE": "admin", f"CLUSTERS__{CLUSTER}__ADMIN_GROUPS": "eos-admin"},
        )
        member = Member(kafka.bootstrap, "eos-admin", TRANSACTIONAL)
        async with running(IngestWorker(config, CLUSTER)) as worker:
            await eventually(lambda: _is_set(worker.caught_up), timeout=30)
            assert worker.admin_mode
            await member.start()
            try:
                for end in ends:
                    await member.commit(end)  # a step apart: longer than the ingest's polls
            finally:
                await member.stop()
            store = WindowStore(redis, config.window())
            await eventually(lambda: _window_at(store, "eos-admin", ends), timeout=30)
            if probing:
                await eventually(lambda: _probed(redis, ends[-1]), timeout=30)
            await asyncio.sleep(3 * STEP)  # longer than the window spans: stopped, by offsets alone
            await evaluate(redis, config, CLUSTER, ["eos-admin"], now_ms())
            lag = await _current_lag(store, "eos-admin")
            statuses = await redis.hgetall(f"lw:c:{{{CLUSTER}}}:statuses")

    assert lag == (0 if probing else 1)
    assert statuses == {b"eos-admin": b"OK" if probing else b"ERR"}


async def _window_at(store, group, offsets) -> bool:
    stored = await store.reads.get_group(CLUSTER, group)
    return stored is not None and [e.offset for e in stored.partitions[0].entries] == offsets


def stalled_window_config(kafka, redis_server, **env: str):
    """A window of three entries, none merged: one offset committed three times fills it without moving (by
    offsets alone, a lag then reads STALL)."""
    return make_config(kafka.bootstrap, redis_server.url, STORAGE__INTERVALS="3", STORAGE__MIN_DISTANCE="0", **env)


def _probes() -> float:
    return REGISTRY.get_sample_value("lagwatch_ingest_log_probes_total", {"cluster": CLUSTER}) or 0


def test_a_stored_answer_reads_back_and_junk_reads_as_none():
    answer = ProbedLog(62, 63, None, None, 1_700_000_000_000)
    assert decode_probe(encode_probe(answer)) == answer
    behind = ProbedLog(50, 63, 50, 1_699_000_000_000, 1_700_000_000_000)
    assert decode_probe(encode_probe(behind)) == behind
    assert decode_probe(b"62 63 nonsense") is None and decode_probe(None) is None
    assert answer.caught_up_at(62, 63) and not answer.caught_up_at(62, 64) and not answer.caught_up_at(61, 63)
    assert not behind.caught_up_at(50, 63)


async def _window_full(store, group) -> bool:
    stored = await store.reads.get_group(CLUSTER, group)
    return stored is not None and all(len(p.entries) >= COMMITS for p in stored.partitions if p.packed)


async def _current_lag(store, group) -> int:
    stored = await store.reads.get_group(CLUSTER, group)
    return sum(p.current_lag for p in stored.partitions)


async def _probed(redis, committed: int, topic: str = TRANSACTIONAL) -> bool:
    """An answer for partition 0 at `committed`: caught up (`lp`) or with an unread record (`lu`)."""
    for kind in ("lp", "lu"):
        answer = decode_probe(await redis.hget(f"lw:t:{{{CLUSTER}/{topic}}}:{kind}", "0"))
        if answer is not None and answer.committed == committed:
            return True
    return False


@pytest.mark.parametrize("probing", [True, False], ids=["log probe", "offsets alone"])
async def test_a_consumer_stopped_behind_hours_old_records_reads_their_age_not_a_lower_bound(
    kafka, redis_server, redis, probing
):
    """Records produced five hours ago (their producer's timestamps), a consumer that stopped two hours ago at the
    tenth of them, far behind (past the probe's bound for markers): with an hour of log-end history, the history
    alone can only say "at least as old as the history"; the first unread record's timestamp says how old."""
    kafka.create_topic(PLAIN, 1)
    written = hours_ago(5, 1_500)
    await asyncio.to_thread(write_plain, kafka.bootstrap, PLAIN, 0, written)
    config = make_config(
        kafka.bootstrap, redis_server.url, STORAGE__LAG_HISTORY="3600", INGEST__LOG_PROBE=str(probing).lower()
    )
    store = WindowStore(redis, config.window())
    async with OffsetsTopicWriter(kafka.bootstrap) as writer:
        # committed before the worker starts: read while it catches up, not taken for the coordinator's clock
        await writer.commit("stopped", PLAIN, 0, 10, timestamp=now_ms() - 2 * HOUR_MS)
        async with running(IngestWorker(config, CLUSTER)) as worker:
            await eventually(lambda: _is_set(worker.caught_up), timeout=30)
            if probing:
                await eventually(lambda: _probed(redis, 10, PLAIN), timeout=30)
            stored = await eventually(lambda: store.reads.get_group(CLUSTER, "stopped"), timeout=30)
            lag = partition_time_lag(stored.partitions[0], now_ms())

    age_s = (now_ms() - written[10]) / 1000
    if probing:
        assert not lag.lower_bound and abs(lag.seconds - age_s) < 1, (lag, age_s)
    else:
        assert lag.lower_bound and lag.seconds < 60, lag  # as old as the history: it started with the worker


async def test_a_probe_that_cannot_reach_a_broker_changes_nothing_and_is_counted(redis):
    """The offsets' answer stands: nothing stored, no group announced, the failure counted by its reason, and the
    partition asked again at the next tick."""
    cache = WindowCache(redis, CLUSTER, WindowConfig())
    ring = pack_commit_ring([OffsetEntry(10, now_ms(), now_ms(), 5, 0, 0)])
    cache.groups["stuck"] = GroupWindows("stuck", rings={"orders:0": ring})
    probe = LogProbe({"bootstrap.servers": f"127.0.0.1:{closed_port()}"}, timeout_s=1.0)
    unstarted = ChangePublisher({"bootstrap.servers": f"127.0.0.1:{closed_port()}"})  # publishes nothing
    schedule = ProbeSchedule(
        CLUSTER, probe, cache, lambda: {("orders", 0): 20}, redis, unstarted, interval_s=1, lag_history_ms=HOUR_MS
    )
    failures_before = _failures()
    schedule.touched(["stuck"])
    try:
        await schedule.tick()
        assert _failures() > failures_before
        assert await redis.keys("lw:t:*") == []
        assert list(schedule.due(now_ms())) == [("orders", 0, 10)]  # not answered: asked again
    finally:
        schedule.close()


def _failures() -> float:
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        if metric.name == "lagwatch_ingest_log_probe_failures"
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels.get("cluster") == CLUSTER
    )


@given(st.lists(st.tuples(st.integers(0, 2**62), st.integers(-1, 2**40)), min_size=1, max_size=12))
def test_the_newest_offset_read_alone_is_the_newest_entrys(entries):
    ring = pack_commit_ring([OffsetEntry(offset, 1, 1, lag, i, i) for i, (offset, lag) in enumerate(entries)])
    assert newest_offset(ring) == commit_entry_at(ring, -1).offset == entries[-1][0]


def test_with_more_due_than_a_tick_takes_each_partition_is_asked_in_turn():
    """Probes that fail leave their partitions due, behind the others."""
    schedule, cache, log_ends = _schedule()
    for partition in range(5):
        _commit(cache, "g", "t", partition, [(0, NOW)])
        log_ends[("t", partition)] = 10
    schedule.touched(["g"])
    turns = []
    for _ in range(4):
        asked = list(schedule.due(NOW))[:2]
        schedule._requeue(set(asked), found=set())
        turns.append([p for _, p, _ in asked])
    assert turns == [[0, 1], [2, 3], [4, 0], [1, 2]]


def test_each_worker_probes_its_share_of_the_clusters_rate():
    assert probe_schedule.probes_per_tick(50, 10, 1.0) == 500
    assert probe_schedule.probes_per_tick(50, 10, 0.25) == 125  # one of four workers
    assert probe_schedule.probes_per_tick(0.01, 1, 0.25) == 1  # never none


NOW = 1_800_000_000_000


def _schedule() -> tuple[ProbeSchedule, WindowCache, dict]:
    cache = WindowCache(None, CLUSTER, WindowConfig())  # type: ignore[arg-type]  # judged in memory: no Redis
    log_ends: dict = {}
    schedule = ProbeSchedule(CLUSTER, None, cache, lambda: log_ends, None, None, 1, HOUR_MS)  # type: ignore[arg-type]
    return schedule, cache, log_ends


def _commit(cache: WindowCache, group: str, topic: str, partition: int, entries: list[tuple[int, int]]) -> None:
    """The group's ring of the partition as these (offset, time) commits left it."""
    windows = cache.groups.setdefault(group, GroupWindows(group, rings={}))
    ring = [OffsetEntry(offset, at, at, 0, i, i) for i, (offset, at) in enumerate(entries)]
    windows.rings[keys.partition_field(topic, partition)] = pack_commit_ring(ring)


def test_a_partition_is_judged_again_when_its_log_end_moves_not_at_every_tick():
    schedule, cache, log_ends = _schedule()
    _commit(cache, "g", "t", 0, [(10, NOW)])
    log_ends[("t", 0)] = 10
    schedule.touched(["g"])
    assert schedule.due(NOW) == {}  # caught up
    log_ends[("t", 0)] = 12
    assert schedule.due(NOW) == {}  # nothing told it the log end moved: no scan
    schedule.moves.add(("t", 0))
    assert schedule.due(NOW) == {("t", 0, 10): ["g"]}


def test_an_offset_far_behind_is_probed_once_it_stands_since_before_the_history():
    """Past MAX_LAG only a lower bound on lag in seconds makes a probe worth it: when the offset has stood longer
    than the history, which a timer set at the last judgement tells, with nothing else changing."""
    schedule, cache, log_ends = _schedule()
    _commit(cache, "stalled", "t", 0, [(10, NOW), (10, NOW + 60_000)])
    _commit(cache, "moving", "t", 1, [(5, NOW), (10, NOW + 60_000)])
    log_ends.update({("t", 0): 10 + 5 * probe_schedule.MAX_LAG, ("t", 1): 10 + 5 * probe_schedule.MAX_LAG})
    schedule.touched(["stalled", "moving"])
    assert schedule.due(NOW + HOUR_MS - 1) == {}
    assert schedule.due(NOW + HOUR_MS) == {("t", 0, 10): ["stalled"]}  # its oldest entry is at the offset
    assert schedule.due(NOW + HOUR_MS + 60_000) == {("t", 0, 10): ["stalled"], ("t", 1, 10): ["moving"]}


def test_the_rings_of_a_group_no_longer_held_are_not_asked_for_and_are_forgotten(monkeypatch):
    schedule, cache, log_ends = _schedule()
    for group in ("kept", "gone"):
        _commit(cache, group, "t", 0, [(10, NOW)])
    log_ends[("t", 0)] = 12
    schedule.touched(["kept", "gone"])
    assert schedule.due(NOW) == {("t", 0, 10): ["kept", "gone"]}
    cache.forget_group("gone")
    assert schedule.due(NOW) == {("t", 0, 10): ["kept"]}
    assert list(schedule._due) == [("kept", "t:0")]
    monkeypatch.setattr(probe_schedule, "SWEEP_TICKS", 1)
    schedule.due(NOW)
    assert schedule._groups_of_topic == {"t": {"kept"}}


def test_answers_are_kept_while_a_held_ring_stands_where_they_hold_and_cost_nothing_per_ring(monkeypatch):
    """An answer is about the log at an offset, whoever stands there; the sweep forgets those no held ring stands at
    and caught-up ones whose log end moved. A ring whose answer holds is nowhere in the schedule."""
    schedule, cache, log_ends = _schedule()
    _commit(cache, "reader", "t", 0, [(10, NOW)])
    _commit(cache, "twin", "t", 0, [(10, NOW)])
    _commit(cache, "stalled", "t", 1, [(20, NOW)])
    log_ends.update({("t", 0): 12, ("t", 1): 25})
    schedule.touched(["reader", "twin", "stalled"])
    assert set(schedule.due(NOW)) == {("t", 0, 10), ("t", 1, 20)}
    schedule._answered.update({("t", 0, 10): 12, ("t", 1, 20): probe_schedule.UNREAD})
    schedule._requeue({("t", 0, 10), ("t", 1, 20)}, {("t", 0, 10), ("t", 1, 20)})
    assert schedule.due(NOW) == {} and schedule._due == {}
    _commit(cache, "reader", "t", 0, [(10, NOW), (11, NOW + 1)])  # moves on: its twin still stands at 10
    schedule.touched(["reader"])
    assert schedule.due(NOW) == {("t", 0, 11): ["reader"]}
    monkeypatch.setattr(probe_schedule, "SWEEP_TICKS", 1)
    schedule.due(NOW)
    assert schedule._answered == {("t", 0, 10): 12, ("t", 1, 20): probe_schedule.UNREAD}
    cache.forget_group("twin")
    log_ends[("t", 1)] = 30  # an unread record past the stalled ring's offset is there whatever the log end
    schedule.due(NOW)
    assert schedule._answered == {("t", 1, 20): probe_schedule.UNREAD}
    cache.forget_group("stalled")
    schedule.due(NOW)
    assert schedule._answered == {}


def test_the_queue_answered_to_the_last_ring_holds_no_memory_of_its_size():
    schedule, cache, log_ends = _schedule()
    for g in range(500):
        _commit(cache, f"g{g}", "t", 0, [(10 + g, NOW)])
    log_ends[("t", 0)] = 600
    schedule.touched(list(cache.groups))
    due = schedule.due(NOW)
    assert len(due) == 500
    schedule._answered.update(dict.fromkeys(due, probe_schedule.UNREAD))
    schedule._requeue(set(due), set(due))
    assert schedule.due(NOW) == {}
    assert sys.getsizeof(schedule._due) == sys.getsizeof({})


def test_answers_lost_with_a_failed_tick_are_asked_for_again_for_every_ring():
    schedule, cache, log_ends = _schedule()
    for group, partition in (("a", 0), ("b", 1)):
        _commit(cache, group, "t", partition, [(10, NOW)])
        log_ends[("t", partition)] = 12
    schedule.touched(["a", "b"])
    due = schedule.due(NOW)
    schedule._answered.update(dict.fromkeys(due, probe_schedule.UNREAD))
    schedule._requeue(set(due), set(due))
    assert schedule.due(NOW) == {}
    schedule._forget_answers()
    assert schedule.due(NOW) == {("t", 0, 10): ["a"], ("t", 1, 10): ["b"]}


def _scan(cache: WindowCache, log_ends: dict, now: int, answered: dict) -> set:
    """The reference: every held ring judged, as a scan at every tick would."""
    due = set()
    for windows in cache.groups.values():
        for field_name, ring in windows.rings.items():
            topic, partition = keys.parse_partition_field(field_name)
            log_end = log_ends.get((topic, partition))
            if log_end is None:
                continue
            committed = newest_offset(ring)
            lag = log_end - committed
            standing = probe_schedule._standing_from(ring, committed) + HOUR_MS <= now
            asked = (topic, partition, committed)
            if lag > 0 and (lag <= probe_schedule.MAX_LAG or standing) and answered.get(asked) not in (log_end, -1):
                due.add(asked)
    return due


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), st.sampled_from("ab"), st.integers(0, 1), st.sampled_from([0, 5, 1_000, 2_000])),
        st.tuples(st.just("log-end"), st.integers(0, 1), st.sampled_from([0, 5, 1_000, 1_005, 2_500])),
        st.tuples(st.just("answer"), st.integers(0, 1), st.booleans()),
        st.tuples(st.just("wait"), st.sampled_from([1, 60_000, HOUR_MS - 60_000, HOUR_MS])),
        st.tuples(st.just("forget"), st.sampled_from("ab")),
    ),
    max_size=30,
)


@given(STEPS)
@example([("commit", "a", 0, 0), ("log-end", 0, 2_500), ("wait", HOUR_MS)])  # a timer
@example([("commit", "a", 0, 0), ("log-end", 0, 5), ("answer", 0, False), ("log-end", 0, 5)])  # an answer holds
@settings(max_examples=300)
def test_what_changed_gives_what_a_scan_of_every_ring_would(steps):
    """The schedule is fed what changed (stored commits, moved log ends, its timers); a scan of every held ring at
    every tick is the reference, and both find the same partitions due after any sequence of changes."""
    schedule, cache, log_ends = _schedule()
    now, history = NOW, {}
    for step in steps:
        if step[0] == "commit":
            _, group, partition, offset = step
            entries = history.setdefault((group, partition), [])
            entries[:] = [*entries, (max([offset, *(o for o, _ in entries)]), now)][-3:]
            _commit(cache, group, "t", partition, entries)
            schedule.touched([group])
        elif step[0] == "log-end":
            log_ends[("t", step[1])] = step[2]
            schedule.moves.add(("t", step[1]))
        elif step[0] == "answer":
            for asked in [a for a in schedule.due(now) if a[1] == step[1]]:
                schedule._answered[asked] = -1 if step[2] else log_ends[("t", step[1])]
                schedule._requeue({asked}, {asked})
        elif step[0] == "wait":
            now += step[1]
        else:
            cache.forget_group(step[1])
            history = {k: v for k, v in history.items() if k[0] != step[1]}
        assert set(schedule.due(now)) == _scan(cache, log_ends, now, schedule._answered)


async def test_an_unexpected_error_in_a_tick_is_said_and_the_next_tick_comes(caplog):
    """The offsets' answers stand meanwhile; a schedule that died silently would leave them for good."""
    asked = []

    def log_ends():
        asked.append(len(asked))
        if len(asked) == 1:
            raise RuntimeError("a bug")
        return {}

    cache = WindowCache(None, CLUSTER, WindowConfig())  # type: ignore[arg-type]
    schedule = ProbeSchedule(CLUSTER, None, cache, log_ends, None, None, 0.01, HOUR_MS)  # type: ignore[arg-type]
    stopping = asyncio.Event()
    running_schedule = asyncio.create_task(schedule.run(stopping))
    await eventually(lambda: _true(len(asked) >= 3), timeout=5)
    stopping.set()
    await running_schedule
    assert "log probe tick failed" in caplog.text


async def _true(value: bool) -> bool:
    return value
