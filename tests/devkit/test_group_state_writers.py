"""The dev kit's writers of share- and streams-group records (into `__consumer_offsets`) and of share state (into
`__share_group_state`), through the Kafka mock's wire protocol: what a reader of those topics fetches decodes to the
records written, in the partition Kafka would have chosen."""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition

from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OFFSETS_TOPIC, OffsetsTopicWriter
from lagwatch.devkit.share_state_topic_writer import ShareStateTopicWriter, share_state_partition_for
from lagwatch.shared.records.group_layouts import StreamsEndpoint, TopicPartitions
from lagwatch.shared.records.group_records import (
    ShareGroupCurrentMemberAssignment,
    ShareGroupMember,
    StreamsGroupMember,
)
from lagwatch.shared.records.offsets_codec import decode_record
from lagwatch.shared.records.share_state_codec import ShareSnapshot, ShareUpdate, decode_share_state_record
from lagwatch.shared.records.share_state_layouts import SHARE_GROUP_STATE_TOPIC, StateBatch
from lagwatch.shared.windows.clock_offset import offsets_partition_of

TOPIC_ID = "5b2f0e8c7a6d4c3b9e1f0a2b3c4d5e6f"


async def fetched(bootstrap: str, topic: str, partitions: Sequence[int], count: int) -> list[tuple[int, bytes, bytes]]:
    """The first `count` records of the partitions (in offset order within each): (partition, key, value)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in sorted(set(partitions))])
        await consumer.seek_to_beginning()
        found: list[tuple[int, bytes, bytes]] = []
        for _ in range(100):
            batch = await consumer.getmany(timeout_ms=200)
            found += [(m.partition, m.key, m.value) for tp in sorted(batch) for m in batch[tp]]
            if len(found) >= count:
                return found
        raise AssertionError(f"fetched {len(found)} of {count} records")
    finally:
        await consumer.stop()


async def test_share_and_streams_group_records_reach_the_groups_offsets_partition(kafka) -> None:
    records = [
        ShareGroupMember(10, "share-a", "m1", None, "client-1", "/10.0.0.1", ["orders"], False),
        ShareGroupCurrentMemberAssignment(14, "share-a", "m1", 3, 2, 0, (TopicPartitions(TOPIC_ID, [0, 1]),), False),
        StreamsGroupMember(
            19, "app", "m2", None, None, "c", "/10.0.0.2", 300_000, 1, "p1", StreamsEndpoint("h", 9090), (), False
        ),
        ShareGroupMember(10, "share-a", "m1", *[None] * 4, True),  # the member left
    ]
    async with OffsetsTopicWriter(kafka.bootstrap) as writer:
        offsets = await writer.group_records(records)
    assert offsets == [0, 1, 0, 2]  # the two groups hash to different partitions (29 and 1)
    partitions = {record.group: offsets_partition_of(record.group, DEFAULT_PARTITIONS) for record in records}
    got = await fetched(kafka.bootstrap, OFFSETS_TOPIC, list(partitions.values()), len(records))
    by_group = {group: [decode_record(k, v) for p, k, v in got if p == at] for group, at in partitions.items()}
    assert by_group["share-a"] == [records[0], records[1], records[3]]
    assert by_group["app"] == [records[2]]


async def test_share_state_reaches_the_share_partitions_state_partition(kafka) -> None:
    kafka.create_topic(SHARE_GROUP_STATE_TOPIC, 50)
    batches = (StateBatch(0, 9, 2, 1), StateBatch(10, 12, 0, 2))
    records = [
        ShareSnapshot(0, "share-a", TOPIC_ID, 0, 0, 1, 5, 0, 1_000, 1_000, batches, None, False),  # as Kafka 4.1
        ShareUpdate(1, "share-a", TOPIC_ID, 0, 0, -1, 13, (StateBatch(13, 20, 4, 5),), 21, False),  # as 4.2
        ShareSnapshot(0, "share-a", TOPIC_ID, 1, 0, 1, 5, 7, 1_000, 2_000, (), 0, False),
        ShareSnapshot(0, "share-a", TOPIC_ID, 1, *[None] * 8, True),
    ]
    async with ShareStateTopicWriter(kafka.bootstrap) as writer:
        await writer.write(records)
    homes = {p: share_state_partition_for("share-a", TOPIC_ID, p) for p in (0, 1)}
    assert homes == {0: 46, 1: 45}  # two share-partitions of a topic, two state partitions
    got = await fetched(kafka.bootstrap, SHARE_GROUP_STATE_TOPIC, list(homes.values()), len(records))
    decoded = {p: [decode_share_state_record(k, v) for at, k, v in got if at == home] for p, home in homes.items()}
    assert (decoded[0], decoded[1]) == (records[:2], records[2:])
