"""What every lagwatch service process shares in its life cycle: pauses that a stop request cuts short, the one
back-off for retrying what must eventually succeed (Redis or Kafka coming back), and running until SIGTERM or SIGINT
(both ask for a clean stop through the service's `stopping` event)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
from collections.abc import Callable
from typing import Protocol

from lagwatch.shared.runtime.backoff import doubling


class Service(Protocol):
    stopping: asyncio.Event

    async def run(self) -> None: ...


async def pause(event: asyncio.Event, seconds: float) -> None:
    """Wait `seconds`, or less when `event` is set meanwhile (a back-off that must not delay a stop)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


class Backoff:
    """Pauses between tries along `doubling`, each drawn between half and all of its nominal length so that processes
    that failed together (a Redis restart) do not retry in step. `reset()` after a success."""

    def __init__(self, first: float = 0.1, cap: float = 5.0) -> None:
        self.first, self.cap = first, cap
        self.failures = 0

    @property
    def delay(self) -> float:
        """The next pause's nominal length (for log lines)."""
        return doubling(self.first, self.cap, self.failures)

    def reset(self) -> None:
        self.failures = 0

    async def pause(self, stopping: asyncio.Event | None = None) -> None:
        """Wait the next pause, or less when `stopping` is set meanwhile (None: only a cancel ends it early)."""
        seconds = self.delay * (0.5 + random.random() / 2)
        self.failures += 1
        if stopping is None:
            await asyncio.sleep(seconds)
        else:
            await pause(stopping, seconds)


DEAD_WORK_GRACE_S = 10.0  # how long /healthz says "dead" before the process exits (read at each call: tests shorten it)


async def until_stopped_or_dead(stopping: asyncio.Event, dead: Callable[[], str | None], what: str) -> None:
    """Wait for a stop request. Work that died for good (`dead()` says what; e.g. a crashed Faust app) ends the
    service with an error after a grace in which /healthz reports it: every supervisor then starts a fresh process,
    Docker's restart policy too, which does not act on health checks."""
    while not stopping.is_set():
        reason = dead()
        if reason is not None:
            await pause(stopping, DEAD_WORK_GRACE_S)
            if stopping.is_set():
                return
            raise RuntimeError(f"{what}: {reason}")
        await pause(stopping, 1.0)


async def run_until_signalled(service: Service) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, service.stopping.set)
    await service.run()
