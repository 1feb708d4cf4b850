"""A service's life cycle (shared/runtime/): the one back-off curve, and pauses a stop request cuts short."""

import asyncio
import time

import pytest

from lagwatch.shared.runtime import service_lifecycle
from lagwatch.shared.runtime.backoff import doubling
from lagwatch.shared.runtime.service_lifecycle import Backoff, pause, until_stopped_or_dead


def test_the_back_off_doubles_from_its_first_pause_up_to_its_cap():
    assert [doubling(0.5, 30.0, n) for n in range(8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_the_back_off_never_overflows_however_many_failures():
    assert doubling(0.1, 5.0, 10_000) == 5.0
    assert doubling(0.1, 5.0, -3) == 0.1


async def test_a_backoff_pauses_between_half_and_all_of_its_nominal_length_and_starts_over_after_a_reset():
    backoff, stopping = Backoff(0.02, 0.08), asyncio.Event()
    nominal, waited = [], []
    for _ in range(4):
        nominal.append(backoff.delay)
        started = time.monotonic()
        await backoff.pause(stopping)
        waited.append(time.monotonic() - started)
    assert nominal == [0.02, 0.04, 0.08, 0.08]
    assert all(w >= n / 2 - 0.005 for w, n in zip(waited, nominal, strict=True))
    backoff.reset()
    assert backoff.delay == 0.02


async def test_a_stop_request_cuts_a_pause_short():
    stopping = asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, stopping.set)
    started = time.monotonic()
    await pause(stopping, 30.0)
    assert time.monotonic() - started < 5.0


async def test_dead_work_ends_the_service_after_the_grace_unless_a_stop_comes_first(monkeypatch):
    monkeypatch.setattr(service_lifecycle, "DEAD_WORK_GRACE_S", 0.2)
    with pytest.raises(RuntimeError, match="worker: its loop died"):
        await until_stopped_or_dead(asyncio.Event(), lambda: "its loop died", "worker")
    stopping = asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, stopping.set)
    await until_stopped_or_dead(stopping, lambda: "its loop died", "worker")  # a stop within the grace: no error
    stopping = asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, stopping.set)
    await until_stopped_or_dead(stopping, lambda: None, "worker")  # nothing dead: it returns on the stop
