"""The broker leading the history topic goes away: the ingest's windows go on, its offsets-topic position waits, and
once the broker is back every commit of the outage is on the history topic and the position moves on."""

import time

from aiokafka import AIOKafkaConsumer, TopicPartition

from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OffsetsTopicWriter
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.config import Config
from lagwatch.shared.domain.history import decode, records_of
from lagwatch.shared.store.redis_store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, running
from tests.services.ingest.conftest import AWAY, HISTORY
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
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        partitions = [TopicPartition(HISTORY, p) for p in range(3)]
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)  # read up to here (samples keep coming)
        found: set[int] = set()
        while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
            batch = await consumer.getmany(timeout_ms=1000)
            for messages in batch.values():
                for message in messages:
                    records = (decode(line) for line in records_of(message.value))
                    found.update(r.order for r in records if r.kind == "commit" and r.order is not None)
        return found
    finally:
        await consumer.stop()


async def _committed_through(bootstrap: str, ends: dict[int, int]) -> bool:
    committed = await committed_offsets(bootstrap)
    return all((committed.get(p) or 0) >= end for p, end in ends.items())
