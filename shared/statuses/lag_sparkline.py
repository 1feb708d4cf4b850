"""A group's lag sparkline: its total lag over the time its windows cover. Pure functions over the stored windows.

Each commit entry carries the partition's lag when it was stored, and at every entry's timestamp the group's total
is the sum of each partition's latest entry at that time. It starts once every partition has an entry (earlier
points would be partial sums) and ends with the total lag now. No extra writer: the windows already hold the
history. The evaluator stores the points before now with the group's result; the dashboard adds the last one.
"""

from __future__ import annotations

from collections.abc import Sequence

from lagwatch.shared.windows.packing import COMMIT_ENTRY, NULL
from lagwatch.shared.windows.stored_group import StoredPartition

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
    # one pass over every entry by time, keeping each partition's latest lag and their sum
    changes = sorted((at, i, lag) for i, s in enumerate(series) for at, lag in s if at < now_ms)
    latest = [0] * len(series)
    total, sums = 0, []
    for n, (at, i, lag) in enumerate(changes):
        total += lag - latest[i]
        latest[i] = lag
        if at >= start and (n + 1 == len(changes) or changes[n + 1][0] != at):
            sums.append((at, total))
    return [*_spread(sums, points - 1), (now_ms, totallag)]


def _lag_series(partition: StoredPartition, intervals: int) -> list[Point]:
    """(timestamp, lag when stored) of the window's entries, by timestamp; entries stored without a lag are left
    out (the broker offset was not known yet). Read straight from the packed ring."""
    if intervals <= 0 or not partition.packed:
        return []
    kept = partition.packed[-intervals * COMMIT_ENTRY.size :]
    return sorted((at, lag) for _, at, _, lag, _, _ in COMMIT_ENTRY.iter_unpack(kept) if lag != NULL)


def _spread(points: list[Point], count: int) -> list[Point]:
    """At most `count` of the points (sorted by time), evenly spaced, the newest always kept."""
    if len(points) <= count:
        return points
    if count <= 1:
        return points[-count:] if count else []
    step = (len(points) - 1) / (count - 1)
    return [points[i] for i in sorted({round(i * step) for i in range(count)})]
