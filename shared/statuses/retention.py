"""Retention risk: how long until the oldest message a consumer has not read yet is deleted by the broker, and how
many messages it already lost that way. Pure functions, no I/O.

The oldest unconsumed message of a partition is the one at the committed offset. Two estimates of when it goes,
the sooner one wins (both are on the safe side of the broker, which deletes whole segments, later than either):

* from the log start's movement: the log-start offset samples (`time_lag.Sample`, oldest first) give the rate at
  which the broker deletes from the front; the gap between the log start and the committed offset, at that rate,
  is the time left (none when the log start has not moved: nothing is being deleted);
* from the topic's `retention.ms`: the oldest unconsumed message was appended when the log end passed the committed
  offset — its age is the partition's lag in seconds (`time_lag.py`) — and is deleted at `retention.ms` of age.

A committed offset below the log start means the messages in between were deleted unconsumed: `skipped` counts
them and the time left is 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from lagwatch.shared.protocol.types import Sample
from lagwatch.shared.statuses.time_lag import TimeLag


@dataclass(frozen=True, slots=True)
class RetentionRisk:
    seconds: float | None  # until the oldest unconsumed message is deleted (0: already); None: no risk known
    skipped: int = 0  # messages deleted before they were consumed (committed offset below the log start)
    basis: str | None = None  # "log-start" or "retention.ms": the estimate that decided

    def to_json(self) -> dict[str, Any]:
        return {
            "retention_risk_seconds": None if self.seconds is None else round(self.seconds, 3),
            "retention_risk_basis": self.basis,
            "skipped_messages": self.skipped,
        }


NO_RISK = RetentionRisk(None)


def log_start_rate(history: Sequence[Sample]) -> float | None:
    """Messages per second deleted from the front of the log, since it began moving (a log younger than its
    retention keeps its start until then: that stretch says nothing of the pace); None with fewer than two
    samples, 0 when it never moved."""
    if len(history) < 2 or history[-1].at <= history[0].at:
        return None
    i = 0
    while i + 1 < len(history) and history[i + 1].offset == history[0].offset:
        i += 1
    if i == len(history) - 1:
        return 0.0
    return max(0.0, (history[-1].offset - history[i].offset) * 1000 / (history[-1].at - history[i].at))


def retention_risk(
    committed: int | None,
    log_end: int | None,
    log_start: Sequence[Sample],
    lag: TimeLag | None,
    retention_ms: int | None,
    now_ms: int,
) -> RetentionRisk:
    """The risk for one partition: its committed offset, latest log end, log-start samples, lag in seconds and
    the topic's `retention.ms` (None or negative: unlimited or unknown)."""
    if committed is None or log_end is None or committed >= log_end:
        return NO_RISK  # nothing unconsumed
    start = log_start[-1].offset if log_start else None
    if start is not None and committed < start:
        return RetentionRisk(0.0, start - committed, "log-start")
    estimates: list[tuple[float, str]] = []
    rate = log_start_rate(log_start)
    if rate and start is not None:
        since_sample = max(0.0, (now_ms - log_start[-1].at) / 1000)
        estimates.append((max(0.0, (committed - start) / rate - since_sample), "log-start"))
    if retention_ms is not None and retention_ms >= 0 and lag is not None:
        estimates.append((max(0.0, retention_ms / 1000 - lag.seconds), "retention.ms"))
    if not estimates:
        return NO_RISK
    seconds, basis = min(estimates)
    return RetentionRisk(seconds, 0, basis)


def group_risk(partitions: Iterable[RetentionRisk]) -> RetentionRisk:
    """The group's: the soonest deletion among its partitions, every skipped message counted."""
    parts = list(partitions)
    skipped = sum(p.skipped for p in parts)
    known = [p for p in parts if p.seconds is not None]
    if not known:
        return RetentionRisk(None, skipped)
    soonest = min(known, key=lambda p: p.seconds or 0.0)
    return RetentionRisk(soonest.seconds, skipped, soonest.basis)
