"""The ingest service against the Kafka mock cluster and a real Redis: commits become windows (spec §2, §4)."""

import time

from kafka_helpers import CLUSTER, consume_and_commit, eventually, make_config, produce, running

from lagwatch.services.ingest.worker import IngestWorker, self_group
from lagwatch.shared.local.offsets_topic_writer import OffsetsTopicWriter
from lagwatch.shared.store.redis_store import WindowStore


async def window_of(store, group, topic, partition):
    stored = await store.get_group(CLUSTER, group)
    if stored is None:
        return None
    return next((p for p in stored.partitions if (p.topic, p.partition) == (topic, partition)), None)


async def test_a_real_consumer_groups_commits_become_its_window(kafka, redis_server, redis):
    kafka.create_topic("orders", 2)
    await produce(kafka.bootstrap, "orders", {0: 30, 1: 20})
    committed = await consume_and_commit(kafka.bootstrap, "billing", "orders", 50)
    assert committed == {0: 30, 1: 20}
    config = make_config(kafka.bootstrap, redis_server.url)
    store = WindowStore(redis, config.window())
    async with OffsetsTopicWriter(kafka.bootstrap) as writer, running(IngestWorker(config, CLUSTER)):
        orders = [await writer.commit("billing", "orders", p, off) for p, off in committed.items()]
        await produce(kafka.bootstrap, "orders", {0: 5})  # the log moves on: lag at the next commit
        part0 = await eventually(lambda: window_of(store, "billing", "orders", 0))
        assert [(e.offset, e.order, e.lag) for e in part0.entries] == [(30, orders[0], 0)]
        await eventually(lambda: _broker_offset_is(store, "orders", 0, 35))
        order = await writer.commit("billing", "orders", 0, 32)
        part0 = await eventually(lambda: _has_entries(store, "billing", "orders", 0, 2))
        assert [(e.offset, e.order, e.lag) for e in part0.entries] == [(30, orders[0], 0), (32, order, 3)]
        assert part0.current_lag == 3


async def _broker_offset_is(store, topic, partition, offset):
    rings = await store.broker_rings(CLUSTER, [(topic, partition)])
    return rings[(topic, partition)][-1:] == [offset]


async def _has_entries(store, group, topic, partition, n):
    window = await window_of(store, group, topic, partition)
    return window if window is not None and len(window.entries) >= n else None


async def test_lagwatch_reports_its_own_progress_as_a_group(kafka, redis_server, redis):
    kafka.create_topic("orders", 1)
    config = make_config(kafka.bootstrap, redis_server.url)
    store = WindowStore(redis, config.window())
    async with OffsetsTopicWriter(kafka.bootstrap) as writer, running(IngestWorker(config, CLUSTER)):
        await writer.commit("billing", "orders", 0, 0, timestamp=int(time.time() * 1000))
        own = await eventually(lambda: store.get_group(CLUSTER, self_group(CLUSTER)))
        [part] = own.partitions
        assert part.topic == "__consumer_offsets"
        assert part.partition == writer.partition_for("billing")
        assert part.entries[-1].offset == 1 and part.current_lag == 0
