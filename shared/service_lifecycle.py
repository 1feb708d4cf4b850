"""What every lagwatch service process shares in its life cycle: pauses that a stop request cuts short, and running
until SIGTERM or SIGINT (both ask for a clean stop through the service's `stopping` event)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Protocol


class Service(Protocol):
    stopping: asyncio.Event

    async def run(self) -> None: ...


async def pause(event: asyncio.Event, seconds: float) -> None:
    """Wait `seconds`, or less when `event` is set meanwhile (a back-off that must not delay a stop)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


async def run_until_signalled(service: Service) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, service.stopping.set)
    await service.run()
