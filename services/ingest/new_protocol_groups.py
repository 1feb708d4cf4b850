"""Members and owners of consumer groups on the new protocol (KIP-848, Kafka 4), from their coordinator records.

A classic group's rebalance is one record (GroupMetadata: generation, members, assignments). A new-protocol group
spreads the same facts over one record per member (ConsumerGroupMemberMetadata: client id and host) and one per
member's assignment (ConsumerGroupCurrentMemberAssignment: member epoch, partitions by topic id). This module keeps
each group's latest member and assignment records (a worker owns the group's offsets partition, so it sees them
all) and turns every change into the same update a classic rebalance gives: owner and client id per partition, and
as the generation the highest member epoch. Topic ids are named through the broker's metadata (`TopicIds`) when the
update is stored; an id the broker does not name stays as its 32 hex digits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from lagwatch.shared.kafka.offsets_codec import ConsumerGroupAssignment, ConsumerGroupMember
from lagwatch.shared.store.redis_store import GroupMetadataUpdate

log = logging.getLogger(__name__)
ID_REFRESH_S = 5.0  # an unknown topic id asks the broker again at most this often
REQUEST_TIMEOUT_S = 10.0


@dataclass(slots=True)
class _Group:
    partition: int  # the offsets-topic partition its records come from
    members: dict[str, tuple[str, str]] = field(default_factory=dict)  # member id -> (client host, client id)
    assigned: dict[str, tuple[int, dict[str, list[int]]]] = field(default_factory=dict)  # member -> (epoch, parts)


class NewProtocolGroups:
    def __init__(self) -> None:
        self._groups: dict[str, _Group] = {}

    def apply(
        self, record: ConsumerGroupMember | ConsumerGroupAssignment, partition: int, timestamp: int
    ) -> GroupMetadataUpdate:
        """The group's owners after this record (its time is the rebalance's)."""
        group = self._groups.setdefault(record.group, _Group(partition))
        if isinstance(record, ConsumerGroupMember):
            if record.tombstone:  # the member left: its assignment record is deleted with it
                group.members.pop(record.member_id, None)
                group.assigned.pop(record.member_id, None)
            else:
                group.members[record.member_id] = (record.client_host or "", record.client_id or "")
        elif record.tombstone:
            group.assigned.pop(record.member_id, None)
        else:
            group.assigned[record.member_id] = (record.member_epoch or 0, record.partitions)
        owners = {
            (topic, p): group.members.get(member, ("", ""))
            for member, (_, topics) in group.assigned.items()
            for topic, partitions in topics.items()
            for p in partitions
        }
        generation = max((epoch for epoch, _ in group.assigned.values()), default=0)
        return GroupMetadataUpdate(record.group, generation, timestamp, owners)

    def forget(self, group: str) -> None:
        self._groups.pop(group, None)

    def forget_partitions(self, partitions: Iterable[int]) -> None:
        gone = set(partitions)
        self._groups = {name: g for name, g in self._groups.items() if g.partition not in gone}


class TopicIds:
    """Topic id (32 hex digits) -> name, from DescribeTopics of the topics the log-end poller knows."""

    def __init__(self, rdkafka_config: Mapping[str, Any], topics: Callable[[], Iterable[str]]) -> None:
        self._config = dict(rdkafka_config)
        self._topics = topics
        self._names: dict[str, str] = {}
        self._asked_at = float("-inf")
        self._admin: AdminClient | None = None

    async def name(self, updates: Sequence[GroupMetadataUpdate]) -> list[GroupMetadataUpdate]:
        """The updates with their topic ids named; ids still unknown (or a broker that refuses) stay as they are."""
        known = set(self._topics())
        unknown = {t for u in updates for t, _ in u.owners if t not in known and t not in self._names}
        if unknown and time.monotonic() - self._asked_at > ID_REFRESH_S:
            try:
                await self._refresh(known)
            except (KafkaException, RuntimeError) as exc:  # owners named by id beat owners not stored at all
                log.warning("topic ids: could not describe topics (%s)", exc)
        if not self._names:
            return list(updates)
        return [
            u._replace(owners={(self._names.get(t, t), p): owner for (t, p), owner in u.owners.items()})
            for u in updates
        ]

    async def _refresh(self, topics: set[str]) -> None:
        self._asked_at = time.monotonic()
        if not topics:
            return
        if self._admin is None:
            self._admin = AdminClient(self._config, logger=log)  # librdkafka lines in our log format, thinned
        futures = self._admin.describe_topics(TopicCollection(sorted(topics)), request_timeout=REQUEST_TIMEOUT_S)
        for topic, future in futures.items():
            try:
                description = await asyncio.wrap_future(future)
            except KafkaException as exc:
                log.debug("topic ids: describing %s failed (%s)", topic, exc)
                continue
            uuid = description.topic_id
            if uuid is not None:
                msb, lsb = uuid.get_most_significant_bits(), uuid.get_least_significant_bits()
                self._names[f"{msb & (2**64 - 1):016x}{lsb & (2**64 - 1):016x}"] = topic
        self._admin.poll(0)  # librdkafka's log lines wait in its queue until served
