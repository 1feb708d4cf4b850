"""Burrow's evaluation rules (docs/rules.md §3), partition by partition and for whole groups."""

import json

import pytest

from lagwatch.rules_request import evaluate_request
from lagwatch.shared.protocol.types import OffsetEntry, PartitionInput, RuleConfig, Status
from lagwatch.shared.statuses.rules import group_status, partition_status
from tests import paths

SEEDS = json.loads((paths.DATA / "seed_examples.json").read_text())["cases"]
T0 = 1_700_000_000_000
MINUTE = 60_000
DEFAULTS = RuleConfig()


def window(offsets, lags, *, step=MINUTE, size=None):
    """Entries one `step` apart from T0; `size` pads with leading empty slots."""
    pairs = enumerate(zip(offsets, lags, strict=True))
    entries = tuple(OffsetEntry(offset=o, timestamp=T0 + i * step, lag=lag) for i, (o, lag) in pairs)
    return (None,) * ((size or len(entries)) - len(entries)) + entries


def part(offsets, lags, *, current_lag, broker=(), size=None, topic="t", partition=0):
    return PartitionInput(topic, partition, window(offsets, lags, size=size), tuple(broker), current_lag)


def status_of(p, *, now=None, config=DEFAULTS):
    last = max(e.timestamp for e in p.offsets if e is not None) if any(p.offsets) else T0
    return partition_status(p, now if now is not None else last + MINUTE, config).status


@pytest.mark.parametrize("case", SEEDS, ids=[c["name"] for c in SEEDS])
def test_seed_examples(case):
    answer = evaluate_request(case["request"])
    assert answer["status"] == case["expect"]["status"]
    assert [(p["topic"], p["partition"], p["status"]) for p in answer["partitions"]] == [
        (p["topic"], p["partition"], p["status"]) for p in case["expect"]["partitions"]
    ]


class TestCurrentLag:
    def test_lag_within_allowed_is_ok_whatever_the_window_shows(self):
        stalled = part([10] * 10, [5] * 10, current_lag=0)
        assert status_of(stalled) is Status.OK

    def test_allowed_lag_raises_the_bar(self):
        stalled = part([10] * 10, [5] * 10, current_lag=5)
        assert status_of(stalled) is Status.STALL
        assert status_of(stalled, config=RuleConfig(allowed_lag=5)) is Status.OK
        assert status_of(stalled, config=RuleConfig(allowed_lag=4)) is Status.STALL


class TestStop:
    def advancing(self, **kw):
        return part(range(10, 110, 10), [5, 3, 5, 2, 1, 1, 2, 1, 4, 6], current_lag=6, **kw)

    def test_stop_needs_strictly_more_time_than_the_window_spans(self):
        p = self.advancing()  # spans 9 minutes
        last = T0 + 9 * MINUTE
        assert status_of(p, now=last + 9 * MINUTE) is Status.OK
        assert status_of(p, now=last + 9 * MINUTE + 1) is Status.STOP

    def test_a_recent_broker_offset_at_or_below_the_newest_commit_means_a_quiet_topic(self):
        late = T0 + 30 * MINUTE
        assert status_of(self.advancing(broker=[106, 107]), now=late) is Status.STOP
        assert status_of(self.advancing(broker=[100, 106]), now=late) is Status.OK  # equal counts
        assert status_of(self.advancing(broker=[99, 106]), now=late) is Status.OK

    def test_stop_is_checked_before_rewind_and_stall(self):
        stalled = part([10] * 10, [3] * 10, current_lag=3)
        assert status_of(stalled, now=T0 + 60 * MINUTE) is Status.STOP

    def test_with_burrows_minimum_of_one_entry_a_single_entry_window_stops_as_soon_as_time_passes(self):
        p = part([10], [3], current_lag=3, size=10)
        burrow = RuleConfig(minimum_entries=1)
        assert status_of(p, now=T0, config=burrow) is Status.STALL
        assert status_of(p, now=T0 + 1, config=burrow) is Status.STOP


class TestYoungWindows:
    """Fewer than `minimum_entries` entries: not judged STOP, STALL or WARN (a new group's first commits)."""

    @pytest.mark.parametrize("filled", [1, 2])
    def test_a_young_window_with_lag_is_ok_however_long_it_waits(self, filled):
        p = part([10 * (i + 1) for i in range(filled)], [3] * filled, current_lag=3, size=10)
        assert status_of(p, now=T0 + 600 * MINUTE) is Status.OK

    def test_a_young_window_of_equal_offsets_or_rising_lag_is_ok(self):
        assert status_of(part([10, 10], [1, 2], current_lag=2, size=10)) is Status.OK
        assert status_of(part([10, 20], [12, 15], current_lag=15, size=10)) is Status.OK

    def test_a_full_ring_is_judged_however_small(self):
        assert status_of(part([10, 10], [1, 2], current_lag=2, size=2)) is Status.STALL

    def test_the_third_entry_makes_a_window_old_enough_to_judge(self):
        stalled = part([10, 10, 10], [1, 2, 3], current_lag=3, size=10)
        assert status_of(stalled) is Status.STALL
        assert status_of(stalled, now=T0 + 2 * MINUTE + 2 * MINUTE + 1) is Status.STOP

    def test_a_drop_in_the_offset_is_a_rewind_at_any_age(self):
        assert status_of(part([50, 40], [1, 11], current_lag=11, size=10)) is Status.REWIND

    def test_minimum_entries_is_configurable(self):
        p = part([10, 20, 30], [1, 2, 3], current_lag=3, size=10)
        assert status_of(p) is Status.WARN
        assert status_of(p, config=RuleConfig(minimum_entries=4)) is Status.OK


class TestRewind:
    def test_a_drop_that_never_recovers_is_a_rewind(self):
        p = part([10, 20, 30, 5, 15, 25], [1, 1, 1, 30, 20, 10], current_lag=10)
        assert status_of(p) is Status.REWIND

    def test_a_drop_recovered_later_is_not_a_rewind(self):
        recovered_exactly = part([10, 20, 30, 5, 30, 40], [1, 2, 3, 4, 5, 6], current_lag=6)
        assert status_of(recovered_exactly) is Status.WARN  # lag never decreases: the next rule decides
        never_back = part([10, 20, 30, 5, 29, 29], [1, 2, 3, 4, 5, 6], current_lag=6)
        assert status_of(never_back) is Status.REWIND

    def test_only_the_first_drop_counts_as_in_burrow(self):
        first_recovered = part([1000, 900, 1100, 1050], [5, 105, 5, 55], current_lag=55)
        assert status_of(first_recovered) is Status.OK  # Burrow's example: the later drop to 1050 is not looked at
        first_not_recovered = part([1000, 900, 950, 800], [5, 105, 55, 205], current_lag=205)
        assert status_of(first_not_recovered) is Status.REWIND

    def test_rewind_beats_stall_and_warn(self):
        p = part([50, 40, 40, 40], [1, 2, 3, 4], current_lag=4)
        assert status_of(p) is Status.REWIND


class TestStallAndWarn:
    def test_any_lag_within_allowed_in_the_window_is_ok(self):
        p = part([10, 20, 30, 40], [3, 0, 3, 4], current_lag=4)
        assert status_of(p) is Status.OK

    def test_stall_needs_every_offset_equal(self):
        assert status_of(part([10, 10, 10], [1, 2, 3], current_lag=3)) is Status.STALL
        assert status_of(part([10, 10, 11], [1, 2, 3], current_lag=3)) is Status.WARN

    def test_warn_when_lag_never_decreases_any_decrease_is_ok(self):
        assert status_of(part([10, 20, 30, 40], [2, 2, 3, 3], current_lag=3)) is Status.WARN
        assert status_of(part([10, 20, 30, 40], [2, 3, 2, 3], current_lag=3)) is Status.OK

    def test_null_lags_are_skipped_in_the_scan(self):
        assert status_of(part([10, 20, 30, 40], [2, None, 3, None], current_lag=3)) is Status.WARN
        assert status_of(part([10, 20, 30, 40], [3, None, 2, None], current_lag=3)) is Status.OK

    def test_null_lags_never_count_as_caught_up(self):
        assert status_of(part([10, 10, 10], [None, None, None], current_lag=3)) is Status.STALL


class TestCompleteness:
    def test_partial_window_reports_its_fraction_and_skips_leading_empty_slots(self):
        p = part([10, 20, 30, 40], [1, 2, 3, 4], current_lag=4, size=10)
        result = partition_status(p, T0 + 4 * MINUTE, DEFAULTS)
        assert result.complete == 0.4
        assert result.start.offset == 10 and result.end.offset == 40
        assert result.status is Status.WARN

    def test_below_minimum_complete_is_ok(self):
        p = part([10, 20, 30, 40], [1, 2, 3, 4], current_lag=4, size=10)
        assert status_of(p, config=RuleConfig(minimum_complete=0.5)) is Status.OK
        assert status_of(p, config=RuleConfig(minimum_complete=0.4)) is Status.WARN

    def test_an_empty_window_is_ok(self):
        assert status_of(part([], [], current_lag=7, size=10)) is Status.OK


class TestGroup:
    def test_worst_partition_wins_and_stop_stall_rewind_count_as_err(self):
        ok = part([10, 20], [0, 0], current_lag=0, partition=0)
        warn = part([10, 20, 30], [1, 2, 3], current_lag=3, partition=1)
        stall = part([10, 10, 10], [1, 2, 3], current_lag=3, partition=2)
        assert group_status("c", "g", [ok], T0 + 3 * MINUTE, DEFAULTS).status is Status.OK
        assert group_status("c", "g", [ok, warn], T0 + 3 * MINUTE, DEFAULTS).status is Status.WARN
        g = group_status("c", "g", [ok, warn, stall], T0 + 3 * MINUTE, DEFAULTS)
        assert g.status is Status.ERR
        assert [p.status for p in g.partitions] == [Status.OK, Status.WARN, Status.STALL]

    def test_totallag_maxlag_and_complete(self):
        a = part(range(10), [0] * 10, current_lag=4, partition=0)
        b = part(range(5), [0] * 5, current_lag=9, partition=1, size=10)
        c = part(range(10), [0] * 10, current_lag=9, partition=2)
        g = group_status("c", "g", [a, b, c], T0 + 10 * MINUTE, DEFAULTS)
        assert g.totallag == 22
        assert (g.maxlag.partition, g.maxlag.current_lag) == (1, 9)  # first of the ties
        assert g.complete == pytest.approx(2 / 3)
        assert g.partition_count == 3

    def test_a_known_group_without_partitions_is_ok_and_zero_complete(self):
        g = group_status("c", "g", [], T0, DEFAULTS)
        assert (g.status, g.complete, g.totallag, g.maxlag) == (Status.OK, 0.0, 0, None)

    def test_status_json_lists_only_bad_partitions_when_asked(self):
        ok = part([10, 20], [0, 0], current_lag=0, partition=0)
        warn = part([10, 20, 30], [1, 2, 3], current_lag=3, partition=1)
        g = group_status("c", "g", [ok, warn], T0 + 3 * MINUTE, DEFAULTS)
        assert [p["partition"] for p in g.to_json(only_bad_partitions=True)["partitions"]] == [1]
        assert [p["partition"] for p in g.to_json()["partitions"]] == [0, 1]
        assert g.to_json()["partitions"][1]["start"] == {"offset": 10, "timestamp": T0, "observedAt": None, "lag": 1}
