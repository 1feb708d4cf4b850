"""Each coordinator's commit clock (shared/windows/clock_offset.py): the sliding minimum, the offset the rules apply,
and the mapping of a group to its coordinator's stored offset."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagwatch.devkit.offsets_topic_writer import offsets_partition_for
from lagwatch.shared.windows.clock_offset import (
    CLOCK_OFF_MS,
    SPAN_MS,
    ClockOffset,
    CoordinatorClocks,
    applied_offset,
    offsets_partition_of,
)

HOUR_MS = 3_600_000


def test_the_estimate_is_the_smallest_over_the_span_and_forgets_older_ones():
    clock = ClockOffset()
    assert clock.ms is None and clock.applied_ms is None
    clock.add(0, 5_000)
    clock.add(1_000, 300)
    clock.add(2_000, 4_000)
    assert clock.ms == 300
    clock.add(1_000 + SPAN_MS, 2_000)  # the 300 is older than the span now
    assert clock.ms == 2_000


@pytest.mark.parametrize(
    ("estimate", "applied"),
    [
        (None, None),
        (0, 0),
        (2_500, 0),  # a reader late on every commit for minutes, not a clock: commit times as they are
        (CLOCK_OFF_MS - 1, 0),
        (CLOCK_OFF_MS, CLOCK_OFF_MS),
        (HOUR_MS, HOUR_MS),
        (-1, -1),  # ahead is certain at any size: a delay is never negative
        (-HOUR_MS, -HOUR_MS),
    ],
)
def test_the_rules_apply_a_clock_behind_from_a_minute_and_one_ahead_at_any_size(estimate, applied):
    assert applied_offset(estimate) == applied


@given(st.text(max_size=40), st.integers(1, 200))
def test_a_groups_offsets_partition_is_kafkas(group, partitions):
    assert offsets_partition_of(group, partitions) == offsets_partition_for(group, partitions)


def test_each_group_reads_its_coordinators_offset_and_junk_is_ignored():
    one, other = "billing", next(g for g in (f"g{i}" for i in range(100)) if offsets_partition_of(g, 50) != 9)
    assert offsets_partition_of(one, 50) == 9
    stored = {
        b"partitions": b"50",
        b"offset:9": str(-HOUR_MS).encode(),
        f"offset:{offsets_partition_of(other, 50)}".encode(): b"1200",
        b"offset:x": b"1",
        b"offset:3": b"not a number",
        b"at_ms": b"1",
    }
    clocks = CoordinatorClocks.parse(stored)
    assert clocks.of_group(one) == -HOUR_MS
    assert clocks.of_group(other) == 0  # 1.2 s behind: the reader's delay, not a clock
    assert CoordinatorClocks.parse({b"offset:9": b"5"}).of_group(one) == 0  # no partition count: unknown
    assert CoordinatorClocks().of_group(one) == 0
