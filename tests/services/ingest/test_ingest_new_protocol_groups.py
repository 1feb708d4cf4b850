"""Consumer groups on the new protocol (KIP-848): their members' and assignments' records give owners as a classic
group's rebalance does, with topic ids named through the broker's metadata."""

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

from lagwatch.devkit import offsets_encoders as encoders
from lagwatch.devkit.offsets_topic_writer import OffsetsTopicWriter
from lagwatch.devkit.offsets_topic_writer import member as classic_member
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.protocol import keys
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, running
from tests.services.ingest.test_ingest import _with_owners


def topic_id_hex(bootstrap: str, topic: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer is in
    uuid = admin.describe_topics(TopicCollection([topic]))[topic].result().topic_id
    msb, lsb = uuid.get_most_significant_bits(), uuid.get_least_significant_bits()
    return f"{msb & (2**64 - 1):016x}{lsb & (2**64 - 1):016x}"


async def member(writer: OffsetsTopicWriter, group: str, member_id: str, client_id: str, host: str) -> None:
    key = encoders.encode_consumer_group_member_key(group, member_id)
    await writer.raw(group, key, encoders.encode_consumer_group_member_value(client_id=client_id, client_host=host))


async def assignment(writer: OffsetsTopicWriter, group: str, member_id: str, epoch: int, parts: dict) -> None:
    key = encoders.encode_consumer_group_assignment_key(group, member_id)
    value = encoders.encode_consumer_group_assignment_value(member_epoch=epoch, partitions=parts)
    await writer.raw(group, key, value)


async def test_new_protocol_members_and_assignments_become_owners_and_follow_a_member_leaving(
    kafka, redis_server, redis
):
    kafka.create_topic("orders", 2)
    orders = topic_id_hex(kafka.bootstrap, "orders")
    config = make_config(kafka.bootstrap, redis_server.url)
    store = WindowStore(redis, config.window())
    async with OffsetsTopicWriter(kafka.bootstrap) as writer, running(IngestWorker(config, CLUSTER)):
        await writer.commit("billing", "orders", 0, 0)
        await writer.commit("billing", "orders", 1, 0)
        await member(writer, "billing", "m-1", "billing-a", "/10.0.0.1")
        await member(writer, "billing", "m-2", "billing-b", "/10.0.0.2")
        await assignment(writer, "billing", "m-1", 5, {orders: [0]})
        await assignment(writer, "billing", "m-2", 6, {orders: [1]})
        group = await eventually(lambda: _owned(store, {0: "billing-a", 1: "billing-b"}))
        assert [(p.topic, p.partition, p.owner, p.client_id) for p in group.partitions] == [
            ("orders", 0, "/10.0.0.1", "billing-a"),
            ("orders", 1, "/10.0.0.2", "billing-b"),
        ]
        assert group.generation == 6  # the highest member epoch

        # m-2 leaves (its member record is deleted); m-1 is given both partitions at a new epoch
        await writer.raw("billing", encoders.encode_consumer_group_member_key("billing", "m-2"), None)
        await assignment(writer, "billing", "m-1", 7, {orders: [0, 1]})
        group = await eventually(lambda: _owned(store, {0: "billing-a", 1: "billing-a"}))
        assert group.generation == 7


async def test_a_restarted_worker_changes_only_the_owners_of_the_members_whose_records_it_reads(
    kafka, redis_server, redis
):
    """A worker reads from its committed position: after a restart (or a move of the offsets partition to another
    worker) it has not seen the records of the members that did not change since. Those keep their partitions."""
    kafka.create_topic("orders", 3)
    orders = topic_id_hex(kafka.bootstrap, "orders")
    config = make_config(kafka.bootstrap, redis_server.url)
    store = WindowStore(redis, config.window())
    async with OffsetsTopicWriter(kafka.bootstrap) as writer:
        async with running(IngestWorker(config, CLUSTER)):
            for partition in range(3):
                await writer.commit("billing", "orders", partition, 0)
            await member(writer, "billing", "m-1", "billing-a", "/10.0.0.1")
            await member(writer, "billing", "m-2", "billing-b", "/10.0.0.2")
            await assignment(writer, "billing", "m-1", 5, {orders: [0, 1]})
            await assignment(writer, "billing", "m-2", 5, {orders: [2]})
            await eventually(lambda: _owned(store, {0: "billing-a", 1: "billing-a", 2: "billing-b"}))

        async with running(IngestWorker(config, CLUSTER)):  # a new worker: it reads on from the committed position
            await member(writer, "billing", "m-3", "billing-c", "/10.0.0.3")  # joins; m-1 gives it partition 1
            await assignment(writer, "billing", "m-1", 6, {orders: [0]})
            await assignment(writer, "billing", "m-3", 6, {orders: [1]})
            group = await eventually(lambda: _owned(store, {0: "billing-a", 1: "billing-c", 2: "billing-b"}))
    assert [(p.partition, p.owner) for p in group.partitions] == [(0, "/10.0.0.1"), (1, "/10.0.0.3"), (2, "/10.0.0.2")]
    assert group.generation == 6


async def test_a_group_back_on_the_classic_protocol_forgets_its_members(kafka, redis_server, redis):
    """A classic rebalance replaces the owners and drops the new-protocol members Redis kept (a later upgrade starts
    from its own records)."""
    kafka.create_topic("orders", 2)
    orders = topic_id_hex(kafka.bootstrap, "orders")
    config = make_config(kafka.bootstrap, redis_server.url)
    store = WindowStore(redis, config.window())
    async with OffsetsTopicWriter(kafka.bootstrap) as writer, running(IngestWorker(config, CLUSTER)):
        for partition in range(2):
            await writer.commit("billing", "orders", partition, 0)
        await member(writer, "billing", "m-1", "billing-a", "/10.0.0.1")
        await assignment(writer, "billing", "m-1", 5, {orders: [0, 1]})
        await eventually(lambda: _owned(store, {0: "billing-a", 1: "billing-a"}))
        assert await _meta_fields_are(redis, {b"generation", b"last", b"member:m-1", b"assigned:m-1"})
        classic = [classic_member("c-1", "billing-z", "/10.0.0.9", {"orders": [0, 1]})]
        await writer.group_metadata("billing", generation=9, members=classic)
        group = await eventually(lambda: _owned(store, {0: "billing-z", 1: "billing-z"}))
        assert group.generation == 9
        assert await _meta_fields_are(redis, {b"generation", b"last"})


async def _meta_fields_are(redis, fields):
    return set(await redis.hkeys(keys.group_meta(CLUSTER, "billing"))) == fields


async def _owned(store: WindowStore, client_ids: dict[int, str]):
    group = await _with_owners(store, "billing")
    if group is None:
        return None
    return group if {p.partition: p.client_id for p in group.partitions} == client_ids else None
