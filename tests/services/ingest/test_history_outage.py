"""The broker leading the history topic goes away: the ingest's windows go on, its offsets-topic position waits, and
once the broker is back every commit of the outage is on the history topic and the position moves on (in admin
mode, which cannot read again, archiving resumes and the commits in between are missing)."""

import logging
import time

from aiokafka import AIOKafkaConsumer, TopicPartition

from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OffsetsTopicWriter
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.records.history import decode, records_of
from lagwatch.shared.runtime.config import Config
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, produce, running
from tests.services.ingest.conftest import AWAY, HISTORY
from tests.services.ingest.test_ingest import window_of
from tests.services.ingest.test_ingest_admin_mode import Member
from tests.services.ingest.test_ingest_resilience import (
    _equals,
    _true,
    commits_round,
    committed_offsets,
    expected_orders,
    stored_orders,
)


async def test_a_history_topic_without_its_broker_holds_the_position_not_the_windows(
    one_broker_apart, redis_server, redis
):
    config, store = _with_history(one_broker_apart, redis_server, redis)
    now = int(time.time() * 1000)
    specs, orders = [], []
    async with (
        OffsetsTopicWriter(one_broker_apart.bootstrap) as writer,
        running(IngestWorker(config, CLUSTER)) as worker,
    ):
        worker.archive.stall_s = 2.0
        specs, orders = await _round(writer, 0, now, specs, orders)
        await eventually(lambda: _equals(stored_orders(store), expected_orders(specs, orders)))
        await eventually(lambda: _archived(one_broker_apart.bootstrap, orders))
        await eventually(lambda: _committed_through(one_broker_apart.bootstrap, _ends(writer, specs, orders)))
        before = await committed_offsets(one_broker_apart.bootstrap)

        one_broker_apart.set_broker_down(AWAY)
        for r in range(1, 4):  # rounds of several batches each: the windows take every one while the broker is away
            specs, orders = await _round(writer, r, now, specs, orders)
            expected = expected_orders(specs, orders)
            await eventually(lambda e=expected: _equals(stored_orders(store), e), timeout=15)
        await eventually(lambda: _true(worker.archive.broken))
        assert await committed_offsets(one_broker_apart.bootstrap) == before  # nothing unarchived passed

        one_broker_apart.set_broker_up(AWAY)
        await eventually(lambda: _archived(one_broker_apart.bootstrap, orders), timeout=60)
        ends = _ends(writer, specs, orders)
        await eventually(lambda: _committed_through(one_broker_apart.bootstrap, ends), timeout=30)
        assert not worker.archive.broken
    assert await stored_orders(store) == expected_orders(specs, orders)  # read again: duplicates, dropped by order


async def test_a_worker_stopped_during_the_outage_leaves_the_unarchived_commits_to_the_next(
    one_broker_apart, redis_server, redis
):
    config, store = _with_history(one_broker_apart, redis_server, redis)
    now = int(time.time() * 1000)
    specs, orders = [], []
    async with OffsetsTopicWriter(one_broker_apart.bootstrap) as writer:
        worker = IngestWorker(config, CLUSTER)
        async with running(worker):
            worker.archive.stall_s = 2.0
            one_broker_apart.set_broker_down(AWAY)
            for r in range(2):
                specs, orders = await _round(writer, r, now, specs, orders)
                expected = expected_orders(specs, orders)
                await eventually(lambda e=expected: _equals(stored_orders(store), e), timeout=15)
            await eventually(lambda: _true(worker.archive.broken))
            stopping = time.monotonic()
        assert time.monotonic() - stopping < 15  # the stop does not wait out the broker (30 s delivery timeout)
        assert await committed_offsets(one_broker_apart.bootstrap) == dict.fromkeys(range(DEFAULT_PARTITIONS))

        one_broker_apart.set_broker_up(AWAY)
        async with running(IngestWorker(config, CLUSTER)):
            await eventually(lambda: _archived(one_broker_apart.bootstrap, orders), timeout=60)
            ends = _ends(writer, specs, orders)
            await eventually(lambda: _committed_through(one_broker_apart.bootstrap, ends), timeout=30)


async def test_in_admin_mode_the_windows_go_on_and_archiving_resumes_with_a_gap(
    one_broker_apart, redis_server, redis, caplog
):
    """Admin mode (`offsets-source: admin`) cannot read commits again: while the history topic is away the windows
    take every commit, and once it is back archiving resumes, the commits in between missing (logged). The broker
    away coordinates none of the groups: polls go on at their pace (they waited for its ListGroups answer, 10 s)."""
    one_broker_apart.set_group_coordinator("g-admin", 1)  # the group's coordinator stays up
    await produce(one_broker_apart.bootstrap, "orders", {0: 10})
    config = make_config(
        one_broker_apart.bootstrap,
        redis_server.url,
        HISTORY__ENABLED="true",
        **{f"CLUSTERS__{CLUSTER}__OFFSETS_SOURCE": "admin", f"CLUSTERS__{CLUSTER}__ADMIN_GROUPS": "g-admin"},
    )
    store = WindowStore(redis, config.window())
    member = Member(one_broker_apart.bootstrap, "g-admin", "orders")
    async with running(IngestWorker(config, CLUSTER)) as worker:
        worker.archive.stall_s = 2.0
        await member.start()
        try:
            await member.commit(2)
            await eventually(lambda: _has(_admin_offsets(one_broker_apart.bootstrap), 2), timeout=20)

            one_broker_apart.set_broker_down(AWAY)
            for offset in (4, 6, 8):  # each seen at the next polls: the broker away holds neither them nor the list
                await member.commit(offset)
                await eventually(lambda o=offset: _window_reaches(store, o), timeout=3)
            await eventually(lambda: _true(worker.archive.broken), timeout=20)

            with caplog.at_level(logging.WARNING, logger="lagwatch.services.ingest.archive_queue"):
                one_broker_apart.set_broker_up(AWAY)
                await eventually(lambda: _true(not worker.archive.broken), timeout=60)
                await member.commit(10)
                await eventually(lambda: _has(_admin_offsets(one_broker_apart.bootstrap), 10), timeout=30)
        finally:
            await member.stop()
        assert not worker.archive.rewind_due  # nothing to read again in admin mode
    assert "those in between are missing" in caplog.text
    assert (await window_of(store, "g-admin", "orders", 0)).entries[-1].offset == 10


async def _has(offsets, offset: int) -> bool:
    return offset in await offsets


async def _window_reaches(store: WindowStore, offset: int) -> bool:
    window = await window_of(store, "g-admin", "orders", 0)
    return window is not None and bool(window.entries) and window.entries[-1].offset == offset


async def _admin_offsets(bootstrap: str) -> set[int]:
    """The offsets of g-admin's commits on the history topic."""
    return {r.offset for r in await _history_records(bootstrap) if r.group == "g-admin" and r.offset is not None}


def _with_history(brokers, redis_server, redis) -> tuple[Config, WindowStore]:
    """A config with history on, in batches of 20 (a round of commits is several), and the windows' store."""
    config = make_config(brokers.bootstrap, redis_server.url, HISTORY__ENABLED="true", INGEST__BATCH_SIZE="20")
    return config, WindowStore(redis, config.window())


async def _round(writer, r, now, specs, orders):
    batch = commits_round(r, now)
    return specs + batch, orders + await writer.commits(batch)


def _ends(writer, specs, orders) -> dict[int, int]:
    """Offsets-topic partition -> the position after the last commit written to it."""
    ends: dict[int, int] = {}
    for spec, order in zip(specs, orders, strict=True):
        partition = writer.partition_for(spec.group)
        ends[partition] = max(ends.get(partition, 0), order + 1)
    return ends


async def _archived(bootstrap: str, orders: list[int]) -> bool:
    """Every commit written (by its order) is on the history topic."""
    return set(orders) <= await _history_orders(bootstrap)


async def _history_orders(bootstrap: str) -> set[int]:
    return {r.order for r in await _history_records(bootstrap) if r.order is not None}


async def _history_records(bootstrap: str) -> list:
    """Every commit record on the history topic so far."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        partitions = [TopicPartition(HISTORY, p) for p in range(3)]
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)  # read up to here (samples keep coming)
        found = []
        while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
            batch = await consumer.getmany(timeout_ms=1000)
            for messages in batch.values():
                for message in messages:
                    records = (decode(line) for line in records_of(message.value))
                    found.extend(r for r in records if r.kind == "commit")
        return found
    finally:
        await consumer.stop()


async def _committed_through(bootstrap: str, ends: dict[int, int]) -> bool:
    committed = await committed_offsets(bootstrap)
    return all((committed.get(p) or 0) >= end for p, end in ends.items())
