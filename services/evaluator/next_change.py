"""When can time alone change a group's status? Pure functions over a group just evaluated.

Without a new commit or log-end poll, a partition's verdict (shared/statuses/rules.py) can only change when its STOP
rule turns true, at `last.timestamp + (last.timestamp - first.timestamp)` (strictly after it), or when the rule's
exception (a kept log end at or below the newest commit) lapses as unmoved polls push that sample out of the ring,
which no log-end notice reports (`exception_lapse_at`); the group only when it expires (`expire-group` after its
newest commit); its lag-seconds thresholds when its lag in seconds, growing with the clock, passes one; its
data-loss-risk thresholds when its retention risk, counting down, falls under one. Everything else the rules read
changes with commits (a change notice) or polls (a log-end notice). `watch` describes, per partition, what the
log-end notices need to decide whether a poll could flip a rule.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

from lagwatch.shared.events.lag_threshold_event import Alert, Threshold
from lagwatch.shared.protocol.types import GroupStatus, RuleConfig, Sample, Status
from lagwatch.shared.statuses.retention import RetentionRisk
from lagwatch.shared.statuses.rules import is_young, was_caught_up_recently
from lagwatch.shared.statuses.time_lag import TimeLag
from lagwatch.shared.windows.packing import COMMIT_ENTRY, commit_entry_at
from lagwatch.shared.windows.stored_group import StoredGroup, StoredPartition, TopicPartition


class PartitionWatch(NamedTuple):
    """A partition as the last evaluation saw it, for deciding whether a log-end poll could change its verdict (a
    named tuple: a log-end notice makes one for each partition of the topics it names, from `GroupWatch`)."""

    newest: int  # newest committed offset
    lag: int  # current_lag then
    recently_caught_up: bool  # some broker sample was <= newest (the STOP rule's exception held)
    lower_bound_lag: bool  # its lag in seconds was a lower bound, which moves with the log-end history

    def poll_could_flip(self, log_end: int, rules: RuleConfig) -> bool:
        """Could a poll that put the log end at `log_end` change this partition's verdict or its lag in seconds?

        Rule 1 (lag <= allowed-lag) flips when the lag crosses allowed-lag, lag in seconds when the lag leaves or
        reaches 0. A lagging partition whose STOP exception held may lose it as the new sample pushes the old
        ones out of the ring; one whose exception did not hold keeps it that way (log ends only grow), and its
        STOP instant is already scheduled. The other rules read only the commits."""
        lag = max(0, log_end - self.newest)
        if (lag <= rules.allowed_lag) != (self.lag <= rules.allowed_lag) or (lag == 0) != (self.lag == 0):
            return True
        return lag > rules.allowed_lag and (self.recently_caught_up or self.lower_bound_lag)


def closing_in(watched: PartitionWatch, log_start: int, log_end: int) -> bool:
    """Does retention close in on this partition's consumer? Its newest commit is in the older half of what the log
    holds (at a steady pace, it is deleted within half the retention), or below the log start (messages skipped)."""
    return (watched.newest - log_start) * 2 < log_end - log_start


def exception_lapse_at(history: list[Sample], newest: int, intervals: int, poll_interval_ms: int, now_ms: int) -> int:
    """When the kept log ends at or below the newest commit `newest` have left the ring of `intervals` samples, as
    polls finding the log end unmoved push them out: `intervals` polls after the log end moved past `newest` (the
    log-end history says when). Never before the next poll: an estimate passed while a sample is still kept (polls
    were late) is looked at again then."""
    moved_at = None
    for sample in reversed(history):  # oldest first: the first sample past `newest` after the last one at or below
        if sample.offset <= newest:
            break
        moved_at = sample.at
    at = moved_at + intervals * poll_interval_ms + 1 if moved_at is not None else now_ms
    return max(at, now_ms + poll_interval_ms)


def stop_instant(first_ts: int, last_ts: int) -> int:
    """The first ms at which `now - last > last - first` holds."""
    return 2 * last_ts - first_ts + 1


# a group's partitions of one topic as `watch` saw them: a row each, a `PartitionWatch` then the partition
_ROW = struct.Struct("<qq??i")
# topic -> its partitions' rows: the log-end index holds one per group evaluated (hundreds of thousands), so they are
# machine integers in one bytes object per topic read, not an object and a (topic, partition) key per partition
GroupWatch = dict[str, bytes]


def packed_watches(watches: Mapping[TopicPartition, PartitionWatch]) -> GroupWatch:
    return _by_topic((topic, _ROW.pack(*w, partition)) for (topic, partition), w in watches.items())


def unpacked_watches(rows: bytes) -> list[tuple[int, PartitionWatch]]:
    """(partition, watch) for each of a `GroupWatch`'s rows."""
    # each made as a tuple is: a named tuple's own __new__ is a Python function, several times slower, and a notice
    # makes a watch per partition of the topics it names
    return [(row[4], tuple.__new__(PartitionWatch, row[:4])) for row in _ROW.iter_unpack(rows)]


def watched_partitions(rows: bytes) -> Iterator[int]:
    for *_, partition in _ROW.iter_unpack(rows):
        yield partition


def watch(
    stored: StoredGroup, intervals: int, time_lags: Mapping[tuple[str, int], TimeLag | None]
) -> GroupWatch | None:
    """The group's partitions as evaluated, for the log-end notices (None: no partition holds a commit)."""
    return _by_topic((p.topic, _watch_row(p, time_lags)) for p in stored.partitions if p.packed) or None


def _watch_row(p: StoredPartition, time_lags: Mapping[tuple[str, int], TimeLag | None]) -> bytes:
    last, lag = p.newest, time_lags.get((p.topic, p.partition))
    caught_up = was_caught_up_recently(p.broker_offsets, last)
    return _ROW.pack(last.offset, p.current_lag, caught_up, bool(lag and lag.lower_bound), p.partition)


def _by_topic(rows: Iterable[tuple[str, bytes]]) -> GroupWatch:
    by_topic: dict[str, list[bytes]] = {}
    for topic, row in rows:
        by_topic.setdefault(topic, []).append(row)
    return {topic: b"".join(parts) for topic, parts in by_topic.items()}


def next_change_at(
    stored: StoredGroup,
    status: GroupStatus,
    now_ms: int,
    *,
    intervals: int,
    rules: RuleConfig,
    expire_group_ms: int,
    time_lags: Mapping[tuple[str, int], TimeLag | None] | None = None,
    thresholds_s: Iterable[Threshold] = (),
    retention: RetentionRisk | None = None,
    poll_interval_ms: int | None = None,
) -> int:
    """The earliest instant after `now_ms` at which time alone may change the group's status or cross one of the
    alert thresholds (the group's expiry at the latest). With `poll_interval_ms`, also when polls may make a STOP
    rule's exception lapse."""
    candidates = [stored.last_commit_ms + expire_group_ms + 1]
    for p, verdict in zip(stored.partitions, status.partitions, strict=True):
        filled = min(len(p.packed) // COMMIT_ENTRY.size, intervals)
        if not filled or filled / intervals < rules.minimum_complete or verdict.status == Status.STOP:
            continue
        if is_young(filled, filled / intervals, rules):
            continue  # no STOP until more commits come, and each of them is evaluated
        if p.current_lag <= rules.allowed_lag:
            continue  # rule 1 answers OK whatever the clock says, until a poll or a commit moves the lag
        first, last = commit_entry_at(p.packed, -filled), p.newest
        at = stop_instant(first.timestamp, last.timestamp) + stored.clock_offset_ms  # on lagwatch's clock
        if not was_caught_up_recently(p.broker_offsets, last):
            if at > now_ms:
                candidates.append(at)
        elif poll_interval_ms:
            lapse = exception_lapse_at(p.history, last.offset, intervals, poll_interval_ms, now_ms)
            candidates.append(max(at, lapse))
    thresholds = list(thresholds_s)
    lag_thresholds = [t.seconds for t in thresholds if t.alert == Alert.LAG_SECONDS]
    candidates.extend(threshold_instants(time_lags or {}, lag_thresholds, now_ms))
    risk_thresholds = [t.seconds for t in thresholds if t.alert == Alert.DATA_LOSS_RISK]
    candidates.extend(retention_instants(retention, risk_thresholds, now_ms))
    return min(candidates)


def threshold_instants(
    time_lags: Mapping[tuple[str, int], TimeLag | None], thresholds_s: Iterable[float], now_ms: int
) -> list[int]:
    """When the group's max lag in seconds will pass each threshold it is not over yet (lags grow with the clock:
    a partition `s` seconds behind at `now` is over `t` from `now + (t - s) s` on, strictly)."""
    growing = [lag.seconds for lag in time_lags.values() if lag is not None and lag.seconds > 0]
    if not growing:
        return []
    slowest = max(growing)
    return [now_ms + int((t - slowest) * 1000) + 1 for t in thresholds_s if t >= slowest]


def retention_instants(risk: RetentionRisk | None, thresholds_s: Iterable[float], now_ms: int) -> list[int]:
    """When the group's retention risk will fall under each data-loss-risk threshold it is not under yet (the
    time left counts down with the clock: `r` seconds left at `now` is under `t` from `now + (r - t) s` on,
    strictly)."""
    if risk is None or risk.seconds is None:
        return []
    return [now_ms + int((risk.seconds - t) * 1000) + 1 for t in thresholds_s if risk.seconds >= t]
