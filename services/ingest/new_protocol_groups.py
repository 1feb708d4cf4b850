"""Members and owners of consumer groups on the new protocol (KIP-848, Kafka 4), from their coordinator records.

A classic group's rebalance is one record (GroupMetadata: generation, members, assignments). A new-protocol group
spreads the same facts over one record per member (ConsumerGroupMemberMetadata: client id and host) and one per
member's assignment (ConsumerGroupCurrentMemberAssignment: member epoch, partitions by topic id). Each record becomes
a `MemberChange`; Redis keeps every member's latest and derives the group's owners and generation (the highest
member epoch) from all of them (`scripts.APPLY_MEMBER_CHANGES`): a worker sees only the records after its position.
Topic ids are named through the broker's metadata (`TopicIds`); an id it does not name stays as its 32 hex digits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from lagwatch.shared.records.offsets_codec import ConsumerGroupAssignment, ConsumerGroupMember
from lagwatch.shared.windows.window_writes import GroupMetadataUpdate, MemberChange

log = logging.getLogger(__name__)
ID_REFRESH_S = 5.0  # an unknown topic id asks the broker again at most this often
REQUEST_TIMEOUT_S = 10.0
Rebalance = GroupMetadataUpdate | MemberChange


def member_change(record: ConsumerGroupMember | ConsumerGroupAssignment, timestamp: int) -> MemberChange:
    """The change a member or assignment record makes to its group (`timestamp`: the record's)."""
    if isinstance(record, ConsumerGroupMember):
        client = None if record.tombstone else (record.client_host or "", record.client_id or "")
        return MemberChange(record.group, record.member_id, timestamp, client=client)
    if record.tombstone:
        return MemberChange(record.group, record.member_id, timestamp, of_assignment=True)
    return MemberChange(
        record.group, record.member_id, timestamp, assignment=(record.member_epoch or 0, record.partitions)
    )


class TopicIds:
    """Topic id (32 hex digits) -> name, from DescribeTopics of the topics the log-end poller knows."""

    def __init__(self, rdkafka_config: Mapping[str, Any], topics: Callable[[], Iterable[str]]) -> None:
        self._config = dict(rdkafka_config)
        self._topics = topics
        self._names: dict[str, str] = {}
        self._asked_at = float("-inf")
        self._admin: AdminClient | None = None

    async def name(self, updates: Sequence[Rebalance]) -> list[Rebalance]:
        """The updates with their topic ids named; ids still unknown (or a broker that refuses) stay as they are."""
        known = set(self._topics())
        unknown = {t for u in updates for t in _topics_of(u) if t not in known and t not in self._names}
        if unknown and time.monotonic() - self._asked_at > ID_REFRESH_S:
            try:
                await self._refresh(known)
            except (KafkaException, RuntimeError) as exc:  # owners named by id beat owners not stored at all
                log.warning("topic ids: could not describe topics (%s)", exc)
        if not self._names:
            return list(updates)
        return [self._named(u) for u in updates]

    def _named(self, update: Rebalance) -> Rebalance:
        names = self._names
        if isinstance(update, GroupMetadataUpdate):
            return update._replace(owners={(names.get(t, t), p): owner for (t, p), owner in update.owners.items()})
        if update.assignment is None:
            return update
        epoch, partitions = update.assignment
        return update._replace(assignment=(epoch, {names.get(t, t): parts for t, parts in partitions.items()}))

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


def _topics_of(update: Rebalance) -> Iterable[str]:
    if isinstance(update, GroupMetadataUpdate):
        return (t for t, _ in update.owners)
    return update.assignment[1] if update.assignment is not None else ()
