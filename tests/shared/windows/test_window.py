"""The per-partition window (docs/rules.md §2) as a pure data structure."""

from hypothesis import given
from hypothesis import strategies as st

from lagwatch.shared.protocol.types import Commit, Sample, WindowConfig
from lagwatch.shared.windows.window import (
    ADMIN_ORDERS_FROM,
    SOURCE_CLOCK_SKEW_MS,
    AddOutcome,
    PartitionWindow,
    commit_made_at,
    expired,
    log_end_as_of,
)

T0 = 1_700_000_000_000
SECOND = 1000


def commit(order, offset, *, ts=None, group="g"):
    return Commit(group, "t", 0, offset, T0 + order * SECOND if ts is None else ts, order, T0 + order * SECOND)


def window(intervals=10, min_distance_ms=0, broker=1000):
    w = PartitionWindow(WindowConfig(intervals=intervals, min_distance_ms=min_distance_ms))
    if broker is not None:
        w.add_broker_offset(broker)
    return w


def test_appends_keep_order_and_measure_lag_against_the_latest_broker_offset():
    w = window(broker=100)
    assert w.add_commit(commit(1, 40), now_ms=T0) is AddOutcome.APPENDED
    w.add_broker_offset(130)
    assert w.add_commit(commit(2, 150), now_ms=T0) is AddOutcome.APPENDED  # committed past the known end
    assert [(e.order, e.offset, e.lag) for e in w.entries] == [(1, 40, 60), (2, 150, 0)]
    assert w.current_lag == 0


def test_current_lag_is_latest_broker_offset_minus_newest_commit():
    w = window(broker=100)
    w.add_commit(commit(1, 40), now_ms=T0)
    w.add_broker_offset(120)
    assert w.current_lag == 80


def test_commits_wait_for_a_broker_offset():
    w = window(broker=None)
    assert w.add_commit(commit(1, 40), now_ms=T0) is AddOutcome.NO_BROKER_OFFSET
    assert w.entries == []


def test_an_older_commit_is_inserted_in_order_with_a_null_lag():
    w = window()
    w.add_commit(commit(1, 10), now_ms=T0)
    w.add_commit(commit(5, 50), now_ms=T0)
    assert w.add_commit(commit(3, 30), now_ms=T0) is AddOutcome.INSERTED
    assert [(e.order, e.lag) for e in w.entries] == [(1, 990), (3, None), (5, 950)]


def test_a_duplicate_order_is_dropped():
    w = window()
    w.add_commit(commit(1, 10), now_ms=T0)
    assert w.add_commit(commit(1, 99), now_ms=T0) is AddOutcome.DUPLICATE
    assert [e.offset for e in w.entries] == [10]


def test_the_ring_keeps_the_newest_intervals_and_drops_commits_older_than_its_oldest():
    w = window(intervals=3)
    for order in range(1, 6):
        w.add_commit(commit(order * 10, order), now_ms=T0)
    assert [e.order for e in w.entries] == [30, 40, 50]
    assert w.add_commit(commit(25, 0), now_ms=T0) is AddOutcome.TOO_OLD
    assert w.add_commit(commit(35, 0), now_ms=T0) is AddOutcome.INSERTED  # evicts the oldest
    assert [e.order for e in w.entries] == [35, 40, 50]
    assert w.ring()[0].order == 35 and len(w.ring()) == 3


def test_the_padded_ring_has_empty_slots_in_front():
    w = window(intervals=4)
    w.add_commit(commit(1, 10), now_ms=T0)
    assert [e and e.offset for e in w.ring()] == [None, None, None, 10]


def test_min_distance_merges_into_the_previous_entry_keeping_its_timestamp():
    w = window(min_distance_ms=10 * SECOND, broker=100)
    w.add_commit(commit(1, 10, ts=T0), now_ms=T0)
    assert w.add_commit(commit(2, 20, ts=T0 + 4 * SECOND), now_ms=T0) is AddOutcome.MERGED
    assert w.add_commit(commit(3, 30, ts=T0 + 9 * SECOND), now_ms=T0) is AddOutcome.MERGED
    assert w.add_commit(commit(4, 40, ts=T0 + 10 * SECOND), now_ms=T0) is AddOutcome.APPENDED
    assert [(e.offset, e.timestamp, e.lag, e.order) for e in w.entries] == [
        (30, T0, 70, 3),
        (40, T0 + 10 * SECOND, 60, 4),
    ]


def test_a_replayed_commit_that_was_merged_away_stays_a_duplicate():
    w = window(min_distance_ms=10 * SECOND)
    for order, ts in [(1, T0), (2, T0 + SECOND), (3, T0 + 20 * SECOND)]:
        w.add_commit(commit(order, order * 10, ts=ts), now_ms=T0)
    before = list(w.entries)
    for order, ts in [(1, T0), (2, T0 + SECOND), (3, T0 + 20 * SECOND)]:
        assert w.add_commit(commit(order, order * 10, ts=ts), now_ms=T0) is AddOutcome.DUPLICATE
    assert w.entries == before


def test_min_distance_zero_never_merges_even_for_equal_timestamps():
    w = window()
    w.add_commit(commit(1, 10, ts=T0), now_ms=T0)
    assert w.add_commit(commit(2, 20, ts=T0), now_ms=T0) is AddOutcome.APPENDED


def test_a_commit_stamped_before_the_newest_entry_replaces_it_even_at_min_distance_zero():
    """Burrow compares the signed gap: a clock that moved back merges instead of appending an earlier time."""
    w = window(broker=100)
    w.add_commit(commit(1, 10, ts=T0), now_ms=T0)
    assert w.add_commit(commit(2, 20, ts=T0 - 3 * SECOND), now_ms=T0) is AddOutcome.MERGED
    assert [(e.offset, e.timestamp, e.lag, e.order) for e in w.entries] == [(20, T0, 80, 2)]
    assert w.add_commit(commit(3, 30, ts=T0 + SECOND), now_ms=T0) is AddOutcome.APPENDED


def test_an_older_commit_due_right_after_the_oldest_of_a_full_ring_takes_its_place_with_its_own_time():
    """Burrow overwrites the oldest slot there, whatever the min-distance; elsewhere an insert merges as usual."""
    w = window(intervals=3, min_distance_ms=10 * SECOND)
    for order, ts in [(1, T0), (5, T0 + 60 * SECOND), (9, T0 + 120 * SECOND)]:
        w.add_commit(commit(order, order * 10, ts=ts), now_ms=T0)
    assert w.add_commit(commit(3, 30, ts=T0 + 2 * SECOND), now_ms=T0) is AddOutcome.INSERTED
    assert [(e.order, e.timestamp) for e in w.entries] == [
        (3, T0 + 2 * SECOND),
        (5, T0 + 60 * SECOND),
        (9, T0 + 120 * SECOND),
    ]
    assert w.add_commit(commit(7, 70, ts=T0 + 61 * SECOND), now_ms=T0) is AddOutcome.MERGED
    assert [(e.order, e.timestamp) for e in w.entries] == [
        (3, T0 + 2 * SECOND),
        (7, T0 + 60 * SECOND),
        (9, T0 + 120 * SECOND),
    ]


def test_commits_older_than_expire_group_are_dropped():
    cfg = WindowConfig(expire_group_ms=60 * SECOND)
    w = PartitionWindow(cfg)
    w.add_broker_offset(10)
    now = T0 + 120 * SECOND
    assert w.add_commit(commit(1, 1, ts=now - 61 * SECOND), now_ms=now) is AddOutcome.EXPIRED
    assert w.add_commit(commit(2, 2, ts=now - 60 * SECOND), now_ms=now) is AddOutcome.APPENDED


def test_the_broker_ring_keeps_the_last_intervals_offsets():
    w = window(intervals=3, broker=None)
    for offset in [5, 6, 7, 8]:
        w.add_broker_offset(offset)
    assert w.broker_offsets == [6, 7, 8]


def test_group_filter_searches_unanchored_and_deny_wins():
    from lagwatch.shared.protocol.group_filter import GroupFilter

    f = GroupFilter(allowlist="orders", denylist="^console-consumer-")
    assert f.accepts("prod-orders-v2")
    assert not f.accepts("payments")
    assert not f.accepts("console-consumer-orders")
    assert GroupFilter().accepts("anything")


def test_a_group_expires_once_its_newest_commit_is_older_than_expire_group():
    config = WindowConfig(expire_group_ms=1000)
    assert not expired(9_000, 10_000, config)  # exactly expire-group old: still there
    assert expired(8_999, 10_000, config)


ADMIN = ADMIN_ORDERS_FROM  # the admin poller's orders start at the time in microseconds


def admin_filled(offsets_and_times, intervals=10):
    """A window the admin poller filled: each commit stamped when the poller saw it."""
    w = window(intervals=intervals)
    for i, (offset, ts) in enumerate(offsets_and_times):
        assert w.add_commit(Commit("g", "t", 0, offset, ts, ADMIN + i, ts), now_ms=T0) is AddOutcome.APPENDED
    return w


def from_topic(order, offset, ts):
    return Commit("g", "t", 0, offset, ts, order, ts)


def test_the_offsets_topics_commits_take_on_a_window_the_admin_poller_filled():
    """`offsets-source: auto` finding the topic readable: the topic is read from its start; what the poller already
    saw is dropped, the first later commit goes on from the poller's entries, and so does the rest of the topic."""
    w = admin_filled([(10, T0 + 10 * SECOND), (20, T0 + 20 * SECOND)])
    assert w.add_commit(from_topic(3, 10, T0 + 8 * SECOND), now_ms=T0) is AddOutcome.DUPLICATE  # seen (at +10 s)
    assert w.add_commit(from_topic(4, 20, T0 + 18 * SECOND), now_ms=T0) is AddOutcome.DUPLICATE
    assert w.add_commit(from_topic(5, 30, T0 + 25 * SECOND), now_ms=T0) is AddOutcome.APPENDED
    assert w.add_commit(from_topic(6, 40, T0 + 35 * SECOND), now_ms=T0) is AddOutcome.APPENDED
    assert [(e.offset, e.timestamp) for e in w.entries] == [
        (10, T0 + 10 * SECOND),
        (20, T0 + 20 * SECOND),
        (30, T0 + 25 * SECOND),
        (40, T0 + 35 * SECOND),
    ]
    assert [e.lag for e in w.entries] == [990, 980, 970, 960]
    # the topic read again from before (a rewind of the ingest): the poller's entries stand for all of it
    for order in range(5):
        assert w.add_commit(from_topic(order, 99, T0 + 30 * SECOND), now_ms=T0) is AddOutcome.DUPLICATE
    assert w.add_commit(from_topic(5, 30, T0 + 25 * SECOND), now_ms=T0) is AddOutcome.DUPLICATE


def test_a_commit_the_coordinators_clock_stamps_a_little_after_the_pollers_is_still_one_it_saw():
    """The poller stamps with lagwatch's clock, the topic with the coordinator's: a lower offset let in on a clock
    a few seconds ahead would read as a REWIND. Past SOURCE_CLOCK_SKEW_MS it is one (the consumer was reset)."""
    w = admin_filled([(20, T0)])
    assert w.add_commit(from_topic(1, 15, T0 + 3 * SECOND), now_ms=T0) is AddOutcome.DUPLICATE
    assert w.add_commit(from_topic(2, 20, T0 + SOURCE_CLOCK_SKEW_MS), now_ms=T0) is AddOutcome.DUPLICATE
    assert w.add_commit(from_topic(3, 21, T0 + 2 * SECOND), now_ms=T0) is AddOutcome.APPENDED  # past its offset
    reset = admin_filled([(20, T0)])
    rewound_at = T0 + SOURCE_CLOCK_SKEW_MS + SECOND
    assert reset.add_commit(from_topic(1, 5, rewound_at), now_ms=T0) is AddOutcome.APPENDED
    assert [e.offset for e in reset.entries] == [20, 5]


def test_a_full_window_goes_on_keeping_its_newest_entries_and_back_to_the_poller_as_well():
    w = admin_filled([(10 * i, T0 + i * SECOND) for i in range(1, 4)], intervals=3)
    assert w.add_commit(from_topic(7, 40, T0 + 4 * SECOND), now_ms=T0) is AddOutcome.APPENDED
    assert [e.offset for e in w.entries] == [20, 30, 40]
    assert w.add_commit(from_topic(6, 35, T0 + 4 * SECOND), now_ms=T0) is AddOutcome.DUPLICATE  # before the first
    assert w.add_commit(from_topic(8, 50, T0 + 5 * SECOND), now_ms=T0) is AddOutcome.APPENDED
    # and to admin mode again: the poller's orders are above every position
    assert w.add_commit(Commit("g", "t", 0, 60, T0 + 6 * SECOND, ADMIN + 9, 0), now_ms=T0) is AddOutcome.APPENDED
    assert [e.offset for e in w.entries] == [40, 50, 60]


HISTORY = [Sample(10, T0), Sample(10, T0 + 5 * SECOND), Sample(30, T0 + 6 * SECOND), Sample(45, T0 + 9 * SECOND)]


def test_the_log_end_as_of_a_time_is_the_latest_sample_at_or_before_it():
    assert log_end_as_of(HISTORY, T0 + 5_999) == 10  # inside a flat stretch, and just before a move
    assert log_end_as_of(HISTORY, T0 + 6 * SECOND) == 30  # a sample at that very time counts
    assert log_end_as_of(HISTORY, T0 + 60 * SECOND) == 45  # after the last: the last
    assert log_end_as_of(HISTORY, T0 - SECOND) is None  # before the first: the history cannot say
    assert log_end_as_of([], T0) is None


@given(
    st.lists(st.tuples(st.integers(0, 100), st.integers(1, 3_000)), min_size=1, max_size=12),
    st.integers(-1_000, 40_000),
)
def test_the_log_end_as_of_a_time_agrees_with_a_scan_of_the_samples(steps, at):
    history, when = [], T0
    for offset, gap in steps:
        when += gap
        history.append(Sample(offset, when))
    before = [s.offset for s in history if s.at <= T0 + at]
    assert log_end_as_of(history, T0 + at) == (before[-1] if before else None)


def test_a_commit_is_made_at_its_time_on_lagwatchs_clock_and_never_after_it_was_read():
    assert commit_made_at(T0, T0 + 9 * SECOND, clock_offset_ms=2 * SECOND) == T0 + 2 * SECOND
    assert commit_made_at(T0, T0 + SECOND, clock_offset_ms=3_600_000) == T0 + SECOND  # clock behind: read when
    assert commit_made_at(T0, T0 + SECOND, clock_offset_ms=-3_600_000) == T0 - 3_600_000  # ahead
    assert commit_made_at(T0, T0 + SECOND, clock_offset_ms=None) == T0 + SECOND  # no offset known: when read
