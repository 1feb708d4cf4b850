"""A group's lag sparkline: its total lag over the time its windows cover. Pure functions over the stored windows.

Each commit entry carries the partition's lag when it was stored, and at every entry's timestamp the group's total
is the sum of each partition's latest entry at that time. It starts once every partition has an entry (earlier
points would be partial sums) and ends with the total lag now. No extra writer: the windows already hold the
history. The evaluator stores the points before now with the group's result; the dashboard adds the last one.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from lagwatch.shared.store.redis_store import StoredPartition

SPARKLINE_POINTS = 30  # at most, the last one being now
Point = tuple[int, int]  # (epoch ms, total lag)


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
