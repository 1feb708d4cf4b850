"""Lag velocity: how fast a consumer reads, how fast its producer writes, whether the lag grows, and when it is
caught up. Pure functions, no I/O: the evaluator, the api and the Spark replay call them on the same data.

* consume rate: messages per second from a partition's window of commits, the committed offset's rise over the
  commit timestamps, since the last rewind (an offset reset is not consumption); with no lag, from the window's
  first and last commits alone (with `min-distance` above 0 a merged entry keeps its first commit's timestamp, so
  the rate reads high by up to min-distance over the span). A consumer with no commit for longer than its window
  spans (Burrow's STOP test) reads nothing now: rate 0.
* produce rate: messages per second from the partition's log-end history (`time_lag.py`), over the same span of
  time the window covers, ending at the newest sample (interpolated where the span starts between samples).
* lag growth: produce rate minus consume rate (messages per second; negative while it catches up).
* time to catch up: lag / (consume - produce) while the consumer is faster; "never" when it is not (including a
  stopped consumer with lag); 0 with no lag. Per group the slowest partition decides: "never" when any partition
  never catches up, else the longest estimate.
* keeping up: a consumer that reads as fast as its producer writes (within PACE_TOLERANCE) and whose lag is no
  more than the producer writes in two of its commit intervals (or two log-end samples, whichever is longer) is
  keeping up, time to catch up 0: its lag is what arrived since its latest commit (on a busy topic a healthy
  consumer is never at lag 0, and its rate equals the producer's within the noise). A consumer far behind at the
  producer's pace still never catches up. So is one whose newest commit, at its usual pace (as recent as that
  bound's intervals), left nothing unread when it was stored, whatever the rates say: on a quiet topic a window
  often sees no message at all, and the rates alone would read a healthy consumer as "never".
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from lagwatch.shared.protocol.types import OffsetEntry, Sample

DEFAULT_SPAN_MS = 300_000  # produce-rate span when there is no window to match (5 min)
# rates this close count as equal: a window of 10 commits measures the consumer within about one commit interval
# of its span, and the producer between log-end samples
PACE_TOLERANCE = 0.1
BETWEEN_COMMITS = 2  # a keeping-up consumer's lag: at most what the producer writes in this many commit intervals


class CatchUp(StrEnum):
    CAUGHT_UP = "caught_up"  # no lag
    CATCHING_UP = "catching_up"  # the consumer is faster than the producer: `catchup_seconds` says when
    NEVER = "never"  # the consumer is not faster than the producer (or stopped): the lag will not shrink
    KEEPING_UP = "keeping_up"  # lag only what arrived since its latest commits: nothing to catch up (see above)
    UNKNOWN = "unknown"  # too few commits or log-end samples to tell


@dataclass(frozen=True, slots=True)
class Velocity:
    consume_rate: float | None  # messages per second read
    produce_rate: float | None  # messages per second written
    lag: int  # messages behind now
    catchup: CatchUp
    catchup_seconds: float | None  # None unless CAUGHT_UP or KEEPING_UP (0) or CATCHING_UP
    log_end_flat_ms: int | None = None  # how long the log end has not moved (None without a history)

    @property
    def lag_growth(self) -> float | None:
        """Messages per second the lag grows by (negative: it shrinks)."""
        if self.consume_rate is None or self.produce_rate is None:
            return None
        return self.produce_rate - self.consume_rate

    def to_json(self) -> dict[str, Any]:
        return {
            "consume_rate": _round(self.consume_rate),
            "produce_rate": _round(self.produce_rate),
            "lag_growth_per_second": _round(self.lag_growth),
            "catchup": self.catchup.value,
            "catchup_seconds": _round(self.catchup_seconds),
        }


UNKNOWN = Velocity(None, None, 0, CatchUp.UNKNOWN, None)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def rewind_free_tail(entries: Sequence[OffsetEntry | None]) -> list[OffsetEntry]:
    """The newest run of commits whose offsets never go back (everything before the last rewind is dropped)."""
    filled = [e for e in entries if e is not None]
    start = len(filled) - 1
    while start > 0 and filled[start - 1].offset <= filled[start].offset:
        start -= 1
    return filled[max(start, 0) :]


def _span(tail: Sequence[OffsetEntry]) -> int | None:
    if len(tail) < 2 or tail[-1].timestamp <= tail[0].timestamp:
        return None
    return tail[-1].timestamp - tail[0].timestamp


def consume_rate(entries: Sequence[OffsetEntry | None], now_ms: int) -> float | None:
    """Messages per second committed over the window (None: fewer than two commits since a rewind, or no time
    between them); 0 for a consumer that stopped committing longer ago than its window spans."""
    return _consume_rate(rewind_free_tail(entries), now_ms)


def _consume_rate(tail: Sequence[OffsetEntry], now_ms: int) -> float | None:
    span = _span(tail)
    if span is None:
        return None
    first, last = tail[0], tail[-1]
    if now_ms - last.timestamp > span:
        return 0.0
    return (last.offset - first.offset) * 1000 / span


def log_end_at(history: Sequence[Sample], at_ms: int) -> float:
    """The log end at a time within the history (linear between samples; clamped to its ends)."""
    if at_ms <= history[0].at:
        return float(history[0].offset)
    if at_ms >= history[-1].at:
        return float(history[-1].offset)
    i = bisect_right(history, at_ms, key=lambda s: s.at) - 1
    before, after = history[i], history[i + 1]
    return before.offset + (after.offset - before.offset) * (at_ms - before.at) / (after.at - before.at)


def produce_rate(history: Sequence[Sample], span_ms: int | None) -> float | None:
    """Messages per second the log end rose over the `span_ms` before its newest sample (the whole history when it
    is shorter); None with fewer than two samples."""
    if len(history) < 2:
        return None
    newest = history[-1]
    start = max(history[0].at, newest.at - (span_ms or DEFAULT_SPAN_MS))
    if newest.at <= start:
        return None
    return (newest.offset - log_end_at(history, start)) * 1000 / (newest.at - start)


def log_end_flat_ms(history: Sequence[Sample], now_ms: int) -> int | None:
    """How long the log end has stayed where it is: since the first sample at its newest offset."""
    if not history:
        return None
    i = len(history) - 1
    while i > 0 and history[i - 1].offset == history[-1].offset:
        i -= 1
    return max(0, now_ms - history[i].at)


def catch_up(
    lag: int, consume: float | None, produce: float | None, between_commits: int = 0, read_all: bool = False
) -> tuple[CatchUp, float | None]:
    """`between_commits`: the lag a consumer keeping up may have (messages written between its commits);
    `read_all`: its newest commit, at its usual pace, left nothing unread (its lag is what arrived since)."""
    if lag <= 0:
        return CatchUp.CAUGHT_UP, 0.0
    if read_all:
        return CatchUp.KEEPING_UP, 0.0
    if consume is None or produce is None:
        return CatchUp.UNKNOWN, None
    if lag <= between_commits and consume > 0 and consume >= produce * (1 - PACE_TOLERANCE):
        return CatchUp.KEEPING_UP, 0.0
    if consume <= produce:
        return CatchUp.NEVER, None
    return CatchUp.CATCHING_UP, lag / (consume - produce)


def partition_velocity(
    entries: Sequence[OffsetEntry | None], history: Sequence[Sample], lag: int, now_ms: int
) -> Velocity:
    """A partition's velocity from its window (oldest first), its log-end history and its current lag. With no lag
    only the window's ends are read (callers may pass just those: most partitions are caught up, and their windows
    stay packed)."""
    if lag <= 0:
        filled = [e for e in entries if e is not None]
        entries = [filled[0], filled[-1]] if filled else []
    tail = rewind_free_tail(entries)
    consume = _consume_rate(tail, now_ms)
    span = _span(tail)
    # the producer over the stretch the consumer is judged on, up to its newest sample (a stopped consumer's window
    # ends long ago)
    if span is not None and history:
        span = max(span, history[-1].at - tail[-1].timestamp)
    produce = produce_rate(history, span)
    if produce is not None:
        produce = max(0.0, produce)
    pace_ms = _pace_ms(tail, history)
    between = int(produce * BETWEEN_COMMITS * pace_ms / 1000) if produce and pace_ms else 0
    read_all = pace_ms is not None and tail[-1].lag == 0 and now_ms - tail[-1].timestamp <= BETWEEN_COMMITS * pace_ms
    state, seconds = catch_up(lag, consume, produce, between, read_all)
    return Velocity(consume, produce, lag, state, seconds, log_end_flat_ms(history, now_ms))


def _pace_ms(tail: Sequence[OffsetEntry], history: Sequence[Sample]) -> float | None:
    """The consumer's commit interval, or the log end's sample interval when that is longer (its lag is measured
    against the newest sample); None without two commits apart in time."""
    span = _span(tail)
    if span is None:
        return None
    sampled_ms = history[-1].at - history[-2].at if len(history) > 1 else 0  # a quiet stretch: capped at the span
    return max(span / (len(tail) - 1), min(sampled_ms, span))


def group_velocity(partitions: Iterable[Velocity]) -> Velocity:
    """The group's: rates summed over the partitions where both are known, lag over all of them, the catch-up of the
    slowest partition ("never" when any never catches up; unknown only when every lagging partition is unknown;
    keeping up when every partition is caught up or keeping up, one of them keeping up)."""
    parts = list(partitions)
    both = [p for p in parts if p.consume_rate is not None and p.produce_rate is not None]  # growth stays honest
    consumes = [p.consume_rate for p in both if p.consume_rate is not None]
    produces = [p.produce_rate for p in both if p.produce_rate is not None]
    lag = sum(p.lag for p in parts)
    flats = [p.log_end_flat_ms for p in parts if p.log_end_flat_ms is not None]
    lagging = [p for p in parts if p.catchup not in (CatchUp.CAUGHT_UP, CatchUp.KEEPING_UP)]
    if not lagging:
        keeping = any(p.catchup == CatchUp.KEEPING_UP for p in parts)
        state, seconds = (CatchUp.KEEPING_UP if keeping else CatchUp.CAUGHT_UP), 0.0
    elif any(p.catchup == CatchUp.NEVER for p in lagging):
        state, seconds = CatchUp.NEVER, None
    else:
        known = [p.catchup_seconds for p in lagging if p.catchup_seconds is not None]
        state, seconds = (CatchUp.CATCHING_UP, max(known)) if known else (CatchUp.UNKNOWN, None)
    return Velocity(
        sum(consumes) if consumes else None,
        sum(produces) if produces else None,
        lag,
        state,
        seconds,
        min(flats) if flats else None,
    )
