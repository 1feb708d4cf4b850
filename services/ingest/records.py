"""From raw `__consumer_offsets` records to the store operations they mean, in order. Pure: no I/O.

* offset commit                -> a window commit (`order` = the record's offset in its offsets-topic partition,
                                  timestamp = the commit timestamp inside the record)
* offset-commit tombstone      -> ignored (Kafka writes them when offsets expire or a group is deleted; the group's
                                  own tombstone or `expire-group` removes lagwatch's windows)
* group metadata               -> the group's generation and each assigned partition's owner (client host, id)
* group-metadata tombstone     -> the group is deleted
* other record types (KIP-848 consumer/share/streams group records) -> counted as skipped, by type
* undecodable bytes            -> counted as decode errors, by type, and skipped
Groups failing the allow/deny regexes are dropped here, before they cost a Redis call.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from lagwatch.shared import offsets_codec as codec
from lagwatch.shared.group_filter import GroupFilter
from lagwatch.shared.window import Commit

TopicPartition = tuple[str, int]
# (key, value, offsets-topic partition, offset in it, record timestamp ms): what decoding needs of a consumed record
RecordTuple = tuple[bytes | None, bytes | None, int, int, int]
# Kafka's coordinator record types are small numbers; anything else (a corrupt key) is counted under one label
KNOWN_TYPES = range(32)
MAX_EXACT = 2**53  # offsets and timestamps beyond this are not real (and not exact as doubles: Lua, JSON readers)
KEY_CACHE_LIMIT = 500_000  # distinct commit keys remembered (group, topic, partition): ~100 B each


def type_label(record_type: int | None) -> str:
    """A metric label for a record type, from a fixed set (a corrupt record must not mint a new series)."""
    return str(record_type) if record_type in KNOWN_TYPES else "other"


class CommitKey(NamedTuple):
    """An offset commit's decoded key, cached per distinct key bytes (with what the hot path derives from it)."""

    group: str
    topic: str
    partition: int
    field: str  # "<topic>:<partition>": the window's field in Redis (keys.partition_field)
    topic_partition: TopicPartition
    accepted: bool  # the group passes the allow/deny regexes


# One offset commit as the hot path carries it: (key, committed offset, commit timestamp, order). Plain tuples: a
# batch holds thousands, and `Commit` objects are built only where a consumer of the batch wants them (history).
CommitRecord = tuple[CommitKey, int, int, int]


@dataclass(frozen=True, slots=True)
class GroupRebalance:
    group: str
    generation: int
    started_at: int
    owners: dict[TopicPartition, tuple[str, str]]  # (topic, partition) -> (client host, client id)


@dataclass(frozen=True, slots=True)
class GroupDeletion:
    group: str


Step = list[CommitRecord] | GroupRebalance | GroupDeletion


@dataclass(slots=True)
class DecodedBatch:
    """Store operations in record order (consecutive commits share one step) and what was skipped."""

    observed_at: int = 0  # when lagwatch read the batch, ms
    steps: list[Step] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    groups: dict[str, int] = field(default_factory=dict)  # every group in the batch -> its offsets-topic partition

    @property
    def commits(self) -> list[Commit]:
        at = self.observed_at
        return [
            Commit(key.group, key.topic, key.partition, offset, timestamp, order, at)
            for step in self.steps
            if isinstance(step, list)
            for key, offset, timestamp, order in step
        ]

    def touched_groups(self) -> dict[str, str]:
        """group -> why it changed ("commits", "rebalance" or "deleted"; the last step wins)."""
        touched: dict[str, str] = {}
        for step in self.steps:
            if isinstance(step, list):
                touched.update((record[0].group, "commits") for record in step)
            elif isinstance(step, GroupRebalance):
                touched[step.group] = "rebalance"
            else:
                touched[step.group] = "deleted"
        return touched


class KeyCache:
    """Offset-commit keys already decoded: a cluster's commits repeat the same (group, topic, partition) keys, so
    each distinct key is decoded (and its group filtered) once, and a commit costs a dict look-up and its value."""

    def __init__(self, group_filter: GroupFilter, limit: int = KEY_CACHE_LIMIT) -> None:
        self.group_filter = group_filter
        self.limit = limit
        self.keys: dict[bytes, CommitKey] = {}

    def commit_key(self, key: bytes) -> CommitKey | None:
        """The decoded key when it is an offset commit's, else None (other record types: decode them whole)."""
        known = self.keys.get(key)
        if known is not None:
            return known
        if len(key) < 2 or key[0] != 0 or key[1] > 1:  # record types 0 and 1 are offset commits
            return None
        record = codec.decode_record(key, None)  # a commit key with no value: the key alone, checked
        assert isinstance(record, codec.OffsetCommit)
        if len(self.keys) >= self.limit:
            self.keys.clear()
        topic, partition = record.topic, record.partition
        known = self.keys[key] = CommitKey(
            record.group,
            topic,
            partition,
            f"{topic}:{partition}",
            (topic, partition),
            self.group_filter.accepts(record.group),
        )
        return known


def decode_batch(records: Iterable[RecordTuple], observed_at: int, key_cache: KeyCache) -> DecodedBatch:
    batch = DecodedBatch(observed_at)
    counts, steps, groups = batch.counts, batch.steps, batch.groups
    known = key_cache.keys
    run: list[CommitRecord] | None = None  # the current run of consecutive commits (one step)
    offset_and_timestamp = codec.commit_offset_and_timestamp
    for key, value, partition, order, timestamp in records:
        if key is None:
            counts["decode_error:no-key"] += 1
            continue
        try:
            commit_key = known.get(key) or key_cache.commit_key(key)
            if commit_key is not None:
                if not value:
                    counts["offset_commit_tombstone"] += 1
                elif not commit_key[5]:  # accepted
                    counts["filtered"] += 1
                else:
                    committed, commit_timestamp = offset_and_timestamp(value)
                    if not (0 <= committed < MAX_EXACT and 0 <= commit_timestamp < MAX_EXACT):
                        counts["decode_error:out-of-range"] += 1
                        continue
                    groups[commit_key[0]] = partition
                    if run is None:
                        run = [(commit_key, committed, commit_timestamp, order)]
                        steps.append(run)
                    else:
                        run.append((commit_key, committed, commit_timestamp, order))
                continue
            record = codec.decode_record(key, value)
        except codec.CodecError as exc:
            record_type = exc.record_type
            if record_type is None and len(key) >= 2:  # a commit value's error: the type is the key's
                record_type = int.from_bytes(key[:2], "big", signed=True)
            counts[f"decode_error:{type_label(record_type)}"] += 1
            continue
        run = None
        if isinstance(record, codec.GroupMetadata):
            if not key_cache.group_filter.accepts(record.group):
                counts["filtered"] += 1
                continue
            groups[record.group] = partition
            if record.tombstone:
                steps.append(GroupDeletion(record.group))
            else:
                steps.append(_rebalance(record, timestamp, counts))
        else:
            counts[f"skipped_type:{type_label(record.record_type)}"] += 1
    return batch


def _rebalance(record: codec.GroupMetadata, record_ts: int, counts: Counter[str]) -> GroupRebalance:
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
    return GroupRebalance(
        group=record.group,
        generation=record.generation or 0,
        started_at=started if started is not None and started > 0 else record_ts,
        owners=owners,
    )
