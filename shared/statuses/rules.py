"""Burrow's evaluation rules as pure functions (docs/rules.md §3).

A partition is judged from its window of recent commits (oldest first), its recent broker log-end offsets and its
current lag; a group is the worst of its partitions. No I/O: the evaluator, the API and the Spark job all call these.

Edge cases the spec leaves open, decided here:
* a partition with no commits at all is OK (there is nothing to judge);
* empty ring slots are skipped wherever they stand (a real window only has them at the front);
* with no non-null lag in the window, "lag never decreases" holds vacuously, as the spec's scan implies;
* a young window (fewer than `minimum-entries` entries, the ring not full) is not judged STOP, STALL or WARN: one
  entry spans no time, so any delay would read STOP, and two or three jittering lags read WARN by chance. A drop in
  the committed offset needs no history to mean something, so REWIND is judged at any age.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from lagwatch.shared.protocol.types import (
    GroupStatus,
    OffsetEntry,
    PartitionInput,
    PartitionStatus,
    RuleConfig,
    Status,
)


def partition_status(part: PartitionInput, now_ms: int, config: RuleConfig) -> PartitionStatus:
    entries = [e for e in part.offsets if e is not None]
    complete = len(entries) / len(part.offsets) if part.offsets else 0.0
    status = evaluate(entries, part.broker_offsets, part.current_lag, complete, now_ms, config)
    return PartitionStatus(
        topic=part.topic,
        partition=part.partition,
        status=status,
        start=entries[0] if entries else None,
        end=entries[-1] if entries else None,
        current_lag=part.current_lag,
        complete=complete,
        owner=part.owner,
        client_id=part.client_id,
        markers_end=part.markers_end,
    )


def caught_up_status(
    topic: str,
    partition: int,
    first: OffsetEntry,
    last: OffsetEntry,
    filled: int,
    ring_size: int,
    current_lag: int,
    owner: str = "",
    client_id: str = "",
    markers_end: int | None = None,
) -> PartitionStatus:
    """What `partition_status` answers when `current_lag <= allowed-lag` (rule 1: OK whatever the window shows),
    built from the window's oldest and newest entries alone, so a caller can skip unpacking the rest."""
    return PartitionStatus(
        topic=topic,
        partition=partition,
        status=Status.OK,
        start=first,
        end=last,
        current_lag=current_lag,
        complete=filled / ring_size if ring_size else 0.0,
        owner=owner,
        client_id=client_id,
        markers_end=markers_end,
    )


def evaluate(
    entries: Sequence[OffsetEntry],
    broker_offsets: Sequence[int],
    current_lag: int,
    complete: float,
    now_ms: int,
    config: RuleConfig,
) -> Status:
    """The partition rules, in the spec's order. `entries` are the filled slots, oldest first."""
    if not entries or complete < config.minimum_complete:
        return Status.OK
    if current_lag <= config.allowed_lag:
        return Status.OK
    first, last = entries[0], entries[-1]
    young = is_young(len(entries), complete, config)
    if not young and is_stopped(first, last, now_ms) and not was_caught_up_recently(broker_offsets, last):
        return Status.STOP
    if is_rewound(entries):
        return Status.REWIND
    if young:
        return Status.OK
    if not lag_ever_allowed(entries, config.allowed_lag):
        if all(e.offset == first.offset for e in entries):
            return Status.STALL
        if lag_never_decreases(entries):
            return Status.WARN
    return Status.OK


def is_young(filled: int, complete: float, config: RuleConfig) -> bool:
    """Too few entries to judge a consumer stopped, stalled or falling behind. A full ring is never young, so a
    ring smaller than `minimum-entries` is judged once full."""
    return filled < config.minimum_entries and complete < 1.0


def is_stopped(first: OffsetEntry, last: OffsetEntry, now_ms: int) -> bool:
    """No commit for longer than the window spans (strictly)."""
    return now_ms - last.timestamp > last.timestamp - first.timestamp


def was_caught_up_recently(broker_offsets: Iterable[int], last: OffsetEntry) -> bool:
    """Some recent log end was at or below the newest commit: a quiet topic, not a dead consumer."""
    return any(b <= last.offset for b in broker_offsets)


def is_rewound(entries: Sequence[OffsetEntry]) -> bool:
    """The *first* drop below a predecessor is not followed by an entry back at that predecessor's offset or above
    (Burrow's checkIfOffsetsRewind + checkIfRewindRecovered): once the first drop recovered, later drops in the
    window are not looked at, so [1000, 900, 1100, 1050] is not a rewind."""
    for i in range(1, len(entries)):
        before = entries[i - 1].offset
        if entries[i].offset < before:
            return all(e.offset < before for e in entries[i:])
    return False


def lag_ever_allowed(entries: Iterable[OffsetEntry], allowed_lag: int) -> bool:
    return any(e.lag is not None and e.lag <= allowed_lag for e in entries)


def lag_never_decreases(entries: Iterable[OffsetEntry]) -> bool:
    previous: int | None = None
    for e in entries:
        if e.lag is None:
            continue
        if previous is not None and e.lag < previous:
            return False
        previous = e.lag
    return True


def group_status(
    cluster: str, group: str, partitions: Iterable[PartitionInput], now_ms: int, config: RuleConfig
) -> GroupStatus:
    """Evaluate every partition of a known group; the group takes the worst status (STOP/STALL/REWIND = ERR)."""
    results = tuple(partition_status(p, now_ms, config) for p in partitions)
    return summarize_group(cluster, group, results)


def summarize_group(cluster: str, group: str, results: Sequence[PartitionStatus]) -> GroupStatus:
    return GroupStatus(
        cluster=cluster,
        group=group,
        status=max([Status.OK, *(r.status.as_group_status() for r in results)]),
        complete=sum(r.complete >= 1.0 for r in results) / len(results) if results else 0.0,
        partitions=tuple(results),
        maxlag=max(results, key=lambda r: r.current_lag, default=None),  # the first wins ties
        totallag=sum(r.current_lag for r in results),
    )
