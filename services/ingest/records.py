"""What `__consumer_offsets` records mean to the ingest, and the steps they become. Pure: no I/O. (The hot loop is
`processor.BatchProcessor`.)

* offset commit                -> a window commit (`order` = the record's offset in its offsets-topic partition,
                                  timestamp = the commit timestamp inside the record)
* offset-commit tombstone      -> the partition's window is removed (Kafka writes one when an offset is deleted,
                                  expires, or its group is deleted); a group left without windows is deleted
* group metadata               -> the group's generation and each assigned partition's owner (client host, id)
* group-metadata tombstone     -> the group is deleted
* a new-protocol group's member or assignment record -> its member's change
* other record types (KIP-848 share/streams group records...) -> counted as skipped, by type
* undecodable bytes            -> counted as decode errors, by type, and skipped
Groups failing the allow/deny regexes are dropped before they cost a Redis call. Admin mode (admin_offsets.py)
hands the same steps over typed: `AdminStep`.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import NamedTuple, Protocol

from lagwatch.services.ingest.new_protocol_groups import member_change
from lagwatch.shared.protocol.group_filter import GroupFilter
from lagwatch.shared.protocol.types import Commit
from lagwatch.shared.records import offsets_codec as codec
from lagwatch.shared.windows.ingest_totals import type_label
from lagwatch.shared.windows.window_writes import GroupMetadataUpdate, MemberChange

TopicPartition = tuple[str, int]
PARTITIONS_KEPT = 500_000  # distinct (topic, partition) fields remembered; then the cache starts over
REJECTED_KEPT = 100_000  # names of groups the regexes filter out remembered; then the set starts over


class RecordLike(Protocol):
    """What the ingest reads of a consumed record: confluent-kafka's `Message` interface (methods, not fields)."""

    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def partition(self) -> int: ...
    def offset(self) -> int: ...
    def timestamp(self) -> tuple[int, int]: ...


class CommitKey(NamedTuple):
    """An offset commit's decoded key (with what the hot path derives from it)."""

    group: str
    topic: str
    partition: int
    field: str  # "<topic>:<partition>": the window's field in Redis (keys.partition_field)
    topic_partition: TopicPartition
    accepted: bool  # the group passes the allow/deny regexes


class GroupDeletion(NamedTuple):
    """A group tombstone at `order` (its position in the offsets topic, or the admin poller's count)."""

    group: str
    order: int


class OffsetsDeleted(NamedTuple):
    """An offset-commit tombstone: the partition's offset was deleted or expired, its window goes."""

    group: str
    topic: str
    partition: int
    order: int


AdminStep = Commit | OffsetsDeleted | GroupDeletion | GroupMetadataUpdate  # what the admin poller hands over
GroupStep = GroupDeletion | GroupMetadataUpdate | MemberChange  # what a group record is


class KeyCache:
    """Offset-commit keys decoded, with no entry per key: a million group-partitions would hold a million keys. The
    compiled pass reads a commit's key in place: its group by name in the window cache (a group held is accepted), its
    partition in `fields` (topic -> partition -> the one (topic, partition) tuple and its interned field, as the
    windows loaded from Redis have it). `commit_key` decodes the rest: keys of groups not held yet, and the Python
    pass's."""

    def __init__(self, group_filter: GroupFilter, limit: int = PARTITIONS_KEPT) -> None:
        self.group_filter = group_filter
        self.limit = limit
        self.fields: dict[str, dict[int, tuple[TopicPartition, str]]] = {}
        self._partitions = 0  # held in `fields`
        self._rejected: set[str] = set()  # groups the regexes filter out: a regex search per commit otherwise

    def commit_key(self, key: bytes) -> CommitKey | None:
        """The decoded key when it is an offset commit's, else None (other record types: decode them whole)."""
        if len(key) < 2 or key[0] != 0 or key[1] > 1:  # record types 0 and 1 are offset commits
            return None
        return self.named(*codec.decode_offset_commit_key(key))

    def named(self, group: str, topic_name: str, partition_number: int) -> CommitKey:
        """The commit key of a group's partition (the one copy of its topic and field)."""
        tp, field_name = self._field(topic_name, partition_number)
        return CommitKey(group, tp[0], partition_number, field_name, tp, self._accepts(group))

    def _field(self, topic: str, partition: int) -> tuple[TopicPartition, str]:
        by_partition = self.fields.get(topic)
        shared = by_partition.get(partition) if by_partition is not None else None
        if shared is not None:
            return shared
        if self._partitions >= self.limit:
            self.fields.clear()  # in place: a pass running holds this dict
            self._partitions = 0
        topic = sys.intern(topic)
        # the field interned, as the windows loaded from Redis have it: one copy per partition field
        shared = ((topic, partition), sys.intern(f"{topic}:{partition}"))
        self.fields.setdefault(topic, {})[partition] = shared
        self._partitions += 1
        return shared

    def _accepts(self, group: str) -> bool:
        if group in self._rejected:
            return False
        if self.group_filter.accepts(group):
            return True
        if len(self._rejected) >= REJECTED_KEPT:
            self._rejected.clear()
        self._rejected.add(group)
        return False


def decode_group_record(
    key: bytes, value: bytes | None, timestamp: int, order: int, counts: Counter[str], group_filter: GroupFilter
) -> GroupStep | None:
    """A record that is not an offset commit, at `order`: a rebalance, a group tombstone, a new-protocol group's
    member or assignment change, or None (skipped, counted)."""
    try:
        record = codec.decode_record(key, value)
    except codec.CodecError as exc:
        counts[f"decode_error:{type_label(exc.record_type, key)}"] += 1
        return None
    if not isinstance(record, codec.GroupMetadata | codec.ConsumerGroupMember | codec.ConsumerGroupAssignment):
        counts[f"skipped_type:{type_label(getattr(record, 'record_type', None))}"] += 1
        return None
    if not group_filter.accepts(record.group):
        counts["filtered"] += 1
        return None
    if not isinstance(record, codec.GroupMetadata):
        return member_change(record, timestamp)
    return GroupDeletion(record.group, order) if record.tombstone else _rebalance(record, timestamp, counts)


def _rebalance(record: codec.GroupMetadata, record_ts: int, counts: Counter[str]) -> GroupMetadataUpdate:
    owners: dict[TopicPartition, tuple[str, str]] = {}
    if record.protocol_type == "consumer":  # other protocols (e.g. Connect) assign something else than partitions
        for member in record.members:
            try:
                assignment = member.partitions()
            except codec.CodecError:
                counts["decode_error:assignment"] += 1
                continue
            for topic, partitions in assignment.items():
                for p in partitions:
                    owners[(topic, p)] = (member.client_host, member.client_id)
    started = record.current_state_timestamp
    return GroupMetadataUpdate(
        record.group, record.generation or 0, started if started is not None and started > 0 else record_ts, owners
    )
