"""A stream's items a batch at a time, without waiting for a batch to fill: a task reads the stream ahead into a
bounded queue, and each batch is whatever has arrived (one item at least, `most` at most). In a burst a batch waits
`linger` more for others to join it, so batches do not pay their fixed cost (Redis round trips) for a few events.

Faust's `take` would make an alert alone wait its `within`; reading in the agent itself would hold the events read
while Faust skips a stale one (from before a rebalance) and waits for the next, which may never come.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TypeVar, cast

T = TypeVar("T")


class _End:
    """Put after the last item: the source is over, or failed with `error`."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error


async def batches(source: AsyncIterator[T], most: int, linger: float = 0.0) -> AsyncGenerator[list[T], None]:
    """The items of `source` in batches of at most `most`, in order (up to `most` more read ahead); ends when `source`
    does, raises what it raises; in a burst a batch waits `linger` (s) for more."""
    waiting: asyncio.Queue[T | _End] = asyncio.Queue(most)
    reader = asyncio.create_task(_fill(waiting, source))
    try:
        while True:
            burst = not waiting.empty()
            batch = [await waiting.get()]  # one at least, then whatever else has arrived
            if burst and linger > 0:
                await asyncio.sleep(linger)
            while len(batch) < most and not waiting.empty():
                batch.append(waiting.get_nowait())
            end = batch[-1] if isinstance(batch[-1], _End) else None  # (always the last)
            if end is not None:
                batch.pop()
            if batch:
                yield cast("list[T]", batch)
            if end is not None:
                if end.error is not None:
                    raise end.error
                return
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


async def _fill(waiting: asyncio.Queue[T | _End], source: AsyncIterator[T]) -> None:
    try:
        async for item in source:
            await waiting.put(item)
    except Exception as exc:  # raised where the batches are taken (a Faust agent crashes, as it would reading itself)
        await waiting.put(_End(exc))
        return
    await waiting.put(_End())
