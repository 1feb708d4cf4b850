"""Retention risk as a pure function, against a generated partition whose broker deletes behind a slow consumer:
the time until its oldest unconsumed message is deleted within 10 % of the known answer, skipped messages exact."""

import pytest

from lagwatch.services.evaluator.next_change import PartitionWatch, closing_in, retention_instants
from lagwatch.shared.protocol.types import OffsetEntry, Sample
from lagwatch.shared.statuses.retention import NO_RISK, RetentionRisk, group_risk, log_start_rate, retention_risk
from lagwatch.shared.statuses.time_lag import add_sample, time_lag
from lagwatch.shared.statuses.verdicts import partition_retention_risk
from lagwatch.shared.windows.packing import pack_commit_ring
from lagwatch.shared.windows.stored_group import StoredPartition

S = 1000
T0 = 1_767_225_600_000
BASE = 50_000
PRODUCE = 100  # msg/s
RETENTION_S = 600


def log_end(t):
    return BASE + PRODUCE * t


def log_start(t):  # time-based retention: what was appended more than RETENTION_S ago is gone
    return BASE + PRODUCE * max(0, t - RETENTION_S)


def histories(now_s, poll_s=10):
    ends, starts = [], []
    for t in range(0, now_s + 1, poll_s):
        add_sample(ends, Sample(log_end(t), T0 + t * S), 3_600_000, 720)
        add_sample(starts, Sample(log_start(t), T0 + t * S), 3_600_000, 720)
    return ends, starts


@pytest.mark.parametrize("age_s", [30, 250, 590])
def test_a_slow_consumers_oldest_message_goes_when_retention_says(age_s):
    now_s = 1200
    ends, starts = histories(now_s)
    committed = log_end(now_s - age_s)  # its oldest unconsumed message was appended age_s ago
    lag = time_lag(committed, ends, T0 + now_s * S)
    for retention_ms, basis in ((None, "log-start"), (RETENTION_S * S, None)):
        risk = retention_risk(committed, log_end(now_s), starts, lag, retention_ms, T0 + now_s * S)
        assert risk.seconds == pytest.approx(RETENTION_S - age_s, rel=0.10), retention_ms
        assert risk.skipped == 0
        if basis:
            assert risk.basis == basis
    assert log_start_rate(starts) == pytest.approx(PRODUCE, rel=0.05)


def test_retention_ms_alone_gives_the_estimate_before_the_log_start_has_moved():
    ends, starts = histories(300)  # younger than the retention: nothing deleted yet
    committed = log_end(100)
    lag = time_lag(committed, ends, T0 + 300 * S)
    assert retention_risk(committed, log_end(300), starts, lag, None, T0 + 300 * S) == NO_RISK
    risk = retention_risk(committed, log_end(300), starts, lag, RETENTION_S * S, T0 + 300 * S)
    assert (risk.seconds, risk.basis) == (pytest.approx(400, rel=0.10), "retention.ms")


def test_a_committed_offset_below_the_log_start_counts_the_messages_lost():
    _, starts = histories(1200)
    committed = log_start(1200) - 1234
    risk = retention_risk(committed, log_end(1200), starts, None, None, T0 + 1200 * S)
    assert (risk.seconds, risk.skipped) == (0.0, 1234)


def test_a_caught_up_consumer_is_at_no_risk_and_a_group_takes_its_soonest_partition():
    _, starts = histories(1200)
    assert retention_risk(log_end(1200), log_end(1200), starts, None, 600_000, T0 + 1200 * S) == NO_RISK
    soon = retention_risk(log_end(700), log_end(1200), starts, None, None, T0 + 1200 * S)
    later = retention_risk(log_end(1100), log_end(1200), starts, None, None, T0 + 1200 * S)
    lost = retention_risk(log_start(1200) - 5, log_end(1200), starts, None, None, T0 + 1200 * S)
    group = group_risk([later, soon, NO_RISK])
    assert group.seconds == soon.seconds == pytest.approx(100, rel=0.10)
    assert group_risk([later, lost]).skipped == 5


def test_a_stored_partition_estimates_from_its_topics_retention_ms_as_read_from_the_broker():
    ends, _ = histories(300)
    committed = log_end(100)
    ring = pack_commit_ring([OffsetEntry(committed, T0 + 290 * S, T0 + 290 * S, 1, 1, 1)])
    unknown = StoredPartition("orders", 0, ring, [log_end(300)], history=ends)
    assert partition_retention_risk(unknown, T0 + 300 * S) == NO_RISK  # the log start has not moved: no estimate
    known = StoredPartition("orders", 0, ring, [log_end(300)], history=ends, retention_ms=RETENTION_S * S)
    risk = partition_retention_risk(known, T0 + 300 * S)
    assert (risk.seconds, risk.basis) == (pytest.approx(400, rel=0.10), "retention.ms")


def test_the_evaluator_wakes_when_the_time_left_falls_under_each_data_loss_risk_threshold():
    now = T0
    risk = RetentionRisk(900.0, 0, "log-start")
    assert retention_instants(risk, [600.0, 3600.0], now) == [now + 300_000 + 1]  # already under 3600 s
    assert retention_instants(RetentionRisk(None), [600.0], now) == [] and retention_instants(None, [600.0], now) == []
    assert retention_instants(RetentionRisk(0.0, 10), [600.0], now) == []  # in the alert already: nothing to wait for


def test_a_moving_log_start_re_checks_only_consumers_in_the_older_half_of_the_log_or_past_its_start():
    def watched(newest):
        return PartitionWatch(newest, 0, False, False)

    assert closing_in(watched(1_200), log_start=500, log_end=2_000)  # 700 of 1,500 retained: older half
    assert not closing_in(watched(1_900), log_start=500, log_end=2_000)  # near the end: not yet
    assert closing_in(watched(400), log_start=500, log_end=2_000)  # 100 messages skipped
