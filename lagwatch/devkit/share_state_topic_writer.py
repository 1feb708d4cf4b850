"""Writes share-coordinator records (ShareSnapshot, ShareUpdate) into `__share_group_state`, as a Kafka broker would.

librdkafka's mock cluster has no share groups, so tests and later steps play the share coordinator's part: the
records are encoded exactly as Kafka encodes them (group_state_encoders.py), into the partition Kafka would choose for
the share-partition.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer

from lagwatch.devkit.group_state_encoders import encode_share_state_record
from lagwatch.shared.records.share_state_codec import ShareStateRecord
from lagwatch.shared.records.share_state_layouts import SHARE_GROUP_STATE_TOPIC
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.windows.clock_offset import offsets_partition_of

DEFAULT_PARTITIONS = 50  # Kafka's share.coordinator.state.topic.num.partitions


def share_state_partition_for(group: str, topic_id: str, partition: int, partitions: int = DEFAULT_PARTITIONS) -> int:
    """The `__share_group_state` partition of a share-partition: Kafka hashes its coordinator key
    "group:topic id:partition" (the topic id as Java's Uuid prints it, URL-safe base64 without padding) as it
    hashes a group id for `__consumer_offsets`."""
    topic = base64.urlsafe_b64encode(bytes.fromhex(topic_id)).rstrip(b"=").decode()
    return offsets_partition_of(f"{group}:{topic}:{partition}", partitions)


class ShareStateTopicWriter:
    """Async producer of share-coordinator records (`async with`); `write` returns each record's offset."""

    def __init__(self, bootstrap: str, partitions: int = DEFAULT_PARTITIONS) -> None:
        self._producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)
        self._partitions = partitions

    async def __aenter__(self) -> ShareStateTopicWriter:
        await self._producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._producer.stop()

    async def write(self, records: Sequence[ShareStateRecord]) -> list[int]:
        """Write snapshots, updates and tombstones in order, each into its share-partition's partition."""
        futures = []
        for record in records:
            key, value = encode_share_state_record(record)
            at = share_state_partition_for(record.group, record.topic_id, record.partition, self._partitions)
            futures.append(
                await self._producer.send(
                    SHARE_GROUP_STATE_TOPIC, key=key, value=value, partition=at, timestamp_ms=now_ms()
                )
            )
        return [(await future).offset for future in futures]
