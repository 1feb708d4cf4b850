"""A Kafka cluster replaced under the same cluster name (rebuilt, migrated behind the same address): its offsets topic
is numbered from 0 again, so none of its commits could continue the old windows. The ingest notices by Kafka's
cluster id and forgets what it kept of the old cluster (services/ingest/kafka_identity.py)."""

import asyncio
import logging
import time

from confluent_kafka.admin import AdminClient
from prometheus_client import REGISTRY

from lagwatch.devkit.mock_kafka import MockKafkaCluster
from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OFFSETS_TOPIC, OffsetCommitSpec, OffsetsTopicWriter
from lagwatch.services.ingest import kafka_identity
from lagwatch.services.ingest.kafka_identity import KafkaIdentity, cluster_id
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.protocol import keys
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, running
from tests.net_helpers import free_port
from tests.services.ingest.test_ingest_resilience import _equals


def new_cluster(port: int | None = None) -> MockKafkaCluster:
    cluster = MockKafkaCluster(port=port)
    cluster.start()
    cluster.create_topic(OFFSETS_TOPIC, DEFAULT_PARTITIONS)
    cluster.create_topic("orders", 2)
    return cluster


async def kafka_id(cluster: MockKafkaCluster) -> str | None:
    return await cluster_id(AdminClient({"bootstrap.servers": cluster.bootstrap}))


async def windows(store: WindowStore, group: str) -> dict[tuple[str, int], list[int]]:
    stored = await store.reads.get_group(CLUSTER, group)
    return {(p.topic, p.partition): [e.offset for e in p.entries] for p in stored.partitions} if stored else {}


def commit(offset: int, topic: str = "orders", partition: int = 0) -> OffsetCommitSpec:
    return OffsetCommitSpec("billing", topic, partition, offset, timestamp=int(time.time() * 1000))


def earlier_commits() -> list[OffsetCommitSpec]:
    """The group's commits of its other partition, first: the old offsets topic goes further than the new one."""
    return [commit(n, partition=1) for n in range(1, 30)]


OLD_WINDOWS = {("orders", 0): [500], ("orders", 1): list(range(20, 30)), ("gone", 0): [7]}
NEW_WINDOWS = {("orders", 0): [3], ("orders", 1): []}  # (Burrow lists every partition of a topic the group reads)


async def test_a_worker_starting_on_a_replaced_cluster_forgets_the_old_ones_windows_and_topics(
    kafka, redis_server, redis, caplog
):
    """The old cluster's commit (offset 500, late in its offsets topic) and its topic `gone` are forgotten; the new
    cluster's commit (offset 3, at the start of its offsets topic: older than anything the old window holds, by
    position) starts the group's window afresh, and the new id is recorded. Before, the new commit was dropped as a
    duplicate, and the group stayed on the old cluster's offsets until `expire-group`."""
    kafka.create_topic("orders", 2)
    kafka.create_topic("gone", 1)
    store = WindowStore(redis, make_config(kafka.bootstrap, redis_server.url).window())
    async with OffsetsTopicWriter(kafka.bootstrap) as writer:
        await writer.commits([*earlier_commits(), commit(500), commit(7, topic="gone")])
        async with running(IngestWorker(make_config(kafka.bootstrap, redis_server.url), CLUSTER)):
            await eventually(lambda: _equals(windows(store, "billing"), OLD_WINDOWS))
    old_id = (await redis.get(keys.kafka_id(CLUSTER))).decode()
    assert old_id == await kafka_id(kafka)
    replaced_before = _replaced_count()

    with new_cluster() as replacement:
        new_id = await kafka_id(replacement)
        assert new_id is not None and new_id != old_id  # two clusters alive at once: two ids
        config = make_config(replacement.bootstrap, redis_server.url)
        with caplog.at_level(logging.WARNING, logger="lagwatch.services.ingest"):
            async with OffsetsTopicWriter(replacement.bootstrap) as writer, running(IngestWorker(config, CLUSTER)):
                await writer.commits([commit(3)])
                await eventually(lambda: _equals(windows(store, "billing"), NEW_WINDOWS))
                assert "gone" not in await store.reads.list_topics(CLUSTER)
    assert (await redis.get(keys.kafka_id(CLUSTER))).decode() == new_id
    assert not await redis.exists(keys.kafka_forgetting(CLUSTER))
    said = [r.getMessage() for r in caplog.records if "replaced by" in r.getMessage()]
    assert len(said) == 1 and old_id in said[0] and new_id in said[0], said
    assert _replaced_count() == replaced_before + 1  # LagwatchKafkaClusterReplaced fires on it


def _replaced_count() -> float:
    return REGISTRY.get_sample_value("lagwatch_ingest_kafka_replaced_total", {"cluster": CLUSTER}) or 0.0


async def test_the_same_cluster_again_keeps_everything(kafka, redis_server, redis):
    """A restart on the same cluster (the same id) forgets nothing: the window goes on from where it was."""
    kafka.create_topic("orders", 2)
    config = make_config(kafka.bootstrap, redis_server.url)
    store = WindowStore(redis, config.window())
    async with OffsetsTopicWriter(kafka.bootstrap) as writer:
        async with running(IngestWorker(config, CLUSTER)):
            await writer.commits([commit(10)])
            await eventually(lambda: _equals(windows(store, "billing"), {("orders", 0): [10], ("orders", 1): []}))
        async with running(IngestWorker(config, CLUSTER)):
            await writer.commits([commit(11)])
            await eventually(lambda: _equals(windows(store, "billing"), {("orders", 0): [10, 11], ("orders", 1): []}))


async def test_a_running_worker_starts_over_when_the_cluster_behind_its_address_is_replaced(redis_server, redis):
    """The cluster behind the configured address is replaced while the worker runs (within an offset-refresh, 0.3 s
    here): the worker ends its run saying so (`run_ingest` then starts a new one), and the next worker forgets the
    old cluster's windows and reads the new cluster's commits."""
    port = free_port()
    old = new_cluster(port)
    old.create_topic("gone", 1)
    try:
        config = make_config(old.bootstrap, redis_server.url)
        store = WindowStore(redis, config.window())
        worker = IngestWorker(config, CLUSTER)
        task = asyncio.create_task(worker.run())
        async with OffsetsTopicWriter(old.bootstrap) as writer:
            await writer.commits([*earlier_commits(), commit(500), commit(7, topic="gone")])
        await eventually(lambda: _equals(windows(store, "billing"), OLD_WINDOWS))
        replacement = new_cluster()  # created while the old one lives: another id
        try:
            await asyncio.to_thread(old.stop)
            await asyncio.to_thread(replacement.take_over_address, port)
            await asyncio.wait_for(task, timeout=30)  # it ended on its own
            assert worker.kafka_replaced
            async with OffsetsTopicWriter(replacement.bootstrap) as writer, running(IngestWorker(config, CLUSTER)):
                await writer.commits([commit(3)])
                await eventually(lambda: _equals(windows(store, "billing"), NEW_WINDOWS), timeout=30)
        finally:
            replacement.stop()
    finally:
        old.stop()


async def test_workers_starting_together_on_a_replaced_cluster_forget_it_once(kafka, redis):
    """The first to see the new id forgets the old cluster's data; the others wait until it has (they must not
    write windows it is about to delete), and then go on without forgetting again."""
    await redis.set(keys.kafka_id(CLUSTER), "the-old-cluster")
    config = {"bootstrap.servers": kafka.bootstrap}
    forgotten: list[tuple[str, str]] = []
    release = asyncio.Event()

    async def forget(recorded: str, seen: str) -> None:
        forgotten.append((recorded, seen))
        await release.wait()

    first, second = (KafkaIdentity(CLUSTER, redis, config) for _ in range(2))
    forgetting = asyncio.create_task(first.verify(forget))
    await eventually(lambda: _true(forgotten))
    waiting = asyncio.create_task(second.verify(forget))
    await asyncio.sleep(1.5)  # a few of its looks at the lease
    assert not waiting.done()
    release.set()
    new_id = await kafka_id(kafka)
    assert await asyncio.wait_for(forgetting, 5) == new_id
    assert await asyncio.wait_for(waiting, 5) == new_id
    assert forgotten == [("the-old-cluster", new_id)]
    assert (await redis.get(keys.kafka_id(CLUSTER))).decode() == new_id


async def test_a_waiting_worker_takes_over_from_one_that_died_forgetting(kafka, redis, monkeypatch):
    """The forgetting worker's lease expires (it died): the next worker forgets again (deleting twice is harmless)."""
    monkeypatch.setattr(kafka_identity, "LEASE_MS", 500)
    await redis.set(keys.kafka_id(CLUSTER), "the-old-cluster")
    config = {"bootstrap.servers": kafka.bootstrap}
    forgotten: list[str] = []

    async def dies(recorded: str, seen: str) -> None:
        forgotten.append("first")
        await asyncio.Event().wait()  # never returns

    async def forget(recorded: str, seen: str) -> None:
        forgotten.append("second")

    died = asyncio.create_task(KafkaIdentity(CLUSTER, redis, config).verify(dies))
    await eventually(lambda: _true(forgotten))
    died.cancel()
    assert await asyncio.wait_for(KafkaIdentity(CLUSTER, redis, config).verify(forget), 5) == await kafka_id(kafka)
    assert forgotten == ["first", "second"]


async def _true(value) -> object:
    return value


class Answers:
    """Kafka-compatible services answering Metadata with ids the librdkafka mock cannot give (it keeps one per
    cluster): these replace `cluster_id`, the one place the identity asks Kafka, and say what they were asked."""

    def __init__(self, *ids: str | None) -> None:
        self.ids, self.asked = list(ids), 0

    async def __call__(self, admin) -> str | None:
        self.asked += 1
        return self.ids.pop(0) if len(self.ids) > 1 else self.ids[0]


async def test_a_service_giving_another_id_at_each_request_is_not_taken_for_a_replaced_cluster(
    kafka, redis, monkeypatch
):
    """Two looks at the start disagree: nothing is forgotten or recorded (else every start would forget), and the
    running check stays off."""
    await redis.set(keys.kafka_id(CLUSTER), "recorded")
    monkeypatch.setattr(kafka_identity, "cluster_id", Answers("id-1", "id-2", "id-3"))
    identity = KafkaIdentity(CLUSTER, redis, {"bootstrap.servers": kafka.bootstrap})
    assert await identity.verify(_never) is None
    assert await redis.get(keys.kafka_id(CLUSTER)) == b"recorded"
    assert not await identity.replaced()


async def test_one_odd_answer_does_not_end_a_running_workers_run(kafka, redis, monkeypatch):
    """A running worker starts over only on the same new id in two looks in a row."""
    answers = Answers("A", "A", "B", "A", "B", "B")
    monkeypatch.setattr(kafka_identity, "cluster_id", answers)
    identity = KafkaIdentity(CLUSTER, redis, {"bootstrap.servers": kafka.bootstrap})
    assert await identity.verify(_never) == "A"
    assert [await identity.replaced() for _ in range(4)] == [False, False, False, True]
    assert answers.asked == 6


async def _never(recorded: str, seen: str) -> None:
    raise AssertionError("nothing may be forgotten")
