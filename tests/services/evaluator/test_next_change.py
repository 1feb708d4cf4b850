"""When polls alone may end the STOP rule's exception (next_change.exception_lapse_at): pure."""

from lagwatch.services.evaluator.next_change import exception_lapse_at
from lagwatch.shared.protocol.types import Sample

POLL, RING = 1000, 10


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
