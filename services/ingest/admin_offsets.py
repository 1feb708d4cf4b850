"""Commits read through Kafka's admin API, for clusters whose `__consumer_offsets` a client may not read.

Every `offset-refresh` the ingest lists the consumer groups (ListGroups, plus `admin-groups`), fetches their
committed offsets (OffsetFetch) and turns each that changed since the last poll into a `Commit` stamped with the
time it was observed, an `AdminStep` for the same processor as the topic's records. A commit gone becomes an
`OffsetsDeleted`, a group a complete listing no longer names a `GroupDeletion`, a membership changed (DescribeGroups,
where the broker answers it) a rebalance whose generation counts the changes seen. What differs from reading the
topic: docs/managed-kafka.md. Requests go out together and are waited for a bounded time: a broker away must not hold
the other groups. Worker i of N takes the groups whose CRC-32 is i modulo N.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription

from lagwatch.services.ingest.records import AdminStep, GroupDeletion, OffsetsDeleted
from lagwatch.shared.protocol.group_filter import GroupFilter
from lagwatch.shared.protocol.types import Commit
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.windows.window import ADMIN_ORDERS_FROM
from lagwatch.shared.windows.window_writes import GroupMetadataUpdate

log = logging.getLogger(__name__)
REQUEST_TIMEOUT_S = 10.0
# a poll waits this long for the group listing, and for the groups' offsets and descriptions: a broker away holds
# its requests for REQUEST_TIMEOUT_S, and the other groups must not wait for it (see _groups, _fetch_all)
LISTING_WAIT_S = 1.0
ANSWER_WAIT_S = 2.0
DESCRIBE_RETRY_S = 600.0  # a broker that refused DescribeGroups is asked again after this
NAMED_FETCH_CHUNK = 1000  # partitions named in one OffsetFetch when a group's all-partitions fetch answers nothing
Offsets = dict[tuple[str, int], int]  # (topic, partition) -> committed offset


class Answer(NamedTuple):
    """A group's offsets and when they were seen: the time its commits are stamped with. A poll may take an answer
    that came in beside an earlier one (a coordinator away, then back), seconds before this poll's own time."""

    offsets: Offsets
    at: int  # ms since the epoch


class AdminOffsets:
    def __init__(
        self,
        rdkafka_config: Mapping[str, Any],
        *,
        named_groups: Iterable[str],
        group_filter: GroupFilter,
        partition_counts: Callable[[], Mapping[str, int]],
        shard: tuple[int, int] = (0, 1),
    ) -> None:
        self._config = dict(rdkafka_config)
        self._named = tuple(named_groups)
        self._filter = group_filter
        self._partition_counts = partition_counts
        self._counts_seen: Mapping[str, int] | None = None
        self._partitions: list[tuple[str, int]] = []
        self._index, self._count = shard
        self._admin: AdminClient | None = None
        self._seen: dict[str, Offsets] = {}  # group -> what the last poll found
        self._named_fetch: set[str] = set()  # groups whose offsets only a fetch naming partitions found (see below)
        self._answers_all = False  # an all-partitions fetch found offsets: this broker answers it (`_fetch_offsets`)
        # the steps' `order`: increasing, also across restarts, and above any offsets-topic position (window.py)
        self._order = max(ADMIN_ORDERS_FROM, time.time_ns() // 1000)
        self._members: dict[str, tuple] = {}  # group -> its membership at the last poll (see _membership)
        self._generations: dict[str, int] = {}  # group -> membership changes seen
        self._describe_after = 0.0  # monotonic time before which DescribeGroups is not tried (refused last time)
        self._listing: asyncio.Future[tuple[list[str], bool] | None] | None = None  # ListGroups in flight
        self._listed: list[str] = []  # the groups the newest finished listing named
        self._fetching: dict[str, asyncio.Future[Answer | None]] = {}  # fetches an earlier poll did not wait out

    def close(self) -> None:
        for pending in (self._listing, *self._fetching.values()):
            if pending is not None:
                pending.cancel()
        self._admin = None  # AdminClient has no close; its threads end with the object

    async def poll(self) -> list[AdminStep]:
        """One round: the steps of everything that changed since the last round."""
        if self._admin is None:
            self._admin = AdminClient(self._config, logger=log)  # librdkafka's lines in our log format, thinned
        listed, complete = await self._groups()
        groups = [g for g in listed if self._mine(g) and self._filter.accepts(g)]
        fetched = await self._fetch_all(groups)
        observed = now_ms()
        steps: list[AdminStep] = []
        for group, answer in zip(groups, fetched, strict=True):
            if answer is not None:
                steps.extend(self._changes(group, answer.offsets, answer.at))
        steps.extend(await self._membership_changes(groups, observed))
        if complete:
            steps.extend(self._deletions(set(self._seen) - set(groups)))
        self._admin.poll(0)  # librdkafka's log lines wait in its queue until served
        return steps

    def _deletions(self, gone: set[str]) -> list[AdminStep]:
        """Groups a complete listing no longer names were deleted (or all their offsets expired): a group tombstone
        each, as the coordinator writes in topic mode, or their windows would drift to STOP until `expire-group`.
        Only a complete listing tells: one that failed or that a broker did not answer keeps what was last seen
        (forgotten, every unchanged offset would come back next poll as a new commit stamped then)."""
        deletions: list[AdminStep] = []
        for group in sorted(gone):
            del self._seen[group]
            self._members.pop(group, None)
            self._generations.pop(group, None)
            self._named_fetch.discard(group)
            self._order += 1
            deletions.append(GroupDeletion(group, self._order))
        return deletions

    async def _membership_changes(self, groups: list[str], observed: int) -> list[AdminStep]:
        if not groups or time.monotonic() < self._describe_after:
            return []
        asked = self._admin_client().describe_consumer_groups(groups, request_timeout=REQUEST_TIMEOUT_S)
        futures = {group: asyncio.wrap_future(future) for group, future in asked.items()}
        for future in futures.values():  # an answer not waited for is dropped: its error must not be left unread
            future.add_done_callback(_read_error)
        await asyncio.wait(futures.values(), timeout=ANSWER_WAIT_S)
        rebalances: list[AdminStep] = []
        for group, future in futures.items():
            if not future.done():  # its coordinator did not answer in time: its members are looked at next poll
                continue
            try:
                description = future.result()
            except KafkaException as exc:
                if exc.args and exc.args[0].code() == KafkaError._UNSUPPORTED_FEATURE:
                    log.info("admin offsets: the broker does not describe groups; owners stay unknown")
                    self._describe_after = time.monotonic() + DESCRIBE_RETRY_S
                    return rebalances
                log.debug("admin offsets: describing group %s failed (%s)", group, exc)
                continue
            membership = _membership(description)
            if self._members.get(group) != membership:
                self._members[group] = membership
                generation = self._generations[group] = self._generations.get(group, 0) + 1
                rebalances.append(_rebalance(group, membership, generation, observed))
        return rebalances

    def _mine(self, group: str) -> bool:
        return self._count <= 1 or zlib.crc32(group.encode()) % self._count == self._index

    async def _groups(self) -> tuple[list[str], bool]:
        """The groups to poll, and whether they come from a complete listing (every broker answered ListGroups). A
        listing not finished within LISTING_WAIT_S keeps running, and the poll takes the newest finished one (a
        group created since is polled a round later, one deleted since is kept a round longer)."""
        if self._listing is None:
            self._listing = asyncio.ensure_future(self._list())
        done, _ = await asyncio.wait({self._listing}, timeout=LISTING_WAIT_S)
        complete = False
        if done:
            listing, self._listing = self._listing.result(), None
            if listing is not None:  # a failed listing keeps the groups the last one named
                self._listed, complete = listing
        return sorted(set(self._listed) | set(self._named)), complete

    async def _list(self) -> tuple[list[str], bool] | None:
        """(the groups ListGroups named, whether every broker answered); None when it failed."""
        try:
            result = await asyncio.wrap_future(
                self._admin_client().list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S)
            )
        except KafkaException as exc:  # brokers without ListGroups still have the named groups
            log.debug("admin offsets: listing groups failed (%s)", exc)
            return None
        for error in result.errors:
            log.debug("admin offsets: listing groups: %s", error)
        return [g.group_id for g in result.valid], not result.errors

    async def _fetch_all(self, groups: list[str]) -> list[Answer | None]:
        """Each group's offsets (`_fetch`), waited for ANSWER_WAIT_S at most: a fetch still unanswered goes on beside
        the next polls, which take its answer once it came; None until then (it concludes nothing)."""
        for group in set(self._fetching) - set(groups):  # no longer polled (filtered out, deleted)
            self._fetching.pop(group).cancel()
        late = {g: self._fetching.pop(g) for g in groups if g in self._fetching}
        fresh = {g: asyncio.ensure_future(self._fetch(g)) for g in groups if g not in late}
        if fresh:
            await asyncio.wait(fresh.values(), timeout=ANSWER_WAIT_S)
        fetched: list[Answer | None] = []
        for group in groups:
            task = late.get(group) or fresh[group]
            if task.done():
                fetched.append(task.result())
            else:
                self._fetching[group] = task
                fetched.append(None)
        return fetched

    async def _fetch(self, group: str) -> Answer | None:
        """The group's committed offsets and when they came; None when the fetch failed (nothing is concluded)."""
        offsets = await self._fetch_offsets(group)
        return None if offsets is None else Answer(offsets, now_ms())

    async def _fetch_offsets(self, group: str) -> Offsets | None:
        """The group's committed offsets; None when the fetch failed (nothing is concluded from it). A group without
        offsets answers the all-partitions fetch with nothing on any broker; naming every partition of the cluster
        for it is only worth it (on every poll) until some group's all-partitions fetch has found offsets."""
        try:
            if group not in self._named_fetch:
                offsets = await self._offset_fetch(group, None)
                if offsets:
                    self._answers_all = True
                    return offsets
                if self._answers_all:  # the broker answers that fetch: the group has no offsets (Connect's, say)
                    return offsets
            # some brokers (the librdkafka mock) answer an all-partitions fetch with nothing: name them
            offsets = {}
            partitions = self._all_partitions()
            for start in range(0, len(partitions), NAMED_FETCH_CHUNK):
                offsets.update(await self._offset_fetch(group, partitions[start : start + NAMED_FETCH_CHUNK]))
            if offsets and not self._answers_all:  # found only by naming them: keep naming them for this group
                self._named_fetch.add(group)
            return offsets
        except KafkaException as exc:
            log.warning("admin offsets: fetching group %s failed (%s)", group, exc)
            return None

    def _all_partitions(self) -> list[tuple[str, int]]:
        """Every partition of the cluster's topics, rebuilt only when the poller's table is replaced (it is never
        changed in place)."""
        counts = self._partition_counts()
        if counts is not self._counts_seen:
            self._counts_seen = counts
            self._partitions = [(t, p) for t, n in sorted(counts.items()) for p in range(n)]
        return self._partitions

    async def _offset_fetch(self, group: str, partitions: list[tuple[str, int]] | None) -> Offsets:
        request = ConsumerGroupTopicPartitions(
            group, None if partitions is None else [TopicPartition(t, p) for t, p in partitions]
        )
        futures = self._admin_client().list_consumer_group_offsets([request], request_timeout=REQUEST_TIMEOUT_S)
        result = await asyncio.wrap_future(futures[group])
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in result.topic_partitions or ()
            if tp.error is None and tp.offset >= 0
        }

    def _changes(self, group: str, offsets: Offsets, observed: int) -> list[AdminStep]:
        before = self._seen.get(group, {})
        self._seen[group] = offsets
        steps: list[AdminStep] = []
        for (topic, partition), offset in offsets.items():
            if before.get((topic, partition)) != offset:
                self._order += 1
                steps.append(Commit(group, topic, partition, offset, observed, self._order, observed))
        for topic, partition in before.keys() - offsets.keys():
            self._order += 1
            steps.append(OffsetsDeleted(group, topic, partition, self._order))
        return steps

    def _admin_client(self) -> AdminClient:
        assert self._admin is not None
        return self._admin


def _rebalance(group: str, membership: tuple, generation: int, observed: int) -> GroupMetadataUpdate:
    """A membership as the group's rebalance: each assigned partition's owner (client host, client id)."""
    owners = {tp: (host, client_id) for _, client_id, host, assignment in membership for tp in assignment}
    return GroupMetadataUpdate(group, generation, observed, owners)


def _membership(description: ConsumerGroupDescription) -> tuple:
    """What a rebalance changes: each member with its client id, host and assigned partitions (sorted)."""
    return tuple(
        sorted(
            (
                m.member_id,
                m.client_id or "",
                m.host or "",
                tuple(sorted((tp.topic, tp.partition) for tp in (m.assignment.topic_partitions or ()))),
            )
            for m in description.members or ()
        )
    )


def _read_error(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def offsets_topic_readable(admin_config: Mapping[str, Any], topic: str, timeout: float = REQUEST_TIMEOUT_S) -> bool:
    """Whether the cluster lets this client see the offsets topic (for `offsets-source: auto`); blocking."""
    # all topics, not this one by name: asking for a topic by name may create it where auto-creation is on
    admin = AdminClient(dict(admin_config), logger=log)
    try:
        metadata = admin.list_topics(timeout=timeout)
    finally:
        admin.poll(0)  # librdkafka's log lines wait in its queue until served
    found = metadata.topics.get(topic)
    return found is not None and found.error is None and bool(found.partitions)
