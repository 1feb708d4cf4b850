"""The per-partition sliding window of docs/rules.md §2, as a pure data structure.

A window holds the `intervals` most recent commits of one (cluster, group, topic, partition), sorted by `order`
(the commit record's position in the offsets topic), and the last `intervals` broker log-end offsets of the
partition. This is the reference: the ingest's compiled pass (services/ingest/commit_pass.pyx) applies its common
cases to the packed ring in place, and a property test holds the two to agreement, so change both together.

Adding a commit, in this order:
1. older than `expire-group`                          -> dropped (EXPIRED)
2. the partition's broker offset is not known yet      -> dropped (NO_BROKER_OFFSET); without it there is no lag
3. its order is already covered by an entry            -> dropped (DUPLICATE); replays are harmless
4. newer than the newest entry: appended with lag = max(0, log end - offset) (APPENDED), or, when closer than
   `min-distance` to the newest entry, it replaces that entry but keeps its timestamp (MERGED). The log end is the
   one of when the commit was made (`log_end_as_of` at `commit_made_at`), not of when lagwatch got to it: a commit
   stored late, after the log end moved on, keeps the lag it had.
5. older: when the ring is full and it is older than the oldest entry -> dropped (TOO_OLD); otherwise inserted in
   order with a null lag (INSERTED), or merged into the entry before it under the same min-distance rule (MERGED)
A merged entry remembers the first order it stood for, so a replayed commit it absorbed stays a duplicate.

Orders come from two sources (docs/offsets-sources.md): a position in the offsets topic, or, in admin mode, the
poller's count, which starts at the time in microseconds (ADMIN_ORDERS_FROM and above). When a cluster moves from
admin mode to the topic (`offsets-source: auto` finding the topic readable), the topic's first commits meet windows
the poller numbered (`_continued_from_admin`, before step 3): those the poller had already seen are duplicates, and
the first later one takes the window on, renumbered below it.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from lagwatch.shared.protocol.types import Commit, OffsetEntry, Sample, WindowConfig
from lagwatch.shared.windows.packing import pack_commit_ring, unpack_commit_ring

# Orders at or above this were numbered by the admin poller (microseconds since the epoch, from 2001 on); a position
# in an offsets-topic partition never gets there (a million commits a second for 31 years).
ADMIN_ORDERS_FROM = 10**15
# The poller stamps a commit with its own clock (when it saw it), the topic with the coordinator's (when it was made):
# a commit up to this much later than the poller's newest entry, and not past its offset, is still taken for one the
# poller saw (a lower offset let in here would read as a REWIND)
SOURCE_CLOCK_SKEW_MS = 10_000


class AddOutcome(StrEnum):
    """What became of a commit; the one-letter values are also what the Redis script returns."""

    APPENDED = "a"
    INSERTED = "i"
    MERGED = "m"
    DUPLICATE = "d"
    TOO_OLD = "o"
    NO_BROKER_OFFSET = "b"
    EXPIRED = "x"

    @property
    def stored(self) -> bool:
        return self in (AddOutcome.APPENDED, AddOutcome.INSERTED, AddOutcome.MERGED)


def expired(newest_commit_ms: int, now_ms: int, config: WindowConfig) -> bool:
    """Burrow's `expire-group`: a group (or a commit) older than it is gone, as if it had never committed. The one
    statement of the rule: the ingest starts such a group afresh, the evaluator, the api and the replay drop it."""
    return newest_commit_ms < now_ms - config.expire_group_ms


def add_commit(
    entries: list[OffsetEntry],
    commit: Commit,
    latest_broker_offset: int | None,
    now_ms: int,
    config: WindowConfig,
) -> AddOutcome:
    """Apply one commit to `entries` (oldest first, mutated in place) and say what happened."""
    if expired(commit.timestamp, now_ms, config):
        return AddOutcome.EXPIRED
    if latest_broker_offset is None:
        return AddOutcome.NO_BROKER_OFFSET
    if entries and commit.order < ADMIN_ORDERS_FROM <= entries[-1].order and not _continued_from_admin(entries, commit):
        return AddOutcome.DUPLICATE
    orders = [e.order for e in entries]
    at = bisect_left(orders, commit.order)
    # entries[at] is the first with order >= the commit's; ranges are sorted and disjoint, so only it can cover
    if at < len(entries) and entries[at].covers(commit.order):
        return AddOutcome.DUPLICATE
    newest = at == len(entries)
    if at == 0 and not newest and len(entries) >= config.intervals:
        return AddOutcome.TOO_OLD
    lag = max(0, latest_broker_offset - commit.offset) if newest else None
    if _merges_into_previous(entries, at, newest, commit, config):
        entries[at - 1] = entries[at - 1]._replace(
            offset=commit.offset, order=commit.order, observed_at=commit.observed_at, lag=lag
        )
        return AddOutcome.MERGED
    entries.insert(
        at,
        OffsetEntry(
            offset=commit.offset,
            timestamp=commit.timestamp,
            observed_at=commit.observed_at,
            lag=lag,
            order=commit.order,
            first_order=commit.order,
        ),
    )
    del entries[: max(0, len(entries) - config.intervals)]
    return AddOutcome.APPENDED if newest else AddOutcome.INSERTED


def add_to_ring(
    ring: bytes,
    offset: int,
    timestamp: int,
    order: int,
    observed_at: int,
    latest_broker_offset: int | None,
    now_ms: int,
    config: WindowConfig,
) -> tuple[AddOutcome, bytes | None]:
    """`add_commit` on a packed ring (`packing.py`, the layout Redis stores): (outcome, the new ring, or None when
    it is unchanged)."""
    entries = unpack_commit_ring(ring)
    commit = Commit("", "", 0, offset, timestamp, order, observed_at)  # the group is not the window's concern
    outcome = add_commit(entries, commit, latest_broker_offset, now_ms, config)
    return outcome, (pack_commit_ring(entries) if outcome.stored else None)


def _continued_from_admin(entries: list[OffsetEntry], commit: Commit) -> bool:
    """A commit read from the offsets topic meets a window the admin poller numbered: False for one the poller
    already saw (or an older one); otherwise the entries are renumbered below the commit's order (True), the newest
    covering every position before it, so that the rest of the topic read before it stays a duplicate. Without this
    every order of the topic is older than the poller's, and the window would take no commit until it expired."""
    newest = entries[-1]
    within_skew = commit.offset <= newest.offset and commit.timestamp <= newest.timestamp + SOURCE_CLOCK_SKEW_MS
    if commit.timestamp <= newest.timestamp or within_skew:
        return False
    older = len(entries) - 1
    for i, entry in enumerate(entries[:older]):
        entries[i] = entry._replace(order=i - older - 1, first_order=i - older - 1)
    entries[older] = newest._replace(order=commit.order - 1, first_order=-1)
    return True


def _merges_into_previous(
    entries: list[OffsetEntry], at: int, newest: bool, commit: Commit, config: WindowConfig
) -> bool:
    """Whether the commit, due at `at`, replaces the entry before it (min-distance). As Burrow's ring: the gap is
    signed, so a commit stamped before that entry (the coordinator's clock moved back) is within any min-distance,
    the default 0 too; and in a full ring an older commit due right after the oldest entry takes the oldest's place
    instead (Burrow overwrites that slot)."""
    if at == 0 or (at == 1 and not newest and len(entries) >= config.intervals):
        return False
    return commit.timestamp - entries[at - 1].timestamp < config.min_distance_ms


def commit_made_at(timestamp: int, observed_at: int, clock_offset_ms: int | None) -> int:
    """When a commit was made, on lagwatch's clock: its timestamp moved by the cluster's clock offset (the commit
    clock, services/ingest/commit_clock.py), and never after lagwatch observed it. Without an offset known, when it
    was observed: lagwatch cannot tell how far the coordinator's clock is from its own."""
    if clock_offset_ms is None:
        return observed_at
    return min(observed_at, timestamp + clock_offset_ms)


def log_end_as_of(history: Sequence[Sample], at_ms: int) -> int | None:
    """The partition's log end at `at_ms` from its log-end history (oldest first): the latest sample at or before it.
    Not an interpolation between the samples around it: when nothing runs late this is the sample the ingest has in
    hand as it stores the commit, so the lag at append stays Burrow's, and a log end from after the commit is never
    used. None where the history cannot answer (empty, or `at_ms` before its first sample): the caller takes the
    latest sample, as Burrow would."""
    at = bisect_right(history, at_ms, key=lambda sample: sample.at)
    return history[at - 1].offset if at else None


def add_broker_offset(ring: list[int], offset: int, intervals: int) -> None:
    """Append a polled log-end offset, keeping the last `intervals`."""
    ring.append(offset)
    del ring[: max(0, len(ring) - intervals)]


def current_lag(entries: list[OffsetEntry], broker_offsets: list[int]) -> int:
    """Latest broker offset minus the newest committed offset, floored at 0 (0 when either is unknown)."""
    if not entries or not broker_offsets:
        return 0
    return max(0, broker_offsets[-1] - entries[-1].offset)


def padded_ring(entries: list[OffsetEntry], intervals: int) -> tuple[OffsetEntry | None, ...]:
    """The ring as Burrow shows it: `intervals` slots, oldest first, empty slots (None) in front."""
    kept = entries[-intervals:] if intervals > 0 else []
    return (None,) * (intervals - len(kept)) + tuple(kept)


@dataclass(slots=True)
class PartitionWindow:
    """A partition's commit ring and broker-offset ring together, for code that holds windows in memory."""

    config: WindowConfig = field(default_factory=WindowConfig)
    entries: list[OffsetEntry] = field(default_factory=list)
    broker_offsets: list[int] = field(default_factory=list)

    def add_commit(self, commit: Commit, now_ms: int) -> AddOutcome:
        latest = self.broker_offsets[-1] if self.broker_offsets else None
        return add_commit(self.entries, commit, latest, now_ms, self.config)

    def add_broker_offset(self, offset: int) -> None:
        add_broker_offset(self.broker_offsets, offset, self.config.intervals)

    @property
    def current_lag(self) -> int:
        return current_lag(self.entries, self.broker_offsets)

    def ring(self) -> tuple[OffsetEntry | None, ...]:
        return padded_ring(self.entries, self.config.intervals)
