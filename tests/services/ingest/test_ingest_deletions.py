"""What Kafka deletes, lagwatch forgets: a deleted topic's log-end history (so a topic re-created under its name gets
lag in seconds right), and a partition whose committed offsets were deleted (`kafka-consumer-groups
--delete-offsets`, or expired by the broker: an offset-commit tombstone). Kafka mock -> ingest -> Redis -> api or
evaluator."""

import asyncio
import contextlib
import time
from dataclasses import dataclass
from urllib.parse import quote

import aiohttp
import pytest

from lagwatch.devkit import offsets_encoders as encoders
from lagwatch.devkit.offsets_topic_writer import OffsetCommitSpec, OffsetsTopicWriter
from lagwatch.services.api.service import ApiServer
from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.services.ingest.broker_offsets import BrokerOffsets
from lagwatch.services.ingest.processor import BatchProcessor
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.group_filter import GroupFilter
from lagwatch.shared.records.history import decode, records_of
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.windows.ingest_totals import read_totals
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, produce, running
from tests.services.evaluator.test_evaluator import STATUS_TOPIC, StatusTopic
from tests.services.ingest.raw_record import RawRecord
from tests.spark.test_spark_parity import HISTORY_TOPIC, _history

POLL_S = 0.3  # offset-refresh in make_config


@dataclass
class Running:
    """An ingest worker and an api over one Kafka mock cluster and Redis, with what the tests drive them with."""

    writer: OffsetsTopicWriter
    worker: IngestWorker
    api: ApiServer
    http: aiohttp.ClientSession
    store: WindowStore


@contextlib.asynccontextmanager
async def ingest_and_api(kafka, redis_server, redis, **env):
    config = make_config(kafka.bootstrap, redis_server.url, **env)
    async with (
        OffsetsTopicWriter(kafka.bootstrap) as writer,
        running(IngestWorker(config, CLUSTER)) as worker,
        running(ApiServer(config, port=0)) as api,
        aiohttp.ClientSession() as http,
    ):
        await api.started.wait()
        yield Running(writer, worker, api, http, WindowStore(redis, config.window()))


async def lag_of(http, api, group):
    async with http.get(f"{api.url}/v3/kafka/{CLUSTER}/consumer/{group}/lag") as response:
        return (await response.json())["status"] if response.status == 200 else None


async def history_of(store, topic, partition=0):
    return (await store.reads.offset_histories(CLUSTER, [(topic, partition)]))[(topic, partition)]


async def _paused_consumer_shows_its_pause(kafka, run: Running, group):
    """The group commits at the new log's end, then pauses while 10 messages arrive: its lag in seconds is the pause
    (± a poll), measured on the re-created topic's own history, not a lower bound."""
    writer, http, api, store = run.writer, run.http, run.api, run.store
    await eventually(lambda: _newest_sample_is(store, "orders", 5))
    await writer.commit(group, "orders", 0, 5)
    await eventually(lambda: lag_of(http, api, group))
    produced_at = time.time()
    await produce(kafka.bootstrap, "orders", {0: 10})
    await eventually(lambda: _newest_sample_is(store, "orders", 15))
    await asyncio.sleep(1)
    paused = time.time() - produced_at
    [part] = (await lag_of(http, api, group))["partitions"]
    assert part["current_lag"] == 10
    assert part["current_lag_seconds_lower_bound"] is False
    assert abs(part["current_lag_seconds"] - paused) <= POLL_S + 0.5, (part["current_lag_seconds"], paused)


async def _newest_sample_is(store, topic, offset, partition=0):
    history = await history_of(store, topic, partition)
    return bool(history) and history[-1].offset == offset


async def test_a_deleted_topics_log_end_history_goes_with_it_and_a_re_created_topic_starts_afresh(
    kafka, redis_server, redis
):
    kafka.create_topic("orders", 1)
    async with ingest_and_api(kafka, redis_server, redis) as run:
        store = run.store
        await produce(kafka.bootstrap, "orders", {0: 50})
        await run.writer.commit("billing", "orders", 0, 50)
        await eventually(lambda: _newest_sample_is(store, "orders", 50))
        kafka.delete_topic("orders")
        await eventually(lambda: _history_key_gone(redis, "orders"), timeout=15)
        assert "orders" not in await store.reads.list_topics(CLUSTER)
        kafka.create_topic("orders", 1)
        await produce(kafka.bootstrap, "orders", {0: 5})
        await _paused_consumer_shows_its_pause(kafka, run, "billing")


async def test_a_topic_re_created_with_fewer_partitions_takes_the_missing_partitions_windows_along(
    kafka, redis_server, redis
):
    """A topic never shrinks: fewer partitions than before means deleted and re-created (here between two metadata
    refreshes). The old incarnation's windows go, or partitions that no longer exist would read STOP for good."""
    kafka.create_topic("orders", 3)
    async with ingest_and_api(kafka, redis_server, redis) as run:
        await produce(kafka.bootstrap, "orders", {0: 5, 1: 5, 2: 5})
        await eventually(lambda: _newest_sample_is(run.store, "orders", 5, partition=2))
        for partition in range(3):
            await run.writer.commit("billing", "orders", partition, 3)
        await eventually(lambda: _partitions_with_commits(run.store, "billing", 3))
        kafka.delete_topic("orders")
        kafka.create_topic("orders", 1)
        await produce(kafka.bootstrap, "orders", {0: 2})
        await eventually(lambda: _topic_count_is(run.store, "orders", 1), timeout=15)
        await run.writer.commit("billing", "orders", 0, 2)
        await eventually(lambda: _newest_offset_of(run.store, "billing", ("orders", 0), 2))
        group = await run.store.reads.get_group(CLUSTER, "billing")
        assert [(p.partition, [e.offset for e in p.entries]) for p in group.partitions] == [(0, [2])]


async def test_commits_on_partitions_added_since_the_last_metadata_refresh_are_kept(kafka, redis_server, redis):
    """The topic-refresh is a minute by default: a commit on a partition not seen yet makes the worker look again,
    instead of dropping it for want of a log end."""
    kafka.create_topic("orders", 1)
    async with ingest_and_api(kafka, redis_server, redis, **{f"CLUSTERS__{CLUSTER}__TOPIC_REFRESH": "60"}) as run:
        await produce(kafka.bootstrap, "orders", {0: 5})
        await run.writer.commit("billing", "orders", 0, 1)
        await eventually(lambda: _newest_offset_of(run.store, "billing", ("orders", 0), 1))
        kafka.delete_topic("orders")  # the mock cannot add partitions: the metadata looks the same as if it had
        kafka.create_topic("orders", 3)
        await produce(kafka.bootstrap, "orders", {2: 5})
        await run.writer.commit("billing", "orders", 2, 4)
        await eventually(lambda: _newest_offset_of(run.store, "billing", ("orders", 2), 4), timeout=15)
        assert (await read_totals(redis, CLUSTER)).get("outcome:no_broker_offset", 0) == 0


async def _partitions_with_commits(store, group, n):
    stored = await store.reads.get_group(CLUSTER, group)
    return stored is not None and sum(1 for p in stored.partitions if p.entries) == n


async def _topic_count_is(store, topic, n):
    return (await store.reads.list_topics(CLUSTER)).get(topic) == n


async def _history_key_gone(redis, topic):
    return not await redis.exists(keys.offset_history(CLUSTER, topic))


async def test_a_topic_re_created_between_two_metadata_refreshes_restarts_its_history_when_its_log_end_goes_back(
    kafka, redis_server, redis
):
    """The poller never sees the topic missing (its metadata is an hour old): only the log end going back tells."""
    kafka.create_topic("orders", 1)
    hourly = {f"CLUSTERS__{CLUSTER}__TOPIC_REFRESH": "3600"}
    async with ingest_and_api(kafka, redis_server, redis, **hourly) as run:
        store, worker = run.store, run.worker
        await produce(kafka.bootstrap, "orders", {0: 50})
        await eventually(lambda: _newest_sample_is(store, "orders", 50))
        refreshed = worker.broker_offsets.partition_counts
        kafka.delete_topic("orders")
        kafka.create_topic("orders", 1)
        await produce(kafka.bootstrap, "orders", {0: 5})
        history = await eventually(lambda: _restarted(store))
        assert [s.offset for s in history] == [5]
        await _paused_consumer_shows_its_pause(kafka, run, "billing")
        assert worker.broker_offsets.partition_counts is refreshed  # no metadata refresh saw it gone


async def _restarted(store):
    history = await history_of(store, "orders")
    return history if history and history[0].offset == 5 else None


async def partitions_of(store, group):
    """The partitions the group has committed offsets for (the api also lists a topic's others, never committed)."""
    stored = await store.reads.get_group(CLUSTER, group)
    return None if stored is None else [(p.topic, p.partition) for p in stored.partitions if p.packed]


async def _partitions_are(store, group, expected):
    return await partitions_of(store, group) == expected


async def test_an_offset_commit_tombstone_removes_that_partitions_window_and_the_last_one_removes_the_group(
    kafka, redis_server, redis
):
    """`kafka-consumer-groups --delete-offsets --topic orders:1`, or the broker expiring that offset: the coordinator
    writes a tombstone for the commit key. Burrow keeps the partition (a ghost, stale for good); lagwatch drops it."""

    kafka.create_topic("orders", 2)
    kafka.create_topic("audit", 1)
    async with ingest_and_api(kafka, redis_server, redis) as run:
        writer, http, api, store = run.writer, run.http, run.api, run.store
        for topic, partition in [("orders", 0), ("orders", 1), ("audit", 0)]:
            await writer.commit("billing", topic, partition, 0)
        await writer.commit("payments", "orders", 1, 0)
        await writer.raw("ghost", encoders.encode_offset_commit_key("ghost", "orders", 0), None)  # unknown: a no-op
        all_three = [("audit", 0), ("orders", 0), ("orders", 1)]
        await eventually(lambda: _partitions_are(store, "billing", all_three))
        await eventually(lambda: _partitions_are(store, "payments", [("orders", 1)]))

        await writer.raw("billing", encoders.encode_offset_commit_key("billing", "orders", 1), None)
        await eventually(lambda: _partitions_are(store, "billing", [("audit", 0), ("orders", 0)]))
        listed = {(p["topic"], p["partition"]): p for p in (await lag_of(http, api, "billing"))["partitions"]}
        assert listed[("orders", 1)]["end"] is None  # listed as never committed (as Burrow lists them), no ghost
        assert listed[("orders", 0)]["end"]["offset"] == 0 and listed[("audit", 0)]["end"]["offset"] == 0
        assert await partitions_of(store, "payments") == [("orders", 1)]  # another group's offset stays

        # deleted, then committed again in the same batch or the next: the window starts afresh
        await writer.raw("billing", encoders.encode_offset_commit_key("billing", "orders", 0), None)
        await writer.commit("billing", "orders", 0, 7)
        await eventually(lambda: _newest_offset_of(store, "billing", ("orders", 0), 7))
        window = next(p for p in (await store.reads.get_group(CLUSTER, "billing")).partitions if p.topic == "orders")
        assert [e.offset for e in window.entries] == [7]

        # its last offsets: the group is gone (a group that only used assign() gets no group tombstone: Burrow #818)
        for topic, partition in [("orders", 0), ("audit", 0)]:
            await writer.raw("billing", encoders.encode_offset_commit_key("billing", topic, partition), None)
        await eventually(lambda: _partitions_are(store, "billing", None))
        assert await lag_of(http, api, "billing") is None
        assert "billing" not in await store.reads.list_groups(CLUSTER)
        assert await store.reads.get_group(CLUSTER, "ghost") is None
        await eventually(lambda: _tombstones_counted(redis, 5))  # each once, also those that waited for a load


async def _tombstones_counted(redis, n):
    return (await read_totals(redis, CLUSTER)).get("offset_commit_tombstone") == n


async def _newest_offset_of(store, group, tp, offset):
    stored = await store.reads.get_group(CLUSTER, group)
    part = next((p for p in stored.partitions if (p.topic, p.partition) == tp), None) if stored else None
    return part is not None and bool(part.entries) and part.entries[-1].offset == offset


async def test_within_one_batch_a_tombstone_and_the_commits_around_it_apply_in_their_order(kafka, redis_server, redis):
    """The batch processor, fed records directly (the order inside one batch is then certain): a commit after its
    partition's tombstone starts a new window; a tombstone of a group not loaded yet waits for its load with the
    group's other records; emptying a group deletes it in the same flush."""

    kafka.create_topic("orders", 2)
    await produce(kafka.bootstrap, "orders", {0: 20, 1: 20})
    store = WindowStore(redis)
    async with batch_processor(kafka, store) as processor:
        order = iter(range(1000))
        now = int(time.time() * 1000)

        def commit(group, partition, offset):
            key = encoders.encode_offset_commit_key(group, "orders", partition)
            return RawRecord(key, encoders.encode_offset_commit_value(offset, now), 0, next(order), now)

        def tombstone(group, partition):
            return RawRecord(encoders.encode_offset_commit_key(group, "orders", partition), None, 0, next(order), now)

        # a group unknown to this worker: its tombstone waits for the group's load, between its commits
        await processor.process([commit("a", 0, 5), commit("a", 1, 5), tombstone("a", 0), commit("a", 0, 9)])
        assert await windows_of(store, "a") == {0: [9], 1: [5]}
        # loaded now: a tombstone of the partition, then of the other: the group is gone with the batch's flush
        tally = await processor.process([tombstone("a", 1), commit("a", 0, 10), tombstone("a", 0)])
        assert tally["offset_commit_tombstone"] == 2
        assert await store.reads.get_group(CLUSTER, "a") is None
        assert "a" not in await store.reads.list_groups(CLUSTER)
        # and a commit after that starts the group afresh
        await processor.process([commit("a", 1, 12)])
        assert await windows_of(store, "a") == {1: [12]}


async def test_a_group_tombstone_followed_by_new_protocol_records_keeps_the_windows_unless_a_commit_came_between(
    kafka, redis_server, redis
):
    """KIP-848's online upgrade (a tombstone, then the group's new-protocol records, offsets kept) leaves a loaded
    group's windows as they were; a commit between the two means the group was deleted and started afresh."""
    kafka.create_topic("orders", 1)
    await produce(kafka.bootstrap, "orders", {0: 20})
    store = WindowStore(redis)
    async with batch_processor(kafka, store) as processor:
        order = iter(range(1000))
        now = int(time.time() * 1000)

        def commit(group, offset):
            key = encoders.encode_offset_commit_key(group, "orders", 0)
            return RawRecord(key, encoders.encode_offset_commit_value(offset, now), 0, next(order), now)

        def upgrade(group):
            tombstone = RawRecord(encoders.encode_group_metadata_key(group), None, 0, next(order), now)
            key = encoders.encode_consumer_group_member_key(group, "m-1")
            value = encoders.encode_consumer_group_member_value(
                client_id="c", client_host="/h", subscribed_topics=["orders"]
            )
            return [tombstone, RawRecord(key, value, 0, next(order), now)]

        await processor.process([commit("a", 5), commit("b", 5)])
        tally = await processor.process([*upgrade("a"), commit("a", 6)])
        assert (tally["group_upgraded"], tally["group_deleted"]) == (1, 0)
        assert await windows_of(store, "a") == {0: [5, 6]}
        tombstone, member = upgrade("b")
        tally = await processor.process([tombstone, commit("b", 7), member])
        assert (tally["group_upgraded"], tally["group_deleted"]) == (0, 1)
        assert await windows_of(store, "b") == {0: [7]}


async def test_tombstones_that_remove_windows_are_history_records_and_an_upgrades_is_not(kafka, redis_server, redis):
    """An offset-commit tombstone and a group tombstone remove windows: `offset-deleted` records at the tombstone's
    order say so, for the replay to remove them too (tests/spark/test_spark_replay.py). An upgrade's tombstone
    removes nothing."""
    kafka.create_topic("orders", 2)
    await produce(kafka.bootstrap, "orders", {0: 20, 1: 20})
    store = WindowStore(redis)
    async with batch_processor(kafka, store, keep_commits=True) as processor:
        now = int(time.time() * 1000)

        def record(key, value, order):
            return RawRecord(key, value, 0, order, now)

        def commit(group, partition, order):
            key = encoders.encode_offset_commit_key(group, "orders", partition)
            return record(key, encoders.encode_offset_commit_value(5, now), order)

        commits = [commit("a", 0, 1), commit("a", 1, 2), commit("b", 0, 3), commit("b", 1, 4), commit("c", 0, 5)]
        await processor.process(commits)
        member_key = encoders.encode_consumer_group_member_key("c", "m-1")
        member = encoders.encode_consumer_group_member_value(
            client_id="c", client_host="/h", subscribed_topics=["orders"]
        )
        batch = await processor.apply(
            [
                record(encoders.encode_offset_commit_key("a", "orders", 1), None, 10),  # a's offset of orders-1 deleted
                record(encoders.encode_group_metadata_key("b"), None, 11),  # b deleted
                record(encoders.encode_group_metadata_key("c"), None, 12),  # c upgraded to the new protocol
                record(member_key, member, 13),
            ]
        )
        batch.history.close()
    archived = [decode(line) for _, value in batch.history.messages for line in records_of(value)]
    assert sorted((r.kind, r.group, r.topic, r.partition, r.order) for r in archived) == [
        ("offset-deleted", "a", "orders", 1, 10),
        ("offset-deleted", "b", "orders", 0, 11),
        ("offset-deleted", "b", "orders", 1, 11),
    ]
    assert {r.observed_at for r in archived} == {batch.observed_at}


@contextlib.asynccontextmanager
async def batch_processor(kafka, store, **options):
    """The batch processor, fed records directly (the order inside one batch is then certain), over log ends read
    once from the mock."""
    broker_offsets = BrokerOffsets(
        CLUSTER, store, {"bootstrap_servers": kafka.bootstrap}, offset_refresh=1, topic_refresh=1
    )
    await broker_offsets.start()
    try:
        await broker_offsets.tick()
        yield BatchProcessor(CLUSTER, store, broker_offsets, GroupFilter(), **options)
    finally:
        await broker_offsets.stop()


async def windows_of(store, group):
    """Partition -> committed offsets in its window, for the partitions with commits."""
    stored = await store.reads.get_group(CLUSTER, group)
    return {p.partition: [e.offset for e in p.entries] for p in stored.partitions if p.packed}


async def test_deleting_a_stopped_partitions_offset_resolves_the_groups_alert(kafka, redis_server, redis):
    """The consumer stopped reading `legacy` and its offsets were deleted: in Burrow the stale partition keeps the
    group in ERR (STOP) for good; in lagwatch the group's evaluation no longer sees it and the group is OK again.
    Kafka mock -> ingest -> Redis -> evaluator -> status topic."""

    for topic in ("orders", "legacy"):
        kafka.create_topic(topic, 1)
    kafka.create_topic("lagwatch.changes", 4)
    kafka.create_topic(STATUS_TOPIC, 3)
    await produce(kafka.bootstrap, "orders", {0: 10})
    await produce(kafka.bootstrap, "legacy", {0: 10})
    config = make_config(kafka.bootstrap, redis_server.url, EVALUATOR__SWEEP_INTERVAL="0.5")
    store = WindowStore(redis, config.window())
    async with (
        OffsetsTopicWriter(kafka.bootstrap) as writer,
        StatusTopic(kafka.bootstrap) as events,
        running(IngestWorker(config, CLUSTER)),
        running(EvaluatorService(config, CLUSTER, http_port=0)),
    ):
        await eventually(lambda: _newest_sample_is(store, "legacy", 10))
        now = int(time.time() * 1000)
        # legacy: three commits seconds ago, 4 messages behind, nothing since: STOP (the group ERR)
        stale = [
            OffsetCommitSpec("billing", "legacy", 0, off, timestamp=now - t)
            for off, t in ((2, 4000), (4, 3500), (6, 3000))
        ]
        await writer.commits([*stale, OffsetCommitSpec("billing", "orders", 0, 10, timestamp=now)])
        await eventually(lambda: _last_transition_is(events, "billing", "ERR"))
        await writer.raw("billing", encoders.encode_offset_commit_key("billing", "legacy", 0), None)
        await eventually(lambda: _last_transition_is(events, "billing", "OK"))
        assert events.transitions("billing")[-1] == ("ERR", "OK")
        assert await partitions_of(store, "billing") == [("orders", 0)]


async def _last_transition_is(events, group, status):
    await events.read()
    transitions = events.transitions(group)
    return bool(transitions) and transitions[-1][1] == status


@pytest.mark.parametrize("group", ["billing", "bill\ning"])  # a group name may hold a newline, a topic cannot
async def test_a_topic_deleted_through_the_api_stays_deleted_while_the_group_commits_on(
    kafka, redis_server, redis, group
):
    """`DELETE /v3/kafka/<cluster>/consumer/<group>/topic/<topic>` while the ingest holds the group's windows in
    memory: its next writes must not bring the topic's windows back, and a later commit of that topic starts a fresh
    window."""
    kafka.create_topic("orders", 1)
    kafka.create_topic("audit", 1)
    async with ingest_and_api(kafka, redis_server, redis, API__TOKEN="t0ken") as run:
        writer, http, api, store = run.writer, run.http, run.api, run.store
        for offset in (1, 2):
            await writer.commit(group, "orders", 0, offset)
            await writer.commit(group, "audit", 0, offset)
        await eventually(lambda: _newest_offset_of(store, group, ("orders", 0), 2))
        await eventually(lambda: _newest_offset_of(store, group, ("audit", 0), 2))

        await redis.hset(keys.topic_deletions(CLUSTER), "ghost\nnowhere", "not-a-time")  # unreadable: dropped
        url = f"{api.url}/v3/kafka/{CLUSTER}/consumer/{quote(group, safe='')}/topic/orders"
        async with http.delete(url, headers={"Authorization": "Bearer t0ken"}) as response:
            assert response.status == 200
        assert await partitions_of(store, group) == [("audit", 0)]
        await eventually(lambda: _deletion_taken(redis))  # the group's taken by its worker, the unreadable one dropped

        await writer.commit(group, "audit", 0, 3)  # rewrites the group: orders must not come back
        await eventually(lambda: _newest_offset_of(store, group, ("audit", 0), 3))
        assert await partitions_of(store, group) == [("audit", 0)]

        await writer.commit(group, "orders", 0, 9)
        await eventually(lambda: _newest_offset_of(store, group, ("orders", 0), 9))
        window = next(p for p in (await store.reads.get_group(CLUSTER, group)).partitions if p.topic == "orders")
        assert [e.offset for e in window.entries] == [9]


async def _deletion_taken(redis):
    return not await redis.exists(keys.topic_deletions(CLUSTER))


async def test_deleted_topics_go_to_the_history_for_the_replay(kafka, redis_server, redis):
    """Kafka's deletion of a topic, and the api's of a topic from one group, are history records (`topic-deleted`),
    and so is a window an offset-commit tombstone removed (`offset-deleted`): the Spark replay drops them when the
    live store did (tests/spark/test_spark_replay.py)."""
    for topic in (HISTORY_TOPIC, "orders", "audit", "refunds"):
        kafka.create_topic(topic, 1)
    async with ingest_and_api(kafka, redis_server, redis, API__TOKEN="t0ken", HISTORY__ENABLED="true") as run:
        for topic in ("orders", "audit", "refunds"):
            await produce(kafka.bootstrap, topic, {0: 5})
            await run.writer.commit("billing", topic, 0, 3)
            await eventually(lambda topic=topic: _newest_offset_of(run.store, "billing", (topic, 0), 3))
        started = now_ms()
        url = f"{run.api.url}/v3/kafka/{CLUSTER}/consumer/billing/topic/orders"
        async with run.http.delete(url, headers={"Authorization": "Bearer t0ken"}) as response:
            assert response.status == 200
        kafka.delete_topic("audit")
        tombstone = await run.writer.raw("billing", encoders.encode_offset_commit_key("billing", "refunds", 0), None)
        await eventually(lambda: _deletions_archived(kafka.bootstrap, 3), timeout=20)
    deletions = [r for r in await _history(kafka.bootstrap) if r.kind in DELETIONS]
    assert sorted((r.kind, r.topic, r.group) for r in deletions) == [
        ("offset-deleted", "refunds", "billing"),
        ("topic-deleted", "audit", None),
        ("topic-deleted", "orders", "billing"),
    ]
    assert all(started <= r.observed_at <= now_ms() and r.cluster == CLUSTER for r in deletions)
    assert next(r.order for r in deletions if r.kind == "offset-deleted") == tombstone


DELETIONS = ("topic-deleted", "offset-deleted")


async def _deletions_archived(bootstrap, count):
    return len([r for r in await _history(bootstrap) if r.kind in DELETIONS]) >= count
