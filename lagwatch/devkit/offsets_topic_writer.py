"""Writes group-coordinator records into `__consumer_offsets`, as a Kafka broker would.

librdkafka's mock cluster keeps commits to itself and writes nothing to `__consumer_offsets`, so tests and the
local demo play the coordinator's part: after a real consumer commits, they write the matching record here, encoded
exactly as Kafka encodes it (offsets_encoders.py), into the partition Kafka would choose for the group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer

from lagwatch.devkit import offsets_encoders as encoders
from lagwatch.devkit.group_state_encoders import encode_group_record
from lagwatch.shared.records.group_records import GroupStateRecord
from lagwatch.shared.records.offsets_codec import GroupMember
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.windows.clock_offset import offsets_partition_of

OFFSETS_TOPIC = "__consumer_offsets"
DEFAULT_PARTITIONS = 50  # Kafka's offsets.topic.num.partitions


def offsets_partition_for(group: str, partitions: int = DEFAULT_PARTITIONS) -> int:
    """The `__consumer_offsets` partition of a group, Kafka's choice (the one lagwatch's readers compute)."""
    return offsets_partition_of(group, partitions)


@dataclass(frozen=True, slots=True)
class OffsetCommitSpec:
    group: str
    topic: str
    partition: int
    offset: int
    timestamp: int | None = None  # ms; now when None
    metadata: str = ""
    leader_epoch: int = -1


def member(
    member_id: str,
    client_id: str,
    client_host: str,
    assignment: Mapping[str, Sequence[int]],
    *,
    group_instance_id: str | None = None,
    session_timeout: int = 45_000,
    rebalance_timeout: int = 300_000,
) -> GroupMember:
    """A consumer-protocol group member with its assignment, for `group_metadata`."""
    return GroupMember(
        member_id=member_id,
        group_instance_id=group_instance_id,
        client_id=client_id,
        client_host=client_host,
        rebalance_timeout=rebalance_timeout,
        session_timeout=session_timeout,
        subscription=encoders.encode_subscription(sorted(assignment)),
        assignment=encoders.encode_assignment(assignment),
    )


class OffsetsTopicWriter:
    """Async producer of coordinator records (`async with`). Each write returns the record's offset in its partition."""

    def __init__(self, bootstrap: str) -> None:
        self._producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)

    async def __aenter__(self) -> OffsetsTopicWriter:
        await self._producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._producer.stop()

    def partition_for(self, group: str) -> int:
        return offsets_partition_for(group)

    async def commit(self, group: str, topic: str, partition: int, offset: int, **kw: Any) -> int:
        return (await self.commits([OffsetCommitSpec(group, topic, partition, offset, **kw)]))[0]

    async def commits(self, specs: Sequence[OffsetCommitSpec]) -> list[int]:
        """Write many offset commits at once; returns their offsets (the `order` lagwatch will see)."""
        futures = []
        for s in specs:
            ts = s.timestamp if s.timestamp is not None else now_ms()
            key = encoders.encode_offset_commit_key(s.group, s.topic, s.partition)
            value = encoders.encode_offset_commit_value(s.offset, ts, metadata=s.metadata, leader_epoch=s.leader_epoch)
            futures.append(await self._send(s.group, key, value, ts))
        return [(await f).offset for f in futures]

    async def group_metadata(
        self,
        group: str,
        *,
        generation: int,
        members: Sequence[GroupMember],
        protocol: str = "range",
        leader: str | None = None,
        protocol_type: str = "consumer",
    ) -> int:
        """Write a group-metadata record (a rebalance's outcome: generation, members and their assignments)."""
        now = now_ms()
        value = encoders.encode_group_metadata_value(
            protocol_type=protocol_type,
            generation=generation,
            protocol=protocol,
            leader=leader if leader is not None else (members[0].member_id if members else None),
            members=members,
            current_state_timestamp=now,
        )
        return await self.raw(group, encoders.encode_group_metadata_key(group), value, now)

    async def delete_group(self, group: str) -> int:
        """A group-metadata tombstone: what the coordinator writes when a group is deleted."""
        return await self.raw(group, encoders.encode_group_metadata_key(group), None)

    async def group_records(self, records: Sequence[GroupStateRecord]) -> list[int]:
        """Write share- and streams-group records (tombstones too) in order, each into its group's partition."""
        now = now_ms()
        futures = [await self._send(record.group, *encode_group_record(record), now) for record in records]
        return [(await future).offset for future in futures]

    async def raw(self, group: str, key: bytes, value: bytes | None, ts: int | None = None) -> int:
        """Any bytes, into the group's partition (for malformed-record tests)."""
        return (await (await self._send(group, key, value, now_ms() if ts is None else ts))).offset

    async def _send(self, group: str, key: bytes, value: bytes | None, ts: int) -> asyncio.Future:
        return await self._producer.send(
            OFFSETS_TOPIC, key=key, value=value, partition=offsets_partition_for(group), timestamp_ms=ts
        )
