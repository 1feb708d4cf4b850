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
from typing import Protocol

from lagwatch.shared import offsets_codec as codec
from lagwatch.shared.group_filter import GroupFilter
from lagwatch.shared.window import Commit

TopicPartition = tuple[str, int]


class RecordLike(Protocol):
    """What decoding needs of a consumed record (aiokafka's ConsumerRecord has it)."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One record of the offsets topic, built by hand (tests, replays)."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int  # the record's own timestamp, ms


@dataclass(frozen=True, slots=True)
class GroupRebalance:
    group: str
    generation: int
    started_at: int
    owners: dict[TopicPartition, tuple[str, str]]  # (topic, partition) -> (client host, client id)


@dataclass(frozen=True, slots=True)
class GroupDeletion:
    group: str


Step = list[Commit] | GroupRebalance | GroupDeletion


@dataclass(slots=True)
class DecodedBatch:
    """Store operations in record order (consecutive commits share one step) and what was skipped."""

    steps: list[Step] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    def add_commit(self, commit: Commit) -> None:
        if self.steps and isinstance(self.steps[-1], list):
            self.steps[-1].append(commit)
        else:
            self.steps.append([commit])

    @property
    def commits(self) -> list[Commit]:
        return [c for step in self.steps if isinstance(step, list) for c in step]

    def touched_groups(self) -> dict[str, str]:
        """group -> why it changed ("commits", "rebalance" or "deleted"; the last step wins)."""
        touched: dict[str, str] = {}
        for step in self.steps:
            if isinstance(step, list):
                touched.update((c.group, "commits") for c in step)
            elif isinstance(step, GroupRebalance):
                touched[step.group] = "rebalance"
            else:
                touched[step.group] = "deleted"
        return touched


def decode_batch(records: Iterable[RecordLike], observed_at: int, group_filter: GroupFilter) -> DecodedBatch:
    batch = DecodedBatch()
    accepts = _memoized(group_filter)
    for raw in records:
        if raw.key is None:
            batch.counts["decode_error:no-key"] += 1
            continue
        try:
            record = codec.decode_record(raw.key, raw.value)
        except codec.CodecError as exc:
            batch.counts[f"decode_error:{exc.record_type if exc.record_type is not None else 'unknown'}"] += 1
            continue
        if isinstance(record, codec.OffsetCommit):
            if record.tombstone:
                batch.counts["offset_commit_tombstone"] += 1
            elif not accepts(record.group):
                batch.counts["filtered"] += 1
            else:
                batch.add_commit(
                    Commit(
                        record.group,
                        record.topic,
                        record.partition,
                        record.offset,  # type: ignore[arg-type]  # set on non-tombstones
                        record.commit_timestamp,  # type: ignore[arg-type]
                        raw.offset,
                        observed_at,
                    )
                )
        elif isinstance(record, codec.GroupMetadata):
            if not accepts(record.group):
                batch.counts["filtered"] += 1
            elif record.tombstone:
                batch.steps.append(GroupDeletion(record.group))
            else:
                batch.steps.append(_rebalance(record, raw.timestamp, batch.counts))
        else:
            batch.counts[f"skipped_type:{record.record_type}"] += 1
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


def _memoized(group_filter: GroupFilter):
    """Regexes per record are the filter's cost; a batch repeats the same groups many times."""
    seen: dict[str, bool] = {}

    def accepts(group: str) -> bool:
        verdict = seen.get(group)
        if verdict is None:
            verdict = seen[group] = group_filter.accepts(group)
        return verdict

    return accepts
