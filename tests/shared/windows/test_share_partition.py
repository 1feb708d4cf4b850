"""A share-partition's state folded from its ``__share_group_state`` records, and its lag: worked examples by hand,
and property tests holding the interval form to a reference that keeps each offset's state in a dict."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagwatch.devkit.group_state_encoders import encode_share_state_record
from lagwatch.shared.records.share_state_codec import (
    ShareSnapshot,
    ShareStateRecord,
    ShareUpdate,
    decode_share_state_record,
)
from lagwatch.shared.records.share_state_layouts import UNCHANGED, DeliveryState, StateBatch
from lagwatch.shared.windows.share_partition import (
    ArchivedBatch,
    SharePartitionState,
    apply,
    archived,
    share_lag,
)

AVAILABLE, ACKNOWLEDGED, ARCHIVED = DeliveryState.AVAILABLE, DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED
TOPIC_ID = "7f3e0c1a9b2d4e5f8a6b1c2d3e4f5a6b"
WRITTEN = 1_700_000_000_500


def snapshot(
    start: int, *batches: StateBatch, complete: int | None = None, state_epoch: int = 1, leader_epoch: int = 7
) -> ShareSnapshot:
    times = (WRITTEN - 500, WRITTEN)
    return ShareSnapshot(0, "sg", TOPIC_ID, 3, 0, state_epoch, leader_epoch, start, *times, batches, complete, False)


def update(start: int, *batches: StateBatch, complete: int | None = None, leader_epoch: int = UNCHANGED) -> ShareUpdate:
    return ShareUpdate(1, "sg", TOPIC_ID, 3, 0, leader_epoch, start, batches, complete, False)


def tombstone() -> ShareSnapshot:
    return ShareSnapshot(0, "sg", TOPIC_ID, 3, *[None] * 8, True)


def fold(*records: ShareStateRecord) -> SharePartitionState | None:
    state = None
    for record in records:
        state = apply(state, record)
    return state


def folded(*records: ShareStateRecord) -> SharePartitionState:
    state = fold(*records)
    assert state is not None
    return state


# 100..109 redelivered once and available again, 110..119 acknowledged, 120 archived after 5 deliveries
FIRST = snapshot(
    100, StateBatch(100, 109, AVAILABLE, 1), StateBatch(110, 119, ACKNOWLEDGED, 1), StateBatch(120, 120, ARCHIVED, 5)
)


def test_a_snapshot_is_the_state() -> None:
    state = folded(FIRST)
    assert (state.start_offset, state.state_epoch, state.leader_epoch, state.written_at) == (100, 1, 7, WRITTEN)
    assert state.batches == FIRST.state_batches and state.has_snapshot
    assert (state.archived_records, state.max_delivery_count) == (1, 5)
    # 130 - 100 records past the SPSO, 11 of them done with (acknowledged or archived)
    assert share_lag(state, 130) == 19
    assert archived(state) == (ArchivedBatch(120, 120, 5),)


def test_a_new_snapshot_replaces_the_state() -> None:
    state = folded(FIRST, snapshot(200, StateBatch(205, 206, ARCHIVED, 2), state_epoch=2))
    assert (state.start_offset, state.state_epoch, state.batches) == (200, 2, (StateBatch(205, 206, ARCHIVED, 2),))
    assert share_lag(state, 210) == 8


def test_an_update_moving_the_spso_drops_what_lies_below_it_and_cuts_the_batch_across_it() -> None:
    state = folded(FIRST, update(115, StateBatch(121, 124, ACKNOWLEDGED, 1)))
    assert state.start_offset == 115
    assert state.batches == (
        StateBatch(115, 119, ACKNOWLEDGED, 1),
        StateBatch(120, 120, ARCHIVED, 5),
        StateBatch(121, 124, ACKNOWLEDGED, 1),
    )
    assert (state.state_epoch, state.leader_epoch, state.written_at) == (1, 7, WRITTEN)  # an update keeps those
    assert (state.archived_records, state.max_delivery_count) == (1, 5)
    assert share_lag(state, 130) == 130 - 115 - 10


def test_a_start_offset_of_minus_one_leaves_the_spso() -> None:
    state = folded(FIRST, update(UNCHANGED, StateBatch(100, 104, ACKNOWLEDGED, 1), leader_epoch=8))
    assert (state.start_offset, state.leader_epoch) == (100, 8)
    assert state.batches[:2] == (StateBatch(100, 104, ACKNOWLEDGED, 1), StateBatch(105, 109, AVAILABLE, 1))
    assert share_lag(state, 130) == 30 - 16


def test_a_batch_inside_another_splits_it_and_equal_neighbours_join() -> None:
    state = folded(FIRST, update(UNCHANGED, StateBatch(103, 105, ARCHIVED, 2), StateBatch(106, 109, ACKNOWLEDGED, 1)))
    assert state.batches == (
        StateBatch(100, 102, AVAILABLE, 1),
        StateBatch(103, 105, ARCHIVED, 2),
        StateBatch(106, 119, ACKNOWLEDGED, 1),  # joined with 110..119: one state, one count
        StateBatch(120, 120, ARCHIVED, 5),
    )
    assert archived(state) == (ArchivedBatch(103, 105, 2), ArchivedBatch(120, 120, 5))
    assert state.archived_records == 4


def test_a_batch_across_two_keeps_the_parts_outside_it() -> None:
    """Offsets 108..111 delivered a second time win over both batches they overlap (delivery count 1)."""
    state = folded(FIRST, update(UNCHANGED, StateBatch(108, 111, AVAILABLE, 2)))
    assert state.batches == (
        StateBatch(100, 107, AVAILABLE, 1),
        StateBatch(108, 111, AVAILABLE, 2),
        StateBatch(112, 119, ACKNOWLEDGED, 1),
        StateBatch(120, 120, ARCHIVED, 5),
    )


def test_an_overlapped_offset_keeps_the_batch_of_more_deliveries_not_the_newer() -> None:
    """A batch written late (delivery count 1 over offsets archived after 5) changes nothing, as in Kafka's replay."""
    state = folded(FIRST, update(UNCHANGED, StateBatch(118, 125, AVAILABLE, 1)))
    assert state.batches == (
        StateBatch(100, 109, AVAILABLE, 1),
        StateBatch(110, 119, ACKNOWLEDGED, 1),  # same count: the final state is the later one
        StateBatch(120, 120, ARCHIVED, 5),
        StateBatch(121, 125, AVAILABLE, 1),
    )


def test_a_tombstone_deletes_the_state() -> None:
    assert fold(FIRST, tombstone()) is None
    assert apply(None, tombstone()) is None


def test_updates_before_any_snapshot_are_the_state_with_no_spso_until_one_moves_it() -> None:
    state = folded(update(UNCHANGED, StateBatch(50, 59, ACKNOWLEDGED, 1)))
    assert (state.start_offset, state.state_epoch, state.has_snapshot) == (None, None, False)
    assert share_lag(state, 100) is None
    state = folded(update(UNCHANGED, StateBatch(50, 59, ACKNOWLEDGED, 1)), update(55, StateBatch(60, 60, ARCHIVED, 5)))
    assert state.batches == (StateBatch(55, 59, ACKNOWLEDGED, 1), StateBatch(60, 60, ARCHIVED, 5))
    assert share_lag(state, 100) == 100 - 55 - 6
    assert not state.has_snapshot and apply(state, FIRST) == folded(FIRST)


def test_a_share_partition_not_initialized_has_no_spso() -> None:
    assert folded(snapshot(-1)).start_offset is None


def test_written_at_is_the_records_log_timestamp_when_given() -> None:
    state = apply(None, FIRST, written_at=WRITTEN + 10)
    assert state is not None and state.written_at == WRITTEN + 10
    later = apply(state, update(UNCHANGED), written_at=WRITTEN + 99)
    assert later is not None and later.written_at == WRITTEN + 99
    assert folded(FIRST, update(UNCHANGED)).written_at == WRITTEN  # an update carries no write time


def test_the_highest_delivery_count_leaves_acknowledged_records_out() -> None:
    state = folded(snapshot(0, StateBatch(0, 4, ACKNOWLEDGED, 9), StateBatch(5, 5, AVAILABLE, 3)))
    assert (state.max_delivery_count, state.archived_records) == (3, 0)
    assert folded(snapshot(0)).max_delivery_count == 0


def through_the_wire(record: ShareStateRecord) -> ShareStateRecord:
    return decode_share_state_record(*encode_share_state_record(record))


def test_kafka_4_1_and_4_2_records_give_one_lag_when_the_count_matches() -> None:
    """4.1 leaves the count out (counted from the batches); 4.2 writes it, and it is the one Kafka reports."""
    kafka_4_1 = folded(through_the_wire(FIRST))
    kafka_4_2 = folded(through_the_wire(snapshot(100, *FIRST.state_batches or (), complete=11)))
    assert (kafka_4_1.delivery_complete_count, kafka_4_2.delivery_complete_count) == (None, 11)
    assert share_lag(kafka_4_1, 130) == share_lag(kafka_4_2, 130) == 19
    trusted = folded(snapshot(100, *FIRST.state_batches or (), complete=15))
    assert share_lag(trusted, 130) == 15


def test_an_update_without_a_count_leaves_it_unknown() -> None:
    with_count = snapshot(100, *FIRST.state_batches or (), complete=11)
    state = folded(through_the_wire(with_count), through_the_wire(update(UNCHANGED, StateBatch(121, 125, ARCHIVED, 2))))
    assert state.delivery_complete_count is None
    assert share_lag(state, 130) == 30 - 16  # from the batches, 121..125 included
    counted = folded(with_count, update(UNCHANGED, StateBatch(121, 125, ARCHIVED, 2), complete=16))
    assert share_lag(counted, 130) == 14


@pytest.mark.parametrize(("log_end", "lag"), [(0, 0), (100, 0), (105, 5), (115, 10), (121, 10)])
def test_the_lag_counts_only_records_below_the_log_end_and_is_never_negative(log_end: int, lag: int) -> None:
    assert share_lag(folded(FIRST), log_end) == lag


# ------------------------------------------------------------------------------------------------ properties

STATES = st.sampled_from([AVAILABLE, ACKNOWLEDGED, ARCHIVED])


@st.composite
def batches(draw: st.DrawFn) -> StateBatch:
    first = draw(st.integers(0, 40))
    return StateBatch(first, first + draw(st.integers(-1, 8)), draw(STATES), draw(st.integers(0, 4)))


BATCH_LISTS = st.lists(batches(), max_size=4).map(tuple)
SNAPSHOTS = st.builds(lambda start, bs: snapshot(start, *bs), st.integers(0, 40), BATCH_LISTS)
UPDATES = st.builds(lambda start, bs: update(start, *bs), st.just(UNCHANGED) | st.integers(0, 40), BATCH_LISTS)
RECORDS = st.lists(st.one_of(SNAPSHOTS, UPDATES, UPDATES, UPDATES, st.just(tombstone())), max_size=8)

Offsets = dict[int, tuple[int, int]]  # offset -> (delivery count, delivery state)


def laid(offsets: Offsets, record_batches: Sequence[StateBatch]) -> None:
    for batch in record_batches:
        for offset in range(batch.first_offset, batch.last_offset + 1):
            offsets[offset] = max(offsets.get(offset, (-1, -1)), (batch.delivery_count, batch.delivery_state))


def reference(records: Sequence[ShareStateRecord]) -> tuple[int | None, Offsets] | None:
    """The state offset by offset: the SPSO and each offset's (delivery count, delivery state) at or past it."""
    state: tuple[int | None, Offsets] | None = None
    for record in records:
        if record.tombstone:
            state = None
            continue
        if isinstance(record, ShareSnapshot) or state is None:
            state = (None, {})
        start = state[0] if record.start_offset in (None, UNCHANGED) else record.start_offset
        laid(state[1], record.state_batches or ())
        offsets = {offset: info for offset, info in state[1].items() if start is None or offset >= start}
        state = (start, offsets)
    return state


def offset_by_offset(state: SharePartitionState) -> Offsets:
    return {
        offset: (batch.delivery_count, batch.delivery_state)
        for batch in state.batches
        for offset in range(batch.first_offset, batch.last_offset + 1)
    }


def assert_well_formed(state: SharePartitionState) -> None:
    """Ordered, non-overlapping, adjacent equals joined, nothing below the SPSO."""
    for batch in state.batches:
        assert batch.first_offset <= batch.last_offset
        assert state.start_offset is None or batch.first_offset >= state.start_offset
    for before, after in zip(state.batches, state.batches[1:], strict=False):
        assert before.last_offset < after.first_offset
        joinable = before.last_offset + 1 == after.first_offset
        assert not (joinable and before[2:] == after[2:])


@given(RECORDS)
def test_the_interval_form_equals_the_state_kept_offset_by_offset(records: list[ShareStateRecord]) -> None:
    state, expected = fold(*records), reference(records)
    assert (state is None) == (expected is None)
    if state is None or expected is None:
        return
    assert_well_formed(state)
    assert (state.start_offset, offset_by_offset(state)) == expected
    infos = expected[1].values()
    assert state.archived_records == sum(1 for _, delivery_state in infos if delivery_state == ARCHIVED)
    non_acknowledged = [count for count, delivery_state in infos if delivery_state != ACKNOWLEDGED]
    assert state.max_delivery_count == max(non_acknowledged, default=0)


@given(RECORDS, st.integers(-5, 60), st.none() | st.integers(0, 80))
def test_the_lag_is_never_negative(records: list[ShareStateRecord], log_end: int, complete: int | None) -> None:
    if (state := fold(*records, update(UNCHANGED, complete=complete))) is not None:
        lag = share_lag(state, log_end)
        assert lag is None or lag >= 0


@given(SNAPSHOTS, st.lists(UPDATES, max_size=5), st.integers(0, 20))
def test_the_lag_from_the_batches_equals_the_lag_from_a_matching_count(
    first: ShareSnapshot, updates: list[ShareUpdate], past_the_batches: int
) -> None:
    state = folded(first, *updates)
    complete = sum(1 for _, delivery_state in offset_by_offset(state).values() if delivery_state != AVAILABLE)
    counted = folded(first, *updates, update(UNCHANGED, complete=complete))
    log_end = max((batch.last_offset + 1 for batch in state.batches), default=0) + past_the_batches
    assert share_lag(state, log_end) == share_lag(counted, log_end)
