"""A blocking call no one may wait for but its caller: librdkafka's calls cannot be interrupted, and one waiting on a
Kafka that is away blocks for its whole timeout."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any


async def on_own_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` on a daemon thread of its own: on the loop's default executor, a call blocked on a Kafka that is
    away would hold the loop's close, and with it a service's stop, for its whole timeout."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[Any] = loop.create_future()

    def settle(set_outcome: Callable[[Any], None], outcome: Any) -> None:
        if not answer.done():  # the caller was cancelled meanwhile
            set_outcome(outcome)

    def run(call: list[Callable[[], Any]]) -> None:
        try:
            outcome: tuple[Callable[[Any], None], Any] = (answer.set_result, call[0]())
        except Exception as exc:  # handed to the caller, as asyncio.to_thread does
            outcome = (answer.set_exception, exc)
        # An exception's traceback holds this frame: without the call, it no longer holds what the call was on (a
        # librdkafka client, kept alive and retrying its brokers by an outcome queued to a loop that never runs).
        call.clear()
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody is waiting
            loop.call_soon_threadsafe(settle, *outcome)

    name = f"kafka-{getattr(fn, '__name__', 'call')}"
    threading.Thread(target=run, args=([functools.partial(fn, *args)],), name=name, daemon=True).start()
    return await answer
