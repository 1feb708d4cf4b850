"""The evaluator's collector settings (services/evaluator/service.py `collect_less`): what exists at the start is
frozen out of collections, but cyclic garbage among it is collected first, not kept for the process's life."""

import gc
import weakref

import pytest

from lagwatch.services.evaluator.service import YOUNG_COLLECTION_THRESHOLD, collect_less


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def collector_restored():
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_garbage_left_before_the_freeze_is_collected_and_the_rest_frozen(collector_restored):
    gc.disable()  # the cycle below must still be there when collect_less runs
    try:
        first, second = Node(), Node()
        first.other, second.other = second, first
        gone = weakref.ref(first)
        del first, second  # a cycle: only the collector frees it
        collect_less()
    finally:
        gc.enable()
    assert gone() is None
    assert gc.get_freeze_count() > 0  # the rest: out of the collections
    assert gc.get_threshold()[0] == YOUNG_COLLECTION_THRESHOLD
