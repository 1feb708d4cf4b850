"""When polls alone may end the STOP rule's exception (next_change.exception_lapse_at): pure."""

import pytest

from lagwatch.services.evaluator.next_change import exception_lapse_at, next_change_at
from lagwatch.shared.protocol.types import OffsetEntry, RuleConfig, Sample, Status
from lagwatch.shared.statuses.verdicts import stored_group_status
from lagwatch.shared.windows.packing import pack_commit_ring
from lagwatch.shared.windows.stored_group import StoredGroup, StoredPartition

POLL, RING = 1000, 10
WEEK = 7 * 86_400_000


def test_the_exception_lapses_a_ring_of_polls_after_the_log_end_moved_past_the_newest_commit():
    history = [Sample(80, 0), Sample(90, 5_000), Sample(120, 9_000), Sample(130, 12_000)]
    # the newest commit is 100: the log end passed it at 9 s; ten polls later no kept sample is at or below it
    assert exception_lapse_at(history, 100, RING, POLL, now_ms=12_500) == 9_000 + RING * POLL + 1


def test_an_estimate_already_past_is_looked_at_again_at_the_next_poll():
    history = [Sample(90, 0), Sample(120, 1_000)]
    assert exception_lapse_at(history, 100, RING, POLL, now_ms=60_000) == 61_000


def test_without_a_history_past_the_commit_it_is_looked_at_again_at_the_next_poll():
    assert exception_lapse_at([], 100, RING, POLL, now_ms=5_000) == 6_000
    assert exception_lapse_at([Sample(90, 0)], 100, RING, POLL, now_ms=5_000) == 6_000


def _stopping_group(clock_offset_ms: int) -> StoredGroup:
    """Three commits a second apart, stamped on a clock `clock_offset_ms` behind lagwatch's, 90 to 100 behind."""
    lags = {1: 100, 2: 90, 3: 100}  # not always growing: OK until it stops
    entries = [OffsetEntry(10 * i, 1_000 * i, 1_000 * i + clock_offset_ms, lags[i], i, i) for i in (1, 2, 3)]
    part = StoredPartition("orders", 0, pack_commit_ring(entries), [200, 210, 230])
    return StoredGroup("local", "billing", 3_000, [part], clock_offset_ms=clock_offset_ms)


@pytest.mark.parametrize("clock_offset_ms", [0, 3_600_000, -3_600_000])
def test_the_stop_instant_is_on_lagwatchs_clock_and_the_rules_agree_with_it(clock_offset_ms):
    """STOP from `2 last - first` on the coordinators' clock, which is lagwatch's less the offset: the schedule
    wakes the evaluator when the rules turn, whatever the offset."""
    rules, group = RuleConfig(), _stopping_group(clock_offset_ms)
    now = 3_000 + clock_offset_ms  # when the last commit was made, on lagwatch's clock
    status = stored_group_status(group, 3, now, rules)
    wake = next_change_at(group, status, now, intervals=3, rules=rules, expire_group_ms=WEEK)
    assert wake == 5_001 + clock_offset_ms
    assert stored_group_status(group, 3, wake - 1, rules).status == Status.OK
    assert stored_group_status(group, 3, wake, rules).status == Status.ERR
