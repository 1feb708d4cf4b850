"""A group as the window store reads it (`window_reads.py`): its partitions' commit rings, broker rings, histories and
owners."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import OffsetEntry, PartitionInput, ProbedLog, Sample
from lagwatch.shared.windows.clock_offset import CoordinatorClocks
from lagwatch.shared.windows.packing import commit_entry_at, newest_offset, unpack_commit_ring
from lagwatch.shared.windows.window import padded_ring

TopicPartition = tuple[str, int]
OWNER_SEPARATOR = "\x1f"


@dataclass(slots=True)
class StoredPartition:
    """A partition of a group as stored: its commit ring (unpacked only when asked), its topic's broker ring and
    its owner. Most partitions of a healthy cluster are caught up, and rule 1 judges those from the newest entry."""

    topic: str
    partition: int
    packed: bytes
    broker_offsets: list[int]
    owner: str = ""
    client_id: str = ""
    history: list[Sample] = field(default_factory=list)  # log-end samples, for lag in seconds
    _entries: list[OffsetEntry] | None = None
    log_start: list[Sample] = field(default_factory=list)  # log-start samples, for retention risk
    retention_ms: int | None = None  # its topic's `retention.ms` where the broker let us read it
    probe: ProbedLog | None = None  # the log probe's last answer that found only markers (log_probes.py)
    unread: ProbedLog | None = None  # and its last that found an unread record
    # read once: a partition's rules, lag in seconds, velocity, retention risk and watch each ask for them
    _newest: OffsetEntry | None = field(default=None, repr=False, compare=False)
    _lag: int | None = field(default=None, repr=False, compare=False)

    @property
    def unpacked(self) -> bool:
        """Whether the ring was unpacked already (reading its ends alone is cheaper until it is)."""
        return self._entries is not None

    @property
    def entries(self) -> list[OffsetEntry]:
        if self._entries is None:
            self._entries = unpack_commit_ring(self.packed)
        return self._entries

    @property
    def newest(self) -> OffsetEntry:
        """The newest entry of the ring (a non-empty one), unpacked alone."""
        if self._newest is None:
            self._newest = commit_entry_at(self.packed, -1)
        return self._newest

    @property
    def current_lag(self) -> int:
        """Latest broker offset minus the newest committed offset, floored at 0 (0 when either is unknown); 0 too
        where the log probe found nothing readable between the two (transaction markers, aborted records)."""
        if self._lag is None:
            unknown = not self.packed or not self.broker_offsets or self.markers_only
            self._lag = 0 if unknown else max(0, self.broker_offsets[-1] - newest_offset(self.packed))
        return self._lag

    @property
    def markers_only(self) -> bool:
        """Whether the offsets show a lag that the log probe found to be transaction markers or aborted records
        only (`current_lag` is 0 for it)."""
        if not self.packed or not self.broker_offsets or self.probe is None:
            return False
        committed, log_end = newest_offset(self.packed), self.broker_offsets[-1]
        return committed < log_end and self.probe.caught_up_at(committed, log_end)

    @property
    def markers_end(self) -> int | None:
        """The log end up to which the offsets' lag is transaction markers or aborted records only (None: it is not,
        or the probe did not say)."""
        return self.broker_offsets[-1] if self.markers_only else None

    def to_rule_input(self, intervals: int) -> PartitionInput:
        return PartitionInput(
            topic=self.topic,
            partition=self.partition,
            offsets=padded_ring(self.entries, intervals),
            broker_offsets=tuple(self.broker_offsets),
            current_lag=self.current_lag,
            owner=self.owner,
            client_id=self.client_id,
            markers_end=self.markers_end,
        )


@dataclass(slots=True)
class StoredGroup:
    cluster: str
    group: str
    last_commit_ms: int
    partitions: list[StoredPartition] = field(default_factory=list)  # sorted by (topic, partition)
    generation: int | None = None
    rebalances_last_hour: int = 0
    # its coordinator's commit clock against lagwatch's (clock_offset.py; 0 where unknown): the rules compare
    # commit timestamps with now on the coordinator's clock
    clock_offset_ms: int = 0


@dataclass(slots=True)
class TopicData:
    """What a group's partitions take from their topics' keys: broker rings, histories, partition counts, retention."""

    rings: Mapping[TopicPartition, list[int]]
    histories: Mapping[TopicPartition, list[Sample]]
    log_starts: Mapping[TopicPartition, list[Sample]]
    partition_counts: Mapping[str, int]
    retention_ms: Mapping[str, int]
    clocks: CoordinatorClocks = field(default_factory=CoordinatorClocks)
    probes: Mapping[TopicPartition, ProbedLog] = field(default_factory=dict)  # caught-up answers
    unread: Mapping[TopicPartition, ProbedLog] = field(default_factory=dict)  # answers with an unread record


def stored_partitions(
    windows: Mapping[TopicPartition, tuple[bytes, bytes]], owners: Mapping[bytes, bytes], topics: TopicData
) -> list[StoredPartition]:
    """The group's partitions: those with a window, and every other partition of the topics it commits on (as
    Burrow creates all of a topic's partitions at a group's first commit on it): no commit, lag 0, status OK,
    complete 0, counted in `partition_count` and the group's `complete`."""
    parts = []
    for (topic, partition), (raw_field, packed) in windows.items():
        tp, (owner, client_id) = (topic, partition), _owner(owners, raw_field)
        parts.append(
            StoredPartition(
                topic,
                partition,
                packed,
                topics.rings.get(tp, []),
                owner,
                client_id,
                topics.histories.get(tp, []),
                log_start=topics.log_starts.get(tp, []),
                retention_ms=topics.retention_ms.get(topic),
                probe=topics.probes.get(tp),
                unread=topics.unread.get(tp),
            )
        )
    for topic in {topic for topic, _ in windows}:
        for partition in range(topics.partition_counts.get(topic, 0)):
            if (topic, partition) not in windows:
                owner, client_id = _owner(owners, keys.partition_field(topic, partition).encode())
                parts.append(StoredPartition(topic, partition, b"", [], owner, client_id))
    parts.sort(key=lambda p: (p.topic, p.partition))
    return parts


def _owner(owners: Mapping[bytes, bytes], raw_field: bytes) -> tuple[str, str]:
    """(client host, client id) of a partition's owner."""
    owner, _, client_id = owners.get(raw_field, b"").decode().partition(OWNER_SEPARATOR)
    return owner, client_id
