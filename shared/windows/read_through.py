"""How far the ingest has read: the instant through which every offset commit is known, and the clock the rules
judge by. Pure, no I/O.

The rules that depend on time alone (STOP: no commit for longer than the window spans; a group's expiry; lag in
seconds) read "now". When the ingest cannot read the offsets topic (Kafka out of reach, a worker restarting or
rejoining its group, a backlog), commits made meanwhile are unknown, and judging by the wall clock would call every
caught-up consumer stopped once the gap outgrows its window. So the evaluator and the api judge at

    min(wall clock, read-through + READ_THROUGH_GRACE_MS)

where read-through is the oldest of the instants each offsets-topic partition (or the admin poller) is known
complete through. In steady state read-through trails the wall clock by well under the grace, and the rules see
the wall clock; during an outage the judging clock stops, and resumes once the commits of the gap are read. Where no
ingest ever recorded how far it read, the wall clock is used.
"""

from __future__ import annotations

from collections.abc import Iterable

READ_THROUGH_GRACE_MS = 1_000  # how far the judging clock may run ahead of what the ingest has read
ADMIN_PREFIX = "admin:"  # admin mode: "admin:<worker>/<workers>" per worker (topic mode: one per offsets partition)


def judging_clock(wall_ms: int, read_through: Iterable[int]) -> int:
    """The instant the rules judge at: the wall clock, held back to READ_THROUGH_GRACE_MS past the oldest
    read-through instant."""
    oldest = min(read_through, default=None)
    if oldest is None:
        return wall_ms
    return min(wall_ms, oldest + READ_THROUGH_GRACE_MS)
