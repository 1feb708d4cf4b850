"""A share-partition's delivery state, rebuilt from its ``__share_group_state`` records, and its lag.

A share group (Kafka 4's queues) has no committed offset per partition: consumers acquire records one by one, and
the share coordinator keeps, per (group, topic id, partition), the share-partition start offset (SPSO: every record
below it is done with) and the delivery state of record ranges at and past it (state batches: AVAILABLE again
after a release or a lock timeout, ACKNOWLEDGED, or ARCHIVED after too many deliveries or a reject), each with its
delivery count. It writes a ShareSnapshot (the whole state) now and then and ShareUpdates in between.

`apply` folds those records into a `SharePartitionState` as the coordinator itself does when it replays them
(ShareCoordinatorShard and PersisterStateBatchCombiner in Apache Kafka's share-coordinator), so that the state read
here is the one Kafka reports:
- a snapshot replaces the state; a tombstone deletes it;
- an update's batches are laid over the current ones, and where they overlap, each offset keeps the batch of higher
  (delivery count, delivery state). A record's delivery count only grows and at one count it only moves from
  AVAILABLE to a final state, so in a well-formed log this is the newer batch; the rule differs from "the newer
  wins" only for a batch written late, and there Kafka's answer is the one to match;
- an update's start offset of -1 leaves the SPSO; batches (and parts of them) below the SPSO are dropped.
Updates read before any snapshot (Kafka writes a snapshot first, but a reader may start inside a partition's log,
past it) are kept as the state, flagged `has_snapshot=False`: their batches are what Kafka last wrote for those
ranges, while the SPSO (and the state epoch) stay unknown, None, until an update moves it or a snapshot comes.

`share_lag` is KIP-1226's share-partition lag: the records below the log end not yet delivered for good.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from lagwatch.shared.records.share_state_codec import ShareStateRecord, ShareUpdate
from lagwatch.shared.records.share_state_layouts import UNCHANGED, DeliveryState, StateBatch

# the states that end a record's delivery: what the delivery complete count counts and the lag subtracts
COMPLETE_STATES = frozenset((DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED))


@dataclass(frozen=True, slots=True)
class SharePartitionState:
    """One share-partition's state after the records read so far.

    `batches` are the state batches at or past `start_offset`: ordered, non-overlapping, and adjacent batches of the
    same state and delivery count joined (so that equal states compare equal however they were written).
    `delivery_complete_count` is the coordinator's count of ACKNOWLEDGED and ARCHIVED records at or past the SPSO
    (Kafka 4.2 on), None when the last record left it out. `written_at` is the last record's write time in
    milliseconds: the log timestamp the reader passed to `apply`, else a snapshot's own write timestamp.
    `archived_records` and `max_delivery_count` (the most deliveries of a record not acknowledged: AVAILABLE ones
    are being retried, ARCHIVED ones gave up) are kept for the rules, which read them for many partitions at once.
    """

    start_offset: int | None
    state_epoch: int | None
    leader_epoch: int | None
    batches: tuple[StateBatch, ...]
    delivery_complete_count: int | None
    written_at: int | None
    has_snapshot: bool
    archived_records: int
    max_delivery_count: int


class ArchivedBatch(NamedTuple):
    """Records first_offset..last_offset (inclusive) archived after delivery_count deliveries."""

    first_offset: int
    last_offset: int
    delivery_count: int


def apply(
    state: SharePartitionState | None, record: ShareStateRecord, written_at: int | None = None
) -> SharePartitionState | None:
    """The state after `record` (of the same share-partition); None once a tombstone deleted it. `written_at` is the
    record's log timestamp (ms) when the reader has it: updates carry no write time of their own."""
    if record.tombstone:
        return None
    if isinstance(record, ShareUpdate):
        return _updated(state, record, written_at)
    start_offset = _known_offset(record.start_offset)
    return _state(
        start_offset,
        record.state_epoch,
        record.leader_epoch,
        _combined((), record.state_batches or (), start_offset),
        record.delivery_complete_count,
        written_at if written_at is not None else record.write_timestamp,
        has_snapshot=True,
    )


def _updated(state: SharePartitionState | None, update: ShareUpdate, written_at: int | None) -> SharePartitionState:
    start_offset = _known_offset(update.start_offset)
    leader_epoch = update.leader_epoch if update.leader_epoch != UNCHANGED else None
    if state is not None:
        start_offset = state.start_offset if start_offset is None else start_offset
        leader_epoch = state.leader_epoch if leader_epoch is None else leader_epoch
        written_at = state.written_at if written_at is None else written_at
    return _state(
        start_offset,
        None if state is None else state.state_epoch,
        leader_epoch,
        _combined(() if state is None else state.batches, update.state_batches or (), start_offset),
        # the count describes the state at its write: an update without one leaves it unknown, not stale
        update.delivery_complete_count,
        written_at,
        has_snapshot=state is not None and state.has_snapshot,
    )


def _known_offset(start_offset: int | None) -> int | None:
    """A start offset, or None: -1 is an update's "unchanged" and a share-partition's "not initialized yet"."""
    return start_offset if start_offset is not None and start_offset >= 0 else None


def _state(
    start_offset: int | None,
    state_epoch: int | None,
    leader_epoch: int | None,
    batches: tuple[StateBatch, ...],
    delivery_complete_count: int | None,
    written_at: int | None,
    *,
    has_snapshot: bool,
) -> SharePartitionState:
    archived = [batch for batch in batches if batch.delivery_state == DeliveryState.ARCHIVED]
    return SharePartitionState(
        start_offset,
        state_epoch,
        leader_epoch,
        batches,
        delivery_complete_count,
        written_at,
        has_snapshot,
        archived_records=sum(batch.last_offset - batch.first_offset + 1 for batch in archived),
        max_delivery_count=max(
            (batch.delivery_count for batch in batches if batch.delivery_state != DeliveryState.ACKNOWLEDGED),
            default=0,
        ),
    )


# ----------------------------------------------------------------------------------------- state batches


def _priority(batch: StateBatch) -> tuple[int, int]:
    """Which of two batches an overlapped offset keeps: the more deliveries, then the later state (Kafka's order)."""
    return batch.delivery_count, batch.delivery_state


def _combined(
    batches: Sequence[StateBatch], new_batches: Iterable[StateBatch], start_offset: int | None
) -> tuple[StateBatch, ...]:
    """`new_batches` laid over the ordered, non-overlapping `batches`, cut at `start_offset`, adjacent equals joined."""
    combined = list(batches)
    for batch in new_batches:
        if batch.first_offset <= batch.last_offset:  # an empty range changes nothing
            combined = _overlaid(combined, batch)
    if start_offset is not None:
        combined = _from(combined, start_offset)
    return _joined(combined)


def _overlaid(batches: list[StateBatch], new: StateBatch) -> list[StateBatch]:
    """`new` over the ordered, non-overlapping `batches`: each offset in its range keeps the batch of higher
    priority; the batches it overlaps in part are split at its ends. Touches only the batches in its range."""
    first, last = new.first_offset, new.last_offset
    start = bisect_left(batches, first, key=lambda batch: batch.last_offset)  # the first ending at or past `first`
    end = bisect_right(batches, last, key=lambda batch: batch.first_offset)  # those from here begin past `last`
    overlapped = batches[start:end]
    pieces: list[StateBatch] = []
    if overlapped and overlapped[0].first_offset < first:
        pieces.append(overlapped[0]._replace(last_offset=first - 1))
    cursor = first  # the first offset of the new range not placed yet
    for old in overlapped:
        low, high = max(old.first_offset, first), min(old.last_offset, last)
        if low > cursor:
            pieces.append(new._replace(first_offset=cursor, last_offset=low - 1))
        winner = old if _priority(old) > _priority(new) else new
        pieces.append(winner._replace(first_offset=low, last_offset=high))
        cursor = high + 1
    if cursor <= last:
        pieces.append(new._replace(first_offset=cursor, last_offset=last))
    if overlapped and overlapped[-1].last_offset > last:
        pieces.append(overlapped[-1]._replace(first_offset=last + 1))
    return [*batches[:start], *pieces, *batches[end:]]


def _from(batches: list[StateBatch], start_offset: int) -> list[StateBatch]:
    """The ordered `batches` without what lies below `start_offset` (a batch across it keeps its upper part)."""
    kept = batches[bisect_left(batches, start_offset, key=lambda batch: batch.last_offset) :]
    if kept and kept[0].first_offset < start_offset:
        kept[0] = kept[0]._replace(first_offset=start_offset)
    return kept


def _joined(batches: list[StateBatch]) -> tuple[StateBatch, ...]:
    """The ordered `batches` with each run of adjacent batches of one state and delivery count made one."""
    joined: list[StateBatch] = []
    for batch in batches:
        if joined and joined[-1].last_offset + 1 == batch.first_offset and _priority(joined[-1]) == _priority(batch):
            joined[-1] = joined[-1]._replace(last_offset=batch.last_offset)
        else:
            joined.append(batch)
    return tuple(joined)


# ----------------------------------------------------------------------------------------- what the rules read


def share_lag(state: SharePartitionState, log_end: int) -> int | None:
    """The records from the SPSO to `log_end` (the partition's high watermark) not yet delivered for good; None while
    the SPSO is unknown (updates read without a snapshot, none of which moved it).

    Kafka defines it (KIP-1226, Kafka 4.2) as log end - SPSO - delivery complete count, the count kept by the
    partition's leader and written with each record, so that the group coordinator answers a describe from the
    persisted summary (start offset and count) without reading the batches. Kafka 4.1 records, and records whose
    writer did not know the count, leave it out, and Kafka then reports no lag; here the same figure is counted
    from the batches instead, the ACKNOWLEDGED and ARCHIVED records at or past the SPSO and below the log end, so
    that a 4.1 cluster has a lag too. Both agree whenever the batches hold every record the count counts. Never
    negative: the log end is read apart from the records and may lag them.
    """
    if state.start_offset is None:
        return None
    complete = state.delivery_complete_count
    if complete is None:
        complete = _complete_records(state.batches, log_end)
    return max(0, log_end - state.start_offset - complete)


def _complete_records(batches: Iterable[StateBatch], log_end: int) -> int:
    return sum(
        max(0, min(batch.last_offset + 1, log_end) - batch.first_offset)
        for batch in batches
        if batch.delivery_state in COMPLETE_STATES
    )


def archived(state: SharePartitionState) -> tuple[ArchivedBatch, ...]:
    """The archived ranges at or past the SPSO with the deliveries they took: what "offset 4711 archived after 5
    deliveries" is told from."""
    return tuple(
        ArchivedBatch(batch.first_offset, batch.last_offset, batch.delivery_count)
        for batch in state.batches
        if batch.delivery_state == DeliveryState.ARCHIVED
    )
