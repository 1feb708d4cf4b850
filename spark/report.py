"""A group's replay, digested: time in each status, incidents, lag percentiles. Pure functions.

The timeline holds a row at each change, so row i stands for history time [row i, row i+1) and the last row lasts
until the end of the replay; statistics over it are weighted by that time (p95 lag = the lag the group was at or
below for 95 % of the time).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from lagwatch.shared.events.status_event import StatusEvent
from lagwatch.shared.notifications.subscriptions.notification_policy import QUIET
from lagwatch.shared.protocol.types import Status
from lagwatch.spark.replay import ReplayResult, TimelineRow

GROUP_STATUSES = (Status.NOTFOUND.name, Status.OK.name, Status.WARN.name, Status.ERR.name)


class GroupReport(NamedTuple):
    observed_ms: int  # history time covered
    ms_notfound: int
    ms_ok: int
    ms_warn: int
    ms_err: int
    status_changes: int
    incidents: int
    open_incident: bool  # the last incident had not ended when the history did
    incident_mean_ms: float | None
    incident_max_ms: int | None
    max_totallag: int
    p95_totallag: int
    max_lag_seconds: float | None


def segments(timeline: Sequence[TimelineRow], end: int) -> list[tuple[TimelineRow, int]]:
    """Each row with how long it lasted."""
    return [(row, (timeline[i + 1].at if i + 1 < len(timeline) else end) - row.at) for i, row in enumerate(timeline)]


def weighted_percentile(values_and_weights: Sequence[tuple[int, int]], fraction: float) -> int:
    """The smallest value v such that values <= v hold at least `fraction` of the total weight."""
    total = sum(w for _, w in values_and_weights)
    if total <= 0:
        return max((v for v, _ in values_and_weights), default=0)
    running = 0
    for value, weight in sorted(values_and_weights):
        running += weight
        if running >= fraction * total:
            return value
    return max(v for v, _ in values_and_weights)


def incidents(events: Sequence[StatusEvent], end: int) -> tuple[list[int], bool]:
    """Lengths (ms) of the incidents in the events; True when the last one was still open at `end`."""
    lengths: list[int] = []
    opened_at: int | None = None
    for event in events:
        quiet_before, quiet_now = event.previous_status in QUIET, event.status in QUIET
        if quiet_before and not quiet_now:
            opened_at = event.evaluated_at
        elif quiet_now and not quiet_before and opened_at is not None:
            lengths.append(event.evaluated_at - opened_at)
            opened_at = None
    if opened_at is not None:
        lengths.append(end - opened_at)
    return lengths, opened_at is not None


def group_report(result: ReplayResult) -> GroupReport:
    end = result.last_at or 0
    spans = segments(result.timeline, end)
    in_status = dict.fromkeys(GROUP_STATUSES, 0)
    for row, length in spans:
        in_status[row.status] += length
    lengths, still_open = incidents(result.events, end)
    known_seconds = [row.max_lag_seconds for row in result.timeline if row.max_lag_seconds is not None]
    return GroupReport(
        observed_ms=end - (result.first_at or end),
        ms_notfound=in_status[Status.NOTFOUND.name],
        ms_ok=in_status[Status.OK.name],
        ms_warn=in_status[Status.WARN.name],
        ms_err=in_status[Status.ERR.name],
        status_changes=len(result.events),
        incidents=len(lengths),
        open_incident=still_open,
        incident_mean_ms=sum(lengths) / len(lengths) if lengths else None,
        incident_max_ms=max(lengths) if lengths else None,
        max_totallag=max((row.totallag for row in result.timeline), default=0),
        p95_totallag=weighted_percentile([(row.totallag, length) for row, length in spans], 0.95),
        max_lag_seconds=max(known_seconds) if known_seconds else None,
    )
