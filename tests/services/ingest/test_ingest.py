"""The ingest service against the Kafka mock cluster and a real Redis: commits become windows (docs/rules.md §2, §4)."""

import asyncio
import time

from lagwatch.devkit import offsets_encoders as encoders
from lagwatch.devkit.offsets_topic_writer import OffsetsTopicWriter
from lagwatch.services.ingest import service
from lagwatch.services.ingest.service import IngestWorker, self_group
from lagwatch.shared.windows.ingest_totals import read_totals
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, consume_and_commit, eventually, make_config, produce, running


async def window_of(store, group, topic, partition):
    stored = await store.reads.get_group(CLUSTER, group)
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
        orders = {p: await writer.commit("billing", "orders", p, off) for p, off in committed.items()}
        part0 = await eventually(lambda: window_of(store, "billing", "orders", 0))
        assert [(e.offset, e.order, e.lag) for e in part0.entries] == [(30, orders[0], 0)]
        await produce(kafka.bootstrap, "orders", {0: 5})  # the log moves on: lag at the next commit
        await eventually(lambda: _broker_offset_is(store, "orders", 0, 35))
        order = await writer.commit("billing", "orders", 0, 32)
        part0 = await eventually(lambda: _has_entries(store, "billing", "orders", 0, 2))
        assert [(e.offset, e.order, e.lag) for e in part0.entries] == [(30, orders[0], 0), (32, order, 3)]
        assert part0.current_lag == 3


async def _broker_offset_is(store, topic, partition, offset):
    rings = await store.reads.broker_rings(CLUSTER, [(topic, partition)])
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
        own = await eventually(lambda: store.reads.get_group(CLUSTER, self_group(CLUSTER)))
        # every partition of the offsets topic is listed (Burrow lists a topic's partitions that never committed);
        # the one holding billing's commit has lagwatch's position
        [part] = [p for p in own.partitions if p.entries]
        assert {p.topic for p in own.partitions} == {"__consumer_offsets"}
        assert part.partition == writer.partition_for("billing")
        assert part.entries[-1].offset == 1 and part.current_lag == 0


def now_ms():
    return int(time.time() * 1000)


async def test_group_metadata_sets_owners_and_its_tombstone_deletes_the_group(kafka, redis_server, redis):
    from lagwatch.devkit.offsets_topic_writer import member

    kafka.create_topic("orders", 2)
    config = make_config(kafka.bootstrap, redis_server.url)
    store = WindowStore(redis, config.window())
    async with OffsetsTopicWriter(kafka.bootstrap) as writer, running(IngestWorker(config, CLUSTER)):
        await writer.commit("billing", "orders", 0, 0)
        await writer.commit("billing", "orders", 1, 0)
        members = [
            member("m-1", "billing-a", "/10.0.0.1", {"orders": [0]}),
            member("m-2", "billing-b", "/10.0.0.2", {"orders": [1]}),
        ]
        await writer.group_metadata("billing", generation=4, members=members)
        group = await eventually(lambda: _with_owners(store, "billing"))
        assert [(p.partition, p.owner, p.client_id) for p in group.partitions] == [
            (0, "/10.0.0.1", "billing-a"),
            (1, "/10.0.0.2", "billing-b"),
        ]
        assert (group.generation, group.rebalances_last_hour) == (4, 1)
        await writer.delete_group("billing")
        await eventually(lambda: _is_gone(store, "billing"))
        assert "billing" not in await store.reads.list_groups(CLUSTER)


async def test_an_online_upgrade_to_the_new_consumer_protocol_is_not_a_deletion(kafka, redis_server, redis):
    """KIP-848: the coordinator upgrades a live classic group by writing a group tombstone and the group's
    new-protocol records in one append, and keeps its offsets: the windows stay, and commits carry on in them."""
    kafka.create_topic("orders", 1)
    config = make_config(kafka.bootstrap, redis_server.url)
    store = WindowStore(redis, config.window())
    async with OffsetsTopicWriter(kafka.bootstrap) as writer:
        async with running(IngestWorker(config, CLUSTER)):
            for offset in (10, 20, 30):
                await writer.commit("billing", "orders", 0, offset)
            await eventually(lambda: _offsets_are(store, "billing", [10, 20, 30]))
        # written while no worker reads, so that the next one reads them in one batch, as an append is read
        await writer.raw("billing", encoders.encode_group_metadata_key("billing"), None)
        await writer.raw(
            "billing",
            encoders.encode_consumer_group_member_key("billing", "m-1"),
            encoders.encode_consumer_group_member_value(
                client_id="billing-a", client_host="/10.0.0.1", subscribed_topics=["orders"]
            ),
        )
        async with running(IngestWorker(config, CLUSTER)):
            await writer.commit("billing", "orders", 0, 40)
            await eventually(lambda: _offsets_are(store, "billing", [10, 20, 30, 40]))
    totals = await read_totals(redis, CLUSTER)
    assert (totals.get("group_deleted", 0), totals.get("group_upgraded")) == (0, 1)


async def _offsets_are(store, group, offsets):
    stored = await store.reads.get_group(CLUSTER, group)
    return stored is not None and [e.offset for e in stored.partitions[0].entries] == offsets


async def _with_owners(store, group):
    stored = await store.reads.get_group(CLUSTER, group)
    return stored if stored and stored.partitions and all(p.owner for p in stored.partitions) else None


async def _is_gone(store, group):
    return await store.reads.get_group(CLUSTER, group) is None


async def test_min_distance_full_ring_and_expired_commits(kafka, redis_server, redis):
    kafka.create_topic("orders", 1)
    config = make_config(
        kafka.bootstrap,
        redis_server.url,
        STORAGE__INTERVALS="3",
        STORAGE__MIN_DISTANCE="10",
        STORAGE__EXPIRE_GROUP="3600",
    )
    store = WindowStore(redis, config.window())
    t = now_ms() - 600_000
    async with OffsetsTopicWriter(kafka.bootstrap) as writer, running(IngestWorker(config, CLUSTER)):
        await writer.commit("billing", "orders", 0, 1, timestamp=t - 7_200_000)  # older than expire-group: dropped
        for i, ts in enumerate([t, t + 4000, t + 20_000, t + 40_000, t + 60_000]):
            await writer.commit("billing", "orders", 0, 10 + i, timestamp=ts)
        window = await eventually(lambda: _has_entries(store, "billing", "orders", 0, 3))
        await eventually(lambda: _newest_offset_is(store, "billing", 14))
        window = await window_of(store, "billing", "orders", 0)
        # the commit 4 s after the first merged into it (keeping its timestamp); the ring keeps the newest 3
        assert [(e.offset, e.timestamp) for e in window.entries] == [
            (12, t + 20_000),
            (13, t + 40_000),
            (14, t + 60_000),
        ]
        totals = await _totals(redis)
        assert totals["outcome:expired"] == 1 and totals["outcome:merged"] == 1


async def _newest_offset_is(store, group, offset):
    stored = await store.reads.get_group(CLUSTER, group)
    return stored and stored.partitions[0].entries[-1].offset == offset


async def _totals(redis):
    from lagwatch.shared.windows.ingest_totals import read_totals

    return await read_totals(redis, CLUSTER)


async def test_allow_and_deny_regexes_filter_groups_on_the_way_in(kafka, redis_server, redis):
    kafka.create_topic("orders", 1)
    config = make_config(
        kafka.bootstrap,
        redis_server.url,
        STORAGE__GROUP_ALLOWLIST="billing",
        STORAGE__GROUP_DENYLIST="^console-consumer-",
    )
    store = WindowStore(redis, config.window())
    async with OffsetsTopicWriter(kafka.bootstrap) as writer, running(IngestWorker(config, CLUSTER)):
        for group in ["billing-v2", "console-consumer-billing", "payments", "billing-v3"]:
            await writer.commit(group, "orders", 0, 0)
        # the four commits sit in different offsets-topic partitions, so one may be read before another written
        # earlier: wait until each is accounted for (two filtered, both others stored), then look at the listing
        await eventually(lambda: _filtered(redis, 2))
        await eventually(lambda: _groups_include(store, "billing-v2", "billing-v3"))
        assert await store.reads.list_groups(CLUSTER) == ["billing-v2", "billing-v3"]


async def _filtered(redis, n):
    return (await _totals(redis)).get("filtered") == n


async def _groups_include(store, *groups):
    return set(groups) <= set(await store.reads.list_groups(CLUSTER))


async def test_malformed_and_unknown_records_are_counted_and_skipped(kafka, redis_server, redis):
    from prometheus_client import REGISTRY

    from lagwatch.devkit import offsets_encoders as encoders

    kafka.create_topic("orders", 1)
    config = make_config(kafka.bootstrap, redis_server.url)
    store = WindowStore(redis, config.window())
    worker = IngestWorker(config, CLUSTER)
    errors_before = REGISTRY.get_sample_value("lagwatch_ingest_decode_errors_total", {"cluster": CLUSTER, "type": "1"})
    errors_before = errors_before or 0.0
    async with OffsetsTopicWriter(kafka.bootstrap) as writer, running(worker):
        await writer.raw("billing", b"\x00\x01\x00", b"\x00\x03")  # truncated offset-commit key
        await writer.raw("billing", encoders.encode_offset_commit_key("billing", "orders", 0), b"\x00\x63junk")  # v99
        await writer.raw("billing", b"\x00\x05" + b"\x00\x01g\x00\x01m", b"\x00\x00")  # KIP-848 member record
        await writer.raw("billing", encoders.encode_offset_commit_key("billing", "orders", 0), None)  # commit tombstone
        await writer.commit("billing", "orders", 0, 0)  # and a good one after them
        await eventually(lambda: store.reads.get_group(CLUSTER, "billing"))
        await eventually(lambda: _counted(redis, 5))  # the counters follow the windows
        totals = await _totals(redis)
        assert totals["decode_error:1"] == 2
        assert totals["offset_commit_tombstone"] == 1
        assert sum(v for k, v in totals.items() if k.startswith(("skipped_type:", "decode_error:5"))) == 1
        assert not worker.stopping.is_set()
        metrics = await _get(f"{worker.health.url}/metrics")
        series = 'lagwatch_ingest_decode_errors_total{cluster="local",type="1"} '
        [line] = [m for m in metrics.splitlines() if m.startswith(series)]
        assert float(line.split()[-1]) - errors_before == 2.0  # the process's counters also hold earlier tests'


async def _counted(redis, records):
    return (await _totals(redis)).get("records", 0) >= records


async def _get(url):
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return await response.text()


async def test_a_commit_for_a_brand_new_topic_is_held_until_its_offsets_are_known(kafka, redis_server, redis):
    config = make_config(
        kafka.bootstrap,
        redis_server.url,
        **{f"CLUSTERS__{CLUSTER}__TOPIC_REFRESH": "3600", f"CLUSTERS__{CLUSTER}__OFFSET_REFRESH": "3600"},
    )
    store = WindowStore(redis, config.window())
    async with OffsetsTopicWriter(kafka.bootstrap) as writer, running(IngestWorker(config, CLUSTER)) as worker:
        await eventually(lambda: _true(worker.broker_offsets.partition_counts))
        kafka.create_topic("fresh", 1)  # after the worker's only metadata refresh for the next hour
        await produce(kafka.bootstrap, "fresh", {0: 7})
        await writer.commit("billing", "fresh", 0, 4)
        window = await eventually(lambda: window_of(store, "billing", "fresh", 0))
        assert [(e.offset, e.lag) for e in window.entries] == [(4, 3)]
        await writer.commit("billing", "no-such-topic", 0, 4)
        await eventually(lambda: _total_is(redis, "outcome:no_broker_offset", 1))


async def _true(value):
    return bool(value)


async def _total_is(redis, name, n):
    return (await _totals(redis)).get(name) == n


async def test_a_deleted_topic_disappears_from_every_group(kafka, redis_server, redis):
    kafka.create_topic("orders", 1)
    kafka.create_topic("audit", 1)
    config = make_config(kafka.bootstrap, redis_server.url)
    store = WindowStore(redis, config.window())
    async with OffsetsTopicWriter(kafka.bootstrap) as writer, running(IngestWorker(config, CLUSTER)):
        for group in ["billing", "archiver"]:
            await writer.commit(group, "orders", 0, 0)
            await writer.commit(group, "audit", 0, 0)
        for group in ["billing", "archiver"]:  # in different offsets-topic partitions: read in either order
            await eventually(lambda group=group: _has_entries(store, group, "audit", 0, 1))
        kafka.delete_topic("audit")
        await eventually(lambda: _topics_of_are(store, "billing", ["orders"]), timeout=15)
        assert await _topics_of_are(store, "archiver", ["orders"])
        assert "audit" not in await store.reads.list_topics(CLUSTER)


async def _topics_of_are(store, group, topics):
    stored = await store.reads.get_group(CLUSTER, group)
    return stored is not None and sorted({p.topic for p in stored.partitions}) == topics


async def test_memory_is_given_back_on_catching_up_then_now_and_then(monkeypatch):
    monkeypatch.setattr(service, "BACKLOG_CHECK_S", 0.01)
    monkeypatch.setattr(service, "GIVE_BACK_EVERY_S", 3600.0)
    caught_up, stopping, calls = asyncio.Event(), asyncio.Event(), []
    task = asyncio.create_task(service.give_back_memory_after_backlogs(caught_up, stopping, lambda: calls.append(1)))
    await asyncio.sleep(0.05)
    assert calls == []  # reading a backlog
    caught_up.set()
    await eventually(lambda: asyncio.sleep(0, len(calls)))
    await asyncio.sleep(0.05)
    assert calls == [1]  # at once, then not at every look while caught up
    caught_up.clear()  # an outage, or partitions assigned: another backlog
    await asyncio.sleep(0.05)
    caught_up.set()
    await eventually(lambda: asyncio.sleep(0, len(calls) == 2))
    monkeypatch.setattr(service, "GIVE_BACK_EVERY_S", 0.0)
    await eventually(lambda: asyncio.sleep(0, len(calls) >= 4))  # now and then while caught up
    stopping.set()
    await task
