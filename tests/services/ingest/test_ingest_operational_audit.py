"""Operational paths of the ingest under faults: a follower's readiness during a Kafka outage, one broker of three
down, and admin mode when the group listing fails, a group disappears or a group has no offsets."""

import asyncio
import contextlib
from concurrent.futures import Future

from aiokafka import TopicPartition as Atp
from aiokafka.errors import KafkaError as AiokafkaError
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka import TopicPartition as Tp
from confluent_kafka.admin import ConsumerGroupListing, ListConsumerGroupsResult

from lagwatch.devkit.mock_kafka import MockKafkaCluster
from lagwatch.services.ingest.admin_offsets import AdminOffsets
from lagwatch.services.ingest.broker_offsets import BrokerOffsets
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.group_filter import GroupFilter
from lagwatch.shared.runtime.kafka_client import client_kwargs
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, check_readiness_follows_the_brokers, eventually, make_config, produce, running


async def test_a_follower_worker_is_not_ready_while_the_brokers_are_down(kafka, redis_server, redis):
    """A worker that does not hold the poller lease polls no log ends; its readiness must still ask Kafka, and a
    metadata request that finds no broker (aiokafka answers False rather than raising) is not an answer."""
    kafka.create_topic("orders", 1)
    await redis.set(keys.poller_lease(CLUSTER), "another-worker", px=600_000)  # someone else polls the log ends
    worker = IngestWorker(make_config(kafka.bootstrap, redis_server.url), CLUSTER)
    async with running(worker):
        await check_readiness_follows_the_brokers(kafka, worker)
        assert not worker.broker_offsets.is_poller


class FakeAdmin:
    """The admin calls admin mode makes, answered from `listing` and `committed`; DescribeGroups is unsupported (as
    on the mock). `listing` None: ListGroups fails; `listing_errors`: some broker did not answer it."""

    def __init__(self, committed: dict[str, dict[tuple[str, int], int]]) -> None:
        self.committed = committed
        self.listing: list[str] | None = sorted(committed)
        self.listing_errors: list[Exception] = []

    def list_consumer_groups(self, request_timeout: float) -> Future:
        if self.listing is None:
            return _failed(KafkaError._TIMED_OUT)
        valid = [ConsumerGroupListing(g, False) for g in self.listing]
        return _done(ListConsumerGroupsResult(valid=valid, errors=list(self.listing_errors)))

    def list_consumer_group_offsets(self, requests: list, request_timeout: float) -> dict[str, Future]:
        group = requests[0].group_id
        offsets = self.committed.get(group, {})
        return {group: _done(ConsumerGroupTopicPartitions(group, [Tp(t, p, o) for (t, p), o in offsets.items()]))}

    def describe_consumer_groups(self, groups: list[str], request_timeout: float) -> dict[str, Future]:
        return {g: _failed(KafkaError._UNSUPPORTED_FEATURE) for g in groups}

    def poll(self, timeout: float) -> int:
        return 0


def _done(value: object) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


def _failed(code: int) -> Future:
    future: Future = Future()
    future.set_exception(KafkaException(KafkaError(code)))
    return future


def _admin_source(admin: FakeAdmin) -> AdminOffsets:
    source = AdminOffsets({}, named_groups=(), group_filter=GroupFilter(), partition_counts=lambda: {"orders": 1})
    source._admin = admin  # type: ignore[assignment]
    return source


async def test_admin_mode_a_failed_or_partial_group_listing_forgets_nothing_and_re_emits_nothing():
    """A ListGroups that times out, or that one broker did not answer, does not mean the groups are gone: their last
    offsets stay known, so the next complete poll finds nothing changed. (Forgotten, every unchanged offset came back
    as a new commit stamped now: a stopped consumer's window gained a fresh entry and read WARN, not STOP.)"""
    admin = FakeAdmin({"billing": {("orders", 0): 10}, "shipping": {("orders", 0): 5}})
    source = _admin_source(admin)
    assert len(await source.poll()) == 2
    admin.listing = None
    assert await source.poll() == []
    admin.listing, admin.listing_errors = ["billing"], [KafkaException(KafkaError(KafkaError._TRANSPORT))]
    assert await source.poll() == []
    admin.listing, admin.listing_errors = ["billing", "shipping"], []
    assert await source.poll() == []


async def test_admin_mode_a_group_gone_from_a_complete_listing_is_deleted_as_topic_mode_deletes_it():
    """A group deleted (`kafka-consumer-groups --delete`), or whose offsets all expired, is no longer listed: its
    windows go with a group tombstone, as the coordinator writes one in topic mode, instead of drifting to STOP."""
    admin = FakeAdmin({"billing": {("orders", 0): 10}, "shipping": {("orders", 0): 5}})
    source = _admin_source(admin)
    await source.poll()
    admin.listing = ["billing"]
    deleted = await source.poll()
    assert [(type(r).__name__, r.group) for r in deleted] == [("GroupDeletion", "shipping")]  # a group tombstone
    assert await source.poll() == []  # once
    admin.listing = ["billing", "shipping"]  # created again: its offsets are new commits
    assert [(r.group, r.offset) for r in await source.poll()] == [("shipping", 5)]


async def _ticks_until(broker_offsets: BrokerOffsets, wanted: dict[tuple[str, int], int]) -> bool:
    with contextlib.suppress(AiokafkaError):  # a broker is down: said, after the others' samples are stored
        await broker_offsets.tick()
    stored = await broker_offsets.store.reads.latest_broker_offsets(CLUSTER, list(wanted))
    return stored == wanted


async def test_one_broker_down_does_not_stop_the_log_end_samples_of_the_partitions_the_others_lead(redis_server, redis):
    """A rolling restart takes one broker of three away at a time: the log ends of the partitions the other two
    lead keep being sampled (before, the one failed ListOffsets request failed the poll of every partition, and the
    lags of the whole cluster froze until the broker came back)."""
    kafka = MockKafkaCluster()
    kafka.start(brokers=3)
    try:
        kafka.create_topic("orders", 3)
        config = make_config(kafka.bootstrap, redis_server.url)
        store = WindowStore(redis, config.window())
        kwargs = client_kwargs(config.cluster(CLUSTER), CLUSTER)
        broker_offsets = BrokerOffsets(CLUSTER, store, kwargs, offset_refresh=0.3, topic_refresh=1)
        await broker_offsets.start()
        try:
            await broker_offsets.tick()
            leaders = {
                p: broker_offsets._consumer._client.cluster.leader_for_partition(Atp("orders", p)) for p in range(3)
            }
            down = leaders[1]
            healthy = {p: 5 for p, leader in leaders.items() if leader != down}
            await asyncio.to_thread(kafka.set_broker_down, down)
            await produce(kafka.bootstrap, "orders", healthy)
            wanted = {("orders", p): n for p, n in healthy.items()}
            await eventually(lambda: _ticks_until(broker_offsets, wanted), timeout=15)
            assert ("orders", 1) in broker_offsets.all_partitions() and broker_offsets.latest[("orders", 1)] == 0
        finally:
            await broker_offsets.stop()
    finally:
        kafka.stop()


class CountingAdmin(FakeAdmin):
    """A broker that answers an all-partitions OffsetFetch (a real one): counts the fetches that name partitions."""

    def __init__(self, committed: dict[str, dict[tuple[str, int], int]]) -> None:
        super().__init__(committed)
        self.named_fetches: list[str] = []

    def list_consumer_group_offsets(self, requests: list, request_timeout: float) -> dict[str, Future]:
        if requests[0].topic_partitions is not None:
            self.named_fetches.append(requests[0].group_id)
        return super().list_consumer_group_offsets(requests, request_timeout)


async def test_admin_mode_a_group_without_offsets_does_not_cost_a_fetch_of_every_partition_each_poll():
    """A Connect cluster's group, or one whose consumers never commit, answers an all-partitions OffsetFetch with
    nothing on any broker. Where the broker answers that fetch for other groups, nothing more is to be had by naming
    all of the cluster's partitions (20 requests of 1000 here) for it every poll."""
    admin = CountingAdmin({"billing": {("orders", 0): 10}, "connect-cluster": {}})
    source = AdminOffsets({}, named_groups=(), group_filter=GroupFilter(), partition_counts=lambda: {"orders": 20_000})
    source._admin = admin  # type: ignore[assignment]
    for _ in range(3):
        assert [(r.group, r.offset) for r in await source.poll()] in ([("billing", 10)], [])
    assert admin.named_fetches.count("connect-cluster") <= 20  # the first poll's, at most
    assert "billing" not in admin.named_fetches
