"""When the ingest reports its own progress, lagwatch's own group `lagwatch-<cluster>` (Burrow's `burrow-<cluster>`).

A report is a commit of each offsets-topic partition's stored position, its lag measured against the log end the
poller saw last. The check for a due report runs right after a batch is applied, while that batch is still being
stored: its records do not count in the positions yet, though the poller (every `offset-refresh`) may already have
seen them. Reported then, a worker that keeps up shows a lag of a few records; when its consumers commit on a steady
beat (a demo, a batch job every second) those reports fall into step with them, five in a row is a window of
nonzero, never falling lag, and lagwatch raised a WARN on itself for a second. So a due report whose log ends are
ahead of the positions waits, up to WAIT_FOR_POLLED_S, for the records on their way to be stored. An ingest really
behind stays behind past the wait and reports its lag, every REPORT_EVERY_S + WAIT_FOR_POLLED_S; a stuck one stops
reporting, and its group goes to STOP as any consumer's.
"""

from __future__ import annotations

from collections.abc import Mapping

REPORT_EVERY_S = 1.0
# far longer than a batch takes from its fetch to its store (tens of ms), far shorter than the report's interval
WAIT_FOR_POLLED_S = 0.5


def report_due(since_last_s: float, positions: Mapping[int, int], log_ends: Mapping[int, int | None]) -> bool:
    """Whether to report now, `since_last_s` after the last report: every REPORT_EVERY_S, once no position is short of
    the log end polled last (offsets-topic partition -> offset; None: not polled yet), or WAIT_FOR_POLLED_S later."""
    if since_last_s < REPORT_EVERY_S:
        return False
    if since_last_s >= REPORT_EVERY_S + WAIT_FOR_POLLED_S:
        return True
    return all((log_ends.get(partition) or 0) <= position for partition, position in positions.items())
