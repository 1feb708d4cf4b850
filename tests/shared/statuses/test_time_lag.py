"""Lag in seconds as a pure function: interpolation, edges, and the history it is computed from."""

import pytest

from lagwatch.shared.protocol.types import Sample
from lagwatch.shared.statuses.time_lag import CAUGHT_UP, TimeLag, add_sample, time_lag

S = 1000  # ms
HOUR = 3600 * S


def history(*points):
    out = []
    for offset, at in points:
        add_sample(out, Sample(offset, at), max_age_ms=HOUR, max_samples=1000)
    return out


def test_interpolates_between_the_two_samples_that_bracket_the_offset():
    h = history((100, 0), (200, 10 * S))
    assert time_lag(150, h, now_ms=60 * S) == TimeLag(55.0)  # the log end passed 150 at 5 s


def test_an_exact_hit_is_the_time_of_that_sample():
    h = history((100, 0), (200, 10 * S), (300, 20 * S))
    assert time_lag(200, h, now_ms=30 * S) == TimeLag(20.0)


def test_at_or_past_the_newest_sample_is_caught_up():
    h = history((100, 0), (200, 10 * S))
    assert time_lag(200, h, now_ms=99 * S) is CAUGHT_UP
    assert time_lag(250, h, now_ms=99 * S) is CAUGHT_UP


def test_a_quiet_topic_caught_up_stays_at_zero():
    h = history((100, 0), (100, 10 * S), (100, 600 * S))
    assert time_lag(100, h, now_ms=3000 * S) == TimeLag(0.0)


def test_a_quiet_topic_with_the_consumer_behind_grows_with_the_clock():
    h = history((90, 0), (100, 10 * S), (100, 600 * S))
    assert time_lag(95, h, now_ms=700 * S) == TimeLag(695.0)
    assert time_lag(95, h, now_ms=900 * S) == TimeLag(895.0)


def test_too_little_history_is_a_lower_bound_never_an_extrapolation():
    h = history((1000, 100 * S), (2000, 110 * S))
    lag = time_lag(10, h, now_ms=130 * S)
    assert lag == TimeLag(30.0, lower_bound=True)  # at least since the oldest sample


def test_no_history_is_unknown():
    assert time_lag(5, [], now_ms=0) is None


def test_flat_stretches_collapse_to_their_first_and_last_point():
    h = history((100, 0), (100, 10 * S), (100, 20 * S), (100, 30 * S), (150, 40 * S))
    assert h == [Sample(100, 0), Sample(100, 30 * S), Sample(150, 40 * S)]


def test_out_of_order_samples_are_dropped_the_clock_only_goes_forward():
    h = history((100, 10 * S))
    assert not add_sample(h, Sample(120, 5 * S), HOUR, 100)  # earlier than the newest
    assert not add_sample(h, Sample(120, 10 * S), HOUR, 100)  # not later
    assert h == [Sample(100, 10 * S)]


def test_a_log_end_that_went_back_starts_the_history_afresh():
    """A re-created topic: its old samples would refuse every new one, and lag in seconds would stay wrong."""
    h = history((100, 0), (500, 10 * S), (900, 20 * S))
    assert add_sample(h, Sample(3, 30 * S), HOUR, 100)
    assert h == [Sample(3, 30 * S)]
    assert add_sample(h, Sample(8, 40 * S), HOUR, 100)
    assert time_lag(3, h, now_ms=50 * S) == TimeLag(20.0)  # the new log passed 3 at 30 s


@pytest.mark.parametrize(("max_age", "max_samples", "kept"), [(25 * S, 100, 3), (HOUR, 2, 2)])
def test_history_is_bounded_by_age_and_size(max_age, max_samples, kept):
    h = []
    for i in range(5):
        add_sample(h, Sample(i * 10, i * 10 * S), max_age, max_samples)
    assert [s.at for s in h] == [i * 10 * S for i in range(5 - kept, 5)]
