"""When the ingest reports its own progress, lagwatch's own group `lagwatch-<cluster>` (Burrow's `burrow-<cluster>`).

A report commits each offsets-topic partition's stored position, its lag measured against the poller's last log
end. Checked right after a batch is applied, while it is still being stored, a worker that keeps up would show a lag
of a few records, and reports in step with a steady committer make a window of nonzero lag: a WARN on itself. So a
due report whose log ends are ahead of the positions waits, up to WAIT_FOR_POLLED_S, for those records to be stored.
An ingest really behind reports its lag after the wait; a stuck one stops reporting and goes to STOP.
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
