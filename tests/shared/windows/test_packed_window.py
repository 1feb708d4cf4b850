"""The packed ring the ingest keeps in memory follows the pure window exactly (`window.add_commit`)."""

import random

from lagwatch.shared.protocol.types import Commit, WindowConfig
from lagwatch.shared.windows.packing import unpack_commit_ring
from lagwatch.shared.windows.window import AddOutcome, PartitionWindow, add_to_ring
from tests.window_sequences import switching_sources

T0 = 1_700_000_000_000
SECOND = 1000


def test_the_packed_ring_and_the_pure_window_agree_on_random_sequences():
    rng = random.Random(11)
    for run in range(300):
        config = WindowConfig(intervals=rng.choice([1, 3, 5, 10]), min_distance_ms=rng.choice([0, 0, 3 * SECOND]))
        window = PartitionWindow(config)
        ring = b""
        for step in range(60):
            if rng.random() < 0.2:
                window.add_broker_offset(rng.randint(0, 500))
                continue
            order = rng.randint(0, 80)
            ts = T0 + order * SECOND + rng.randint(-2000, 2000)
            if rng.random() < 0.05:
                ts -= config.expire_group_ms + SECOND  # too old to keep
            offset = rng.randint(0, 500)
            expected = window.add_commit(Commit("g", "t", 0, offset, ts, order, T0 + step), now_ms=T0)
            latest = window.broker_offsets[-1] if window.broker_offsets else None
            outcome, updated = add_to_ring(ring, offset, ts, order, T0 + step, latest, T0, config)
            assert outcome == expected, (run, step)
            assert (updated is not None) == outcome.stored, (run, step)
            ring = updated if updated is not None else ring
            assert unpack_commit_ring(ring) == window.entries, (run, step)


def test_a_new_newest_commit_is_appended_without_unpacking_and_measured_against_the_log_end():
    config = WindowConfig(intervals=2)
    outcome, ring = add_to_ring(b"", 40, T0, 1, T0, 100, T0, config)
    assert outcome is AddOutcome.APPENDED
    for order, offset in ((2, 50), (3, 70)):
        outcome, ring = add_to_ring(ring, offset, T0 + order, order, T0, 100, T0, config)
    assert [(e.offset, e.lag, e.order) for e in unpack_commit_ring(ring)] == [(50, 50, 2), (70, 30, 3)]


def test_the_packed_ring_and_the_pure_window_agree_when_the_commits_switch_source():
    """From the admin poller's orders to the offsets topic's positions and back (window._continued_from_admin)."""
    rng = random.Random(13)
    for run in range(200):
        config = WindowConfig(intervals=rng.choice([1, 3, 5, 10]), min_distance_ms=rng.choice([0, 0, 3 * SECOND]))
        window = PartitionWindow(config)
        window.add_broker_offset(1000)
        ring = b""
        for step, (order, ts, offset) in enumerate(switching_sources(rng, T0, 60)):
            expected = window.add_commit(Commit("g", "t", 0, offset, ts, order, T0 + step), now_ms=T0)
            outcome, updated = add_to_ring(ring, offset, ts, order, T0 + step, 1000, T0, config)
            assert outcome == expected, (run, step)
            ring = updated if updated is not None else ring
            assert unpack_commit_ring(ring) == window.entries, (run, step)
