"""What the dashboard shows about a group, as JSON: a row of the overview (status, lag, lag in seconds, a lag
sparkline) and the detail of its partitions with their windows. Pure functions over the stored windows.

The sparkline is the group's total lag over the time its windows cover: each commit entry carries the partition's
lag when it was stored, and at every entry's timestamp the group's total is the sum of each partition's latest entry
at that time. It starts once every partition has an entry (earlier points would be partial sums) and ends with the
total lag now, the number the row shows. No extra writer: the windows already hold the history.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from typing import Any

from lagwatch.services.api.burrow_routes import consumer_topics
from lagwatch.shared.protocol import GroupStatus, PartitionStatus, Status
from lagwatch.shared.status_event import Incident
from lagwatch.shared.store.redis_store import StoredGroup, StoredPartition
from lagwatch.shared.time_lag import seconds_fields, worst

SPARKLINE_POINTS = 30  # at most, the last one being now
Point = tuple[int, int]  # (epoch ms, total lag)


def group_row(stored: StoredGroup, status: GroupStatus, now_ms: int, intervals: int, incident: Incident | None) -> dict:
    """One group of the overview; `incident` is the evaluator's open incident for it, if any."""
    return {
        "group": status.group,
        "status": status.status.name,
        "complete": status.complete,
        "partition_count": status.partition_count,
        "totallag": status.totallag,
        "maxlag": _maxlag(status.maxlag),
        **seconds_fields(worst(stored.time_lags(now_ms).values()), "max_lag_seconds"),
        "last_commit": stored.last_commit_ms,
        "rebalances_last_hour": stored.rebalances_last_hour,
        "sparkline": [list(p) for p in lag_sparkline(stored.partitions, status.totallag, now_ms, intervals)],
        "incident": incident_json(incident),
    }


def group_detail(status_json: dict, stored: StoredGroup, intervals: int) -> dict:
    """Burrow's status object (with lag in seconds) whose partitions also carry their window, oldest slot first:
    `[{offset, timestamp, observedAt, lag} | null, ...]` as in Burrow's consumer detail."""
    windows = consumer_topics(stored, {}, intervals)
    for part in status_json["partitions"]:
        part["window"] = windows[part["topic"]][part["partition"]]["offsets"]
    return status_json


def severity_order(row: Mapping[str, Any]) -> tuple:
    """Worst first: by status (ERR, WARN, OK, ...), then by total lag, then by name."""
    return (-Status[row["status"]], -row["totallag"], row["group"])


def incident_json(incident: Incident | None) -> dict | None:
    if incident is None or incident.incident_id is None:
        return None
    return {"incident_id": incident.incident_id, "started_at": incident.started_at}


def lag_sparkline(
    partitions: Sequence[StoredPartition], totallag: int, now_ms: int, intervals: int, points: int = SPARKLINE_POINTS
) -> list[Point]:
    """The group's total lag over its windows, oldest first, ending with (now, `totallag`)."""
    series = [s for s in (_lag_series(p, intervals) for p in partitions) if s]
    if not series:
        return [(now_ms, totallag)]
    start = max(s[0][0] for s in series)  # every partition has an entry from here on
    times = sorted({at for s in series for at, _ in s if at >= start and at < now_ms})
    sums = [(at, sum(_lag_at(s, at) for s in series)) for at in _spread(times, points - 1)]
    return [*sums, (now_ms, totallag)]


def _lag_series(partition: StoredPartition, intervals: int) -> list[Point]:
    """(timestamp, lag when stored) of the window's entries, by timestamp; entries stored without a lag are left
    out (the broker offset was not known yet)."""
    kept = partition.entries[-intervals:] if intervals > 0 else []
    return sorted((e.timestamp, e.lag) for e in kept if e.lag is not None)


def _lag_at(series: list[Point], at: int) -> int:
    """The lag of the latest entry at or before `at` (the series has one at or before it: see `start`)."""
    return series[bisect_right(series, (at, float("inf"))) - 1][1]


def _spread(times: list[int], count: int) -> list[int]:
    """At most `count` of the sorted `times`, evenly spaced, the newest always kept."""
    if len(times) <= count:
        return times
    if count <= 1:
        return times[-count:] if count else []
    step = (len(times) - 1) / (count - 1)
    return sorted({times[round(i * step)] for i in range(count)})


def _maxlag(p: PartitionStatus | None) -> dict | None:
    return None if p is None else {"topic": p.topic, "partition": p.partition, "current_lag": p.current_lag}
