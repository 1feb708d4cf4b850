"""The compiled per-record loop (commit_pass.pyx) and the Python one (`BatchProcessor._python_pass`) agree, and so do
the compiled flush (flush_encoding.pyx) and the Python one, as Redis stores them; so do the loop's compiled steps and
their references: the ring update and the pure window, the history writer and `HistoryMessages`.

The same batches go through two processors, one per loop, each on an empty Redis with the Kafka mock's log ends:
windows in memory, their `last`, tallies, positions and what each wrote to Redis must be identical. The batches mix
what the hot loop meets (commits in order, merges within min-distance, full rings, commits older than the newest,
expired ones, unknown log ends, groups loaded from Redis) with what it must hand back to Python (tombstones, group
metadata, junk values and keys, values of every version).
"""

import asyncio
import gc
import random
import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lagwatch.devkit import offsets_encoders as encoders
from lagwatch.services.ingest import processor as processor_module
from lagwatch.services.ingest.commit_pass import HistoryWriter, KeyReader, add_to_ring, heads_kept
from lagwatch.services.ingest.processor import BatchProcessor
from lagwatch.services.ingest.records import GroupDeletion, KeyCache, OffsetsDeleted
from lagwatch.shared.protocol.group_filter import GroupFilter
from lagwatch.shared.protocol.types import Commit, WindowConfig
from lagwatch.shared.records.history import MESSAGE_BYTES, HistoryMessages, commit_record, decode, records_of
from lagwatch.shared.records.offsets_codec import CodecError, GroupMember, decode_offset_commit_key
from lagwatch.shared.windows.packing import unpack_commit_ring
from lagwatch.shared.windows.window import ADMIN_ORDERS_FROM, AddOutcome, PartitionWindow, expired
from lagwatch.shared.windows.window_writes import GroupMetadataUpdate
from tests.kafka_helpers import CLUSTER, produce
from tests.services.ingest.raw_record import RawRecord
from tests.services.ingest.test_hardening_offsets_fuzz import Stack, commit, other_record
from tests.window_sequences import switching_sources

NOW_MS = int(time.time() * 1000)
WEEK_MS = 604_800_000
LATER_MS = WEEK_MS + 30_000  # a batch observed this much later finds the groups of the earlier ones expired


@st.composite
def ordered_commit(draw):
    """A commit of a few groups and partitions, near now, near a later now (or expired), in a narrow offset range:
    rings fill up, and neighbouring timestamps fall within min-distance."""
    group = draw(st.sampled_from(["billing", "audit", "search"]))
    topic, partition = draw(st.sampled_from([("orders", 0), ("orders", 1), ("unknown-topic", 0)]))
    later = draw(st.sampled_from([0, 0, LATER_MS]))
    timestamp = draw(st.integers(NOW_MS - 20_000, NOW_MS) | st.sampled_from([NOW_MS - WEEK_MS - 1, 0])) + later
    value = encoders.encode_offset_commit_value(
        draw(st.integers(0, 30)),
        timestamp,
        version=draw(st.sampled_from([1, 2, 3, 3, 3, 4])),
        metadata=draw(st.text(max_size=3)),
    )
    if draw(st.integers(0, 15)) == 0:
        value = None  # an offset-commit tombstone
    return group, encoders.encode_offset_commit_key(group, topic, partition), value


RECORDS = st.lists(ordered_commit() | ordered_commit() | ordered_commit() | commit() | other_record(), max_size=40)
# (records, offset step back, observed how much after the first batch)
BATCHES = st.lists(st.tuples(RECORDS, st.integers(0, 12), st.sampled_from([0, 0, LATER_MS])), min_size=1, max_size=4)


def _billing_commit(offset: int, timestamp: int) -> tuple[str, bytes, bytes]:
    return (
        "billing",
        encoders.encode_offset_commit_key("billing", "orders", 0),
        encoders.encode_offset_commit_value(offset, timestamp),
    )


# a group committing, then committing again in a batch observed after it expired
EXPIRING = [([_billing_commit(3, NOW_MS)], 0, 0), ([_billing_commit(4, NOW_MS + LATER_MS)], 0, LATER_MS)]
# two commits a second apart, within min-distance (2 s): the second merges into the first's entry
MERGING = [([_billing_commit(3, NOW_MS - 2_000), _billing_commit(4, NOW_MS - 1_000)], 0, 0)]


@pytest.fixture
def stack(kafka, redis_server):
    kafka.create_topic("orders", 2)
    asyncio.run(produce(kafka.bootstrap, "orders", {0: 20, 1: 5}))
    with Stack(kafka, redis_server.url, STORAGE__INTERVALS="3", STORAGE__MIN_DISTANCE="2") as stack:
        yield stack


# log ends sampled before the Kafka mock's (orders 0: 20, 1: 5), when the commits were made: with a commit clock
# known, commits stamped before the real sample take their lag from these (BatchProcessor._log_end)
EARLIER_POLLS = ((NOW_MS - 15_000, {0: 4, 1: 1}), (NOW_MS - 5_000, {0: 11, 1: 3}))


def run(stack, batches, clock, *, compiled, clock_offsets=None):
    """Every batch through a fresh processor on an empty Redis, each observed at its own time; what it holds and
    wrote. A group's records come from one of two offsets partitions, each with its own commit clock (or none)."""
    group_filter = stack.config.group_filter(CLUSTER)
    processor = BatchProcessor(CLUSTER, stack.store, stack.broker_offsets, group_filter, keep_commits=True)
    processor.compiled = processor.packs_flush = compiled
    processor.clock_offsets = dict(clock_offsets or {})
    stack.loop.run_until_complete(stack.redis.flushdb())
    stack.broker_offsets.latest.clear()
    for sampled_at, offsets in EARLIER_POLLS if clock_offsets is not None else ():
        stack.loop.run_until_complete(stack.store.writes.add_broker_polls(CLUSTER, {"orders": offsets}, sampled_at))
    stack.loop.run_until_complete(stack.broker_offsets.tick())
    outcome = []
    order = 0
    for i, (records, step_back, later) in enumerate(batches):
        clock[0] = NOW_MS + later
        if i % 2 and step_back > 8:
            records, order = batches[i - 1][0], order - len(batches[i - 1][0])  # the previous batch read again
            if step_back > 10:
                processor.read_again()  # as after a history-topic outage
        order -= step_back  # records read again: `order` goes back
        raw = []
        for group, key, value in records:
            raw.append(RawRecord(key, value, len(str(group)) % 2, max(order, 0), 1))
            order += 1
        batch = stack.loop.run_until_complete(processor.apply(raw))
        stack.loop.run_until_complete(processor.write(processor.take_flush(batch.observed_at)))
        batch.history.close()  # the compiled pass's records are written when the publisher asks for them
        done = (dict(batch.tally), dict(batch.positions), dict(batch.touched), len(batch.deferred))
        outcome.append((*done, batch.history.messages, dict(batch.commit_times)))  # commit_times: commit_clock.py
    cache = {
        group: (dict(cached.rings), cached.last, cached.changed, cached.removed, cached.replace)
        for group, cached in processor.cache.groups.items()
    }
    stored = stack.loop.run_until_complete(_groups_stored(stack.redis))
    return outcome, cache, stored


async def _groups_stored(redis):
    """Every key of the groups and the group index (not the log ends: sampled anew for each run)."""
    contents = {}
    for key in await redis.keys("lw:g:*") + await redis.keys("lw:c:*:groups"):
        kind = (await redis.type(key)).decode()
        if kind == "hash":
            contents[key] = await redis.hgetall(key)
        elif kind == "zset":
            contents[key] = await redis.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            contents[key] = await redis.smembers(key)
        else:
            contents[key] = await redis.get(key)
    return contents


def test_the_compiled_loop_and_the_python_loop_agree(stack, monkeypatch):
    clock = [NOW_MS]
    monkeypatch.setattr(processor_module, "now_ms", lambda: clock[0])  # both runs observe each batch at one instant

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(batches=BATCHES, clock_offsets=st.sampled_from([None, {0: 0}, {0: 0, 1: 0}, {0: 3_000, 1: 0}, {1: -2_000}]))
    @example(batches=EXPIRING, clock_offsets=None)  # the random batches expire a group in most runs, this one always
    @example(batches=MERGING, clock_offsets={1: 0})  # and merge in most runs, this one always
    def agree(batches, clock_offsets):
        compiled = run(stack, batches, clock, compiled=True, clock_offsets=clock_offsets)
        python = run(stack, batches, clock, compiled=False, clock_offsets=clock_offsets)
        assert compiled == python
        outcomes.update(name for tally, *_ in compiled[0] for name in tally if name.startswith("outcome:"))

    outcomes: set[str] = set()
    restarts = _count_restarts(monkeypatch)
    agree()
    assert restarts, "no group expired between batches: the compiled loop's hand-over to _open_group went untested"
    # the property covered every way the loop stores or refuses a commit
    assert {"outcome:appended", "outcome:merged", "outcome:expired", "outcome:no_broker_offset"} <= outcomes, outcomes
    assert {"outcome:duplicate", "outcome:too_old", "outcome:inserted"} & outcomes, outcomes


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_commits_read_again_after_a_rewind_keep_their_commit_time_in_the_history(stack, monkeypatch, compiled):
    """After a history-topic outage the worker reads its partitions again (`read_again`): the commits it had read
    go to the history stamped with their commit time (near when they were first read, never later than now), the
    ones read for the first time with the time they were read; once past them, nothing is stamped differently.
    Only the commits read for the first time give the commit clock their timestamps."""
    clock = [NOW_MS]
    monkeypatch.setattr(processor_module, "now_ms", lambda: clock[0])
    processor = BatchProcessor(
        CLUSTER, stack.store, stack.broker_offsets, stack.config.group_filter(CLUSTER), keep_commits=True
    )
    processor.compiled = compiled
    stack.loop.run_until_complete(stack.broker_offsets.tick())
    first_read = [(0, NOW_MS - 3000), (1, NOW_MS - 2000), (2, NOW_MS + 120_000)]  # the last from a clock ahead

    def observed(records, later):
        clock[0] = NOW_MS + later
        raw = [RawRecord(*_billing_commit(order, ts)[1:], 0, order, 1) for order, ts in records]
        batch = stack.loop.run_until_complete(processor.apply(raw))
        batch.history.close()
        clock_figures.append(batch.commit_times.get(0))
        return [decode(r).observed_at for _, message in batch.history.messages for r in records_of(message)]

    clock_figures: list[tuple[int, int]] = []
    assert observed(first_read, 0) == [NOW_MS] * 3
    processor.read_again()
    again = observed([*first_read, (3, NOW_MS + 59_000)], 60_000)
    assert again == [NOW_MS - 3000, NOW_MS - 2000, NOW_MS + 60_000, NOW_MS + 60_000]
    assert observed([(4, NOW_MS + 60_000)], 61_000) == [NOW_MS + 61_000]
    assert clock_figures == [(NOW_MS - 3000, NOW_MS + 120_000), (NOW_MS + 59_000,) * 2, (NOW_MS + 60_000,) * 2]
    assert processor.reread_until == {}


def _count_restarts(monkeypatch) -> list[str]:
    """The groups opened while expired (`_open_group` starts them afresh), as it happens: the compiled loop hands
    exactly these to Python."""
    restarts: list[str] = []
    open_group = BatchProcessor._open_group

    def counted(processor, group, current, batch):
        if current.last is not None and expired(current.last, batch.observed_at, processor.store.config):
            restarts.append(group)
        return open_group(processor, group, current, batch)

    monkeypatch.setattr(BatchProcessor, "_open_group", counted)
    return restarts


NUMBERS = st.integers(0, 2**53 - 1) | st.integers(-(2**63), 2**63 - 1)
HISTORY_HEADS: list[dict] = [{}, {}, {}]  # kept across examples: parts built once, then reused
COMMITS = st.tuples(
    st.sampled_from([0, 1, 49]),  # the offsets-topic partition read from
    st.sampled_from(["billing", 'quo"te\\', "zählung"]) | st.text(max_size=8),  # group
    st.sampled_from(["orders", "tab\tbed"]) | st.text(max_size=8),  # topic
    st.integers(0, 2**31 - 1),  # partition
    st.tuples(NUMBERS, NUMBERS, NUMBERS, NUMBERS),
)


@settings(max_examples=300, deadline=None)
@given(cluster=st.sampled_from(["prod", "prod-é"]), commits=st.lists(COMMITS, max_size=6), long_run=st.booleans())
def test_the_compiled_loop_writes_history_messages_as_history_messages_does(cluster, commits, long_run):
    """With `history.enabled` the compiled loop writes each commit's history record itself, the parts naming the
    group and the partition built once, into messages of consecutive records of an offsets partition: byte for byte
    the messages `history.HistoryMessages` makes of the same commits (`add_commit`), split where it splits them."""
    if long_run and commits:  # one group's commits past a message's size
        commits = commits + [commits[-1]] * (MESSAGE_BYTES // 150)
    heads = HISTORY_HEADS if cluster == "prod" else [{}, {}, {}]  # a cache is one cluster's, as a processor's is
    compiled, reference = HistoryMessages(), HistoryMessages()
    writer = HistoryWriter(compiled, heads, cluster)
    for offsets_partition, group, topic, partition, numbers in commits:
        writer.add(offsets_partition, group, (topic, partition), *numbers)
        reference.add_commit(cluster, offsets_partition, group, topic, partition, *numbers)
    compiled.close()
    reference.close()
    assert compiled.messages == reference.messages


def test_the_ingests_encoding_of_a_commit_is_the_records_own_to_the_byte():
    for group, topic in (("g", "t"), ('we"ird\\', "tö pic"), ("ünïcode-群", "t.1")):
        commit = Commit(group, topic, 3, 120, NOW_MS - 5, 77, NOW_MS)
        record = commit_record("prod", commit)
        messages = HistoryMessages()
        HistoryWriter(messages, [{}, {}, {}], "prod").add(0, group, (topic, 3), *commit[3:])
        messages.close()
        assert messages.messages == [(b"prod/offsets-0", record.encode())]
        assert decode(record.encode()) == record


def test_records_are_written_whole_after_their_heads_cache_started_over_for_later_writers():
    """The writer notes where each record's parts are and writes the text later (off the pass's thread), while the
    next batch's writer goes on filling the processor's caches: a full cache is replaced, never cleared, and each
    writer keeps alive every cache its records point into."""
    heads: list[dict] = [{}, {}, {}]
    first, reference = HistoryMessages(), HistoryMessages()
    writer = HistoryWriter(first, heads, "prod")
    for n in range(heads_kept + 50):  # past the cache's size: the last 50 groups' parts are in a new cache
        writer.add(n % 50, f"group-{n}", ("orders", n % 3), n, NOW_MS, n, NOW_MS)
        reference.add_commit("prod", n % 50, f"group-{n}", "orders", n % 3, n, NOW_MS, n, NOW_MS)
    later = HistoryMessages()
    later_writer = HistoryWriter(later, heads, "prod")
    for n in range(heads_kept):  # the next batch fills that new cache in turn: the processor starts a third
        later_writer.add(0, f"other-{n}", ("orders", 0), n, NOW_MS, n, NOW_MS)
    later.close()
    del later, later_writer
    gc.collect()
    assert len(heads[0]) == 50  # the processor holds the third cache only
    reuse = [b"#" * (40 + n % 40) for n in range(100_000)]  # memory a freed cache left would now hold these
    first.close()
    del reuse
    reference.close()
    assert first.messages == reference.messages


def test_the_compiled_loop_is_built_where_the_tests_run():
    """`pip install -e .` compiles it (setup.py); a missing compiler would leave the ingest on the Python loop."""
    assert processor_module.compiled_pass is not None
    assert processor_module.compiled_pass.__module__ == "lagwatch.services.ingest.commit_pass"


SECOND = 1000


def test_the_compiled_ring_update_and_the_pure_window_agree_on_random_sequences():
    rng = random.Random(11)
    for run in range(300):
        config = WindowConfig(intervals=rng.choice([1, 3, 5, 10]), min_distance_ms=rng.choice([0, 0, 3 * SECOND]))
        window = PartitionWindow(config)
        ring = b""
        for step in range(60):
            if rng.random() < 0.2:
                window.add_broker_offset(rng.randint(0, 500))
                continue
            order = rng.randint(0, 80)
            ts = NOW_MS + order * SECOND + rng.randint(-2000, 2000)
            if rng.random() < 0.05:
                ts -= config.expire_group_ms + SECOND  # too old to keep
            offset = rng.randint(0, 500)
            expected = window.add_commit(Commit("g", "t", 0, offset, ts, order, NOW_MS + step), now_ms=NOW_MS)
            latest = window.broker_offsets[-1] if window.broker_offsets else None
            outcome, updated = add_to_ring(ring, offset, ts, order, NOW_MS + step, latest, NOW_MS, config)
            assert outcome == expected, (run, step)
            assert (updated is not None) == outcome.stored, (run, step)
            ring = updated if updated is not None else ring
            assert unpack_commit_ring(ring) == window.entries, (run, step)


def test_a_new_newest_commit_is_appended_without_unpacking_and_measured_against_the_log_end():
    config = WindowConfig(intervals=2)
    outcome, ring = add_to_ring(b"", 40, NOW_MS, 1, NOW_MS, 100, NOW_MS, config)
    assert outcome is AddOutcome.APPENDED
    for order, offset in ((2, 50), (3, 70)):
        outcome, ring = add_to_ring(ring, offset, NOW_MS + order, order, NOW_MS, 100, NOW_MS, config)
    assert [(e.offset, e.lag, e.order) for e in unpack_commit_ring(ring)] == [(50, 50, 2), (70, 30, 3)]


def test_the_compiled_ring_update_and_the_pure_window_agree_when_the_commits_switch_source():
    """From the admin poller's orders to the offsets topic's positions and back (window._continued_from_admin)."""
    rng = random.Random(13)
    for run in range(200):
        config = WindowConfig(intervals=rng.choice([1, 3, 5, 10]), min_distance_ms=rng.choice([0, 0, 3 * SECOND]))
        window = PartitionWindow(config)
        window.add_broker_offset(1000)
        ring = b""
        for step, (order, ts, offset) in enumerate(switching_sources(rng, NOW_MS, 60)):
            expected = window.add_commit(Commit("g", "t", 0, offset, ts, order, NOW_MS + step), now_ms=NOW_MS)
            outcome, updated = add_to_ring(ring, offset, ts, order, NOW_MS + step, 1000, NOW_MS, config)
            assert outcome == expected, (run, step)
            ring = updated if updated is not None else ring
            assert unpack_commit_ring(ring) == window.entries, (run, step)


@st.composite
def admin_step(draw, order):
    """A step of admin mode (admin_offsets.py), typed, and the offsets-topic record the coordinator would have
    written for it (the processor read admin mode's steps so before they were handed over typed)."""
    group = draw(st.sampled_from(["billing", "audit"]))
    topic, partition = draw(st.sampled_from([("orders", 0), ("orders", 1), ("unknown-topic", 0)]))
    at = NOW_MS - draw(st.integers(0, 20_000))
    kind = draw(st.sampled_from(["commit"] * 6 + ["offsets-deleted", "group-deleted", "rebalance"]))
    key = encoders.encode_offset_commit_key(group, topic, partition)
    if kind == "commit":
        offset = draw(st.integers(0, 30))
        return Commit(group, topic, partition, offset, at, order, at), (
            key,
            encoders.encode_offset_commit_value(offset, at),
        )
    if kind == "offsets-deleted":
        return OffsetsDeleted(group, topic, partition, order), (key, None)
    if kind == "group-deleted":
        return GroupDeletion(group, order), (encoders.encode_group_metadata_key(group), None)
    member = GroupMember(
        "m-1", None, "client-1", "/10.0.0.1", -1, -1, b"", encoders.encode_assignment({topic: [partition]})
    )
    value = encoders.encode_group_metadata_value(
        generation=order % 100, protocol="range", leader="m-1", members=[member], current_state_timestamp=at
    )
    owners = {(topic, partition): ("/10.0.0.1", "client-1")}
    return GroupMetadataUpdate(group, order % 100, at, owners), (encoders.encode_group_metadata_key(group), value)


@st.composite
def admin_batches(draw):
    order = ADMIN_ORDERS_FROM
    batches = []
    for _ in range(draw(st.integers(1, 3))):
        steps = []
        for _ in range(draw(st.integers(0, 12))):
            order += 1
            steps.append((*draw(admin_step(order)), order))
        batches.append(steps)
    return batches


def test_admin_modes_typed_steps_do_what_the_same_records_do(stack, monkeypatch):
    """Admin mode hands its commits, tombstones and rebalances to the processor typed: the windows, tallies,
    history and rebalances are those the same changes make when read as the coordinator's records."""
    monkeypatch.setattr(processor_module, "now_ms", lambda: NOW_MS)

    def applied(batches, typed):
        processor = BatchProcessor(
            CLUSTER, stack.store, stack.broker_offsets, stack.config.group_filter(CLUSTER), keep_commits=True
        )
        stack.loop.run_until_complete(stack.redis.flushdb())
        stack.loop.run_until_complete(stack.broker_offsets.tick())
        done = []
        for steps in batches:
            records = [RawRecord(*record, 0, order, NOW_MS) for _, record, order in steps]
            batch = stack.loop.run_until_complete(processor.apply([s for s, *_ in steps] if typed else records))
            assert not typed or not batch.commit_times  # the poller's own stamps: nothing for the commit clock
            flush = processor.take_flush(batch.observed_at)
            stack.loop.run_until_complete(processor.write(flush))
            batch.history.close()
            done.append((dict(batch.tally), dict(batch.touched), batch.history.messages, flush.rebalances))
        cache = {g: (dict(c.rings), c.last, c.changed, c.removed) for g, c in processor.cache.groups.items()}
        return done, cache, stack.loop.run_until_complete(_groups_stored(stack.redis))

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(batches=admin_batches())
    def agree(batches):
        typed = applied(batches, typed=True)
        assert typed == applied(batches, typed=False)
        seen.update(name for tally, *_ in typed[0] for name in tally)

    seen: set[str] = set()
    agree()
    assert {"outcome:appended", "outcome:no_broker_offset", "offset_commit_tombstone", "group_deleted"} <= seen, seen


KEY_NAMES = st.sampled_from(["billing", "audit", "orders"]) | st.text(max_size=6)


@st.composite
def commit_keys(draw):
    """Offset-commit keys as Kafka writes them, cut short, with bytes after them, or with bytes UTF-8 refuses."""
    key = encoders.encode_offset_commit_key(
        draw(KEY_NAMES), draw(KEY_NAMES), draw(PARTITION_NUMBERS), version=draw(st.sampled_from([0, 1]))
    )
    cut = draw(st.sampled_from([None, None, "short", "longer", "bytes"]))
    if cut == "short":
        key = key[: draw(st.integers(0, len(key) - 1))]
    elif cut == "longer":
        key += draw(st.binary(min_size=1, max_size=4))
    elif cut == "bytes":
        at = draw(st.integers(0, len(key) - 1))
        key = key[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\x80", b"\x02"])) + key[at + 1 :]
    return key


PARTITION_NUMBERS = st.sampled_from([0, 1, 7]) | st.integers(-(2**31), 2**31 - 1)


@settings(max_examples=400, deadline=None)
@given(st.lists(commit_keys(), min_size=1, max_size=12))
def test_a_key_read_in_place_names_what_python_decodes_it_to(keys):
    """In turn as the pass meets them (the group and the topic compared with the previous key's), every key the
    reader resolves decodes in Python to the same group, partition and field; a key Python decodes, of a group held
    and a partition known, is resolved."""
    cache = KeyCache(GroupFilter())
    held: dict[str, object] = {}
    for key in keys:  # the groups held and the partitions known: those of half the well-formed keys
        decoded = _decoded(key)
        if decoded is not None and hash(key) % 2:
            held[decoded[0]] = object()
            cache.named(*decoded)
    reader = KeyReader(cache.fields, held)
    for key in keys:
        decoded = _decoded(key)
        resolved = reader.resolve(key)
        if resolved is None:
            assert not (decoded and decoded[0] in held and decoded[2] in cache.fields.get(decoded[1], {}))
            continue
        group, (topic, partition), field = resolved
        assert decoded == (group, topic, partition)
        assert field == f"{topic}:{partition}"


def _decoded(key: bytes) -> tuple[str, str, int] | None:
    if len(key) < 2 or key[0] != 0 or key[1] > 1:
        return None
    try:
        return decode_offset_commit_key(key)
    except CodecError:
        return None


@pytest.mark.parametrize("compiled", [True, False])
def test_a_stored_groups_name_is_handed_on_as_the_window_cache_holds_it(stack, compiled):
    """Whoever keeps the groups a batch touched (the probe schedule, the change notices' cache) keeps the cache's own
    string for each, not a copy decoded from the batch's records."""
    group_filter = stack.config.group_filter(CLUSTER)
    processor = BatchProcessor(CLUSTER, stack.store, stack.broker_offsets, group_filter)
    processor.compiled = processor.packs_flush = compiled
    stack.loop.run_until_complete(stack.redis.flushdb())
    stack.loop.run_until_complete(stack.broker_offsets.tick())
    for order in (0, 1):  # the group loaded for the first batch, in memory for the second
        _, key, value = _billing_commit(order + 3, NOW_MS - 1_000 + order)
        batch = stack.loop.run_until_complete(processor.apply([RawRecord(key, value, 0, order, 1)]))
        [(touched, _)] = batch.touched.items()
        [(held, windows)] = processor.cache.groups.items()
        assert touched is held and windows.group is held
