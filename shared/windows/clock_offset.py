"""How far a cluster's commit timestamps are from lagwatch's clock: the smallest `observed_at - timestamp` over the
last SPAN_MS (a sliding minimum). A commit read moments after it was made gives the two clocks' offset plus the
reader's delay, never less; the smallest is the offset. Kept by the ingest (services/ingest/commit_clock.py, over
batches read at the log end) and by the replay (spark/replay.py, over a group's commits read once), so that both
place a commit on lagwatch's clock the same way (window.commit_made_at).
"""

from __future__ import annotations

from collections import deque

# longer than a stall of the reader (a Redis failover, a pause for CPU), which would otherwise be taken for the
# offset; short enough that a clock set right, or a coordinator moved to a broker with another clock, is followed
# within minutes
SPAN_MS = 5 * 60_000


class ClockOffset:
    def __init__(self) -> None:
        # (observed_at, offset), offsets increasing: the first is the smallest of the span
        self._minima: deque[tuple[int, int]] = deque()

    @property
    def ms(self) -> int | None:
        """None until a commit was seen; held while none comes (a quiet cluster keeps its last estimate)."""
        return self._minima[0][1] if self._minima else None

    def add(self, observed_at: int, offset: int) -> None:
        """A commit (or a batch's newest) observed at `observed_at`, `offset` after its timestamp."""
        minima = self._minima
        while minima and minima[-1][1] >= offset:
            minima.pop()
        minima.append((observed_at, offset))
        while minima[0][0] <= observed_at - SPAN_MS:
            minima.popleft()
