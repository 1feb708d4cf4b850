"""Lag in seconds: how long ago the log end passed a consumer's committed offset. Pure functions, no I/O.

The broker-offset poller keeps, per partition, a history of (log-end offset, observed at) samples: sorted by time,
offsets never decreasing (a log end that went back starts it afresh), and flat stretches collapsed to their first
and last sample (`add_sample`). The time lag of committed offset `c` at `now` is `now - t(c)`, where `t(c)` is when
the log end passed `c`, interpolated linearly between the two samples that bracket it. Rules people can alert on:

* `c` at or past the newest sample's offset: 0 s (caught up, busy or quiet topic alike);
* `c` older than the oldest sample: too little history to know; report `now - oldest time` as a lower bound
  (flagged), never an extrapolation beyond the history, never NaN or infinity;
* a quiet topic with the consumer behind: the log end reached `c` at some sample; the lag grows with the clock.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lagwatch.shared.protocol.types import ProbedLog, Sample


@dataclass(frozen=True, slots=True)
class TimeLag:
    seconds: float
    lower_bound: bool = False  # True: at least this much (the history does not reach back to the offset)


CAUGHT_UP = TimeLag(0.0)


def add_sample(history: list[Sample], sample: Sample, max_age_ms: int, max_samples: int) -> bool:
    """Append a poll to a history (mutated in place); False when the sample is dropped.

    Dropped: not later than the newest sample (the clock only goes forward). A log end lower than the newest
    restarts the history from this sample: Kafka's latest offset never goes back within one log (ListOffsets
    stays monotonic across leader changes, KIP-207), so the topic was deleted and re-created, or its log cut
    short by an unclean leader election; the old samples describe another log, and kept they would refuse every
    new one. A sample equal to the two before it extends the flat stretch instead of adding a point. Samples
    older than `max_age_ms` before the new one, and beyond `max_samples`, fall off the front.
    """
    if history:
        last = history[-1]
        if sample.at <= last.at:
            return False
        if sample.offset < last.offset:
            history[:] = [sample]
            return True
        if sample.offset == last.offset and len(history) >= 2 and history[-2].offset == last.offset:
            history.pop()  # the flat stretch now ends at the new sample
    history.append(sample)
    _trim(history, sample.at - max_age_ms, max_samples)
    return True


def _trim(history: list[Sample], oldest_allowed: int, max_samples: int) -> None:
    too_old = min(bisect_left(history, oldest_allowed, key=lambda s: s.at), len(history) - 1)  # the newest stays
    del history[: max(too_old, len(history) - max_samples)]


def probed_time_lag(
    committed: int,
    history: list[Sample],
    now_ms: int,
    log_end: int | None,
    caught_up: ProbedLog | None,
    unread: ProbedLog | None,
) -> TimeLag | None:
    """`time_lag` with the log probe's answers (services/ingest/log_probe.py): 0 s where only transaction markers or
    aborted records lie between the commit and the log end (the offsets' lag is none a consumer can read); where the
    history is only a lower bound (the offset older than it), the age of the first unread record, read at this
    commit: exact at any age. Inside the history the interpolation stands (cheap, and on lagwatch's clock)."""
    if caught_up is not None and log_end is not None and caught_up.caught_up_at(committed, log_end):
        return CAUGHT_UP
    lag = time_lag(committed, history, now_ms)
    if lag is None or not lag.lower_bound or unread is None or unread.committed != committed:
        return lag
    return lag if unread.unread_ms is None else TimeLag(max(0.0, (now_ms - unread.unread_ms) / 1000))


def time_lag(committed: int, history: list[Sample], now_ms: int) -> TimeLag | None:
    """Seconds behind for a committed offset, or None with no history at all."""
    if not history:
        return None
    newest = history[-1]
    if committed >= newest.offset:
        return CAUGHT_UP
    oldest = history[0]
    if committed < oldest.offset:
        return TimeLag(max(0.0, (now_ms - oldest.at) / 1000), lower_bound=True)
    # the last sample at or below the offset, and the one after it (which is above: committed < newest)
    i = bisect_right([s.offset for s in history], committed) - 1
    before, after = history[i], history[i + 1]
    # The log end passed `committed` when it went beyond it, somewhere between the two samples.
    fraction = (committed - before.offset) / (after.offset - before.offset)
    passed_at = before.at + fraction * (after.at - before.at)
    return TimeLag(max(0.0, (now_ms - passed_at) / 1000))


def worst(lags: Iterable[TimeLag | None]) -> TimeLag | None:
    """The largest lag of a group (a lower bound counts as its value, and stays flagged)."""
    known = [lag for lag in lags if lag is not None]
    return max(known, key=lambda lag: (lag.seconds, lag.lower_bound)) if known else None


def exceeds(lag: TimeLag | None, threshold_s: float) -> bool | None:
    """Whether a lag is over a threshold (strictly); None when the lag is unknown. A lower bound counts as over only
    when the bound itself is over: "at least 200 s" is not evidence of more than 300 s, so it does not raise an
    alert (and it reads as under, like any other known lag that is not over)."""
    return None if lag is None else lag.seconds > threshold_s


def seconds_fields(lag: TimeLag | None, prefix: str) -> dict[str, Any]:
    """`{<prefix>: seconds or None, <prefix>_lower_bound: bool}`: how lag in seconds appears in JSON."""
    return {
        prefix: None if lag is None else round(lag.seconds, 3),
        f"{prefix}_lower_bound": bool(lag and lag.lower_bound),
    }
