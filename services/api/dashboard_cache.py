"""Recent answers shared between callers (the dashboard's overviews): an answer is reused for `ttl_s` after its
computation FINISHED (counted from its start, a computation longer than `ttl_s` would never be reused), callers
arriving while it runs wait for it, and it is then dropped whether or not anyone asks again. Failures are not kept.

With `stale_s`, the last answer is also kept that long after its computation finished, and a caller arriving while
the next computation runs gets it at once rather than waiting: a big cluster takes seconds to rank, and
each poll of the page would otherwise wait for one. Past `stale_s` (and for the first caller) the caller waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any


class SharedRecentResults:
    def __init__(self, ttl_s: float, stale_s: float = 0.0) -> None:
        self.ttl_s = ttl_s
        self.stale_s = stale_s
        self._results: dict[Hashable, asyncio.Future] = {}
        self._kept: dict[Hashable, tuple[float, Any]] = {}  # the last answer, and when its computation finished

    async def get(self, key: Hashable, compute: Callable[[], Awaitable[Any]]) -> Any:
        """`compute()`'s answer for `key`: that of the computation running now or of one that finished less than
        `ttl_s` ago, when there is one; else a new computation's. While a computation runs, an answer finished
        less than `stale_s` ago is returned at once."""
        task = self._results.get(key)
        if task is None:
            task = self._results[key] = asyncio.ensure_future(compute())
            task.add_done_callback(lambda done: self._finished(key, done))
        kept = self._kept.get(key)
        if not task.done() and kept is not None and asyncio.get_running_loop().time() - kept[0] < self.stale_s:
            return kept[1]
        # shielded: a caller that goes away (client disconnect, request timeout) does not cancel the others' answer
        return await asyncio.shield(task)

    def _finished(self, key: Hashable, task: asyncio.Future) -> None:
        if task.cancelled() or task.exception() is not None:
            self._forget(key, task)
            return
        loop = asyncio.get_running_loop()
        loop.call_later(self.ttl_s, self._forget, key, task)
        if self.stale_s > 0:
            kept = self._kept[key] = (loop.time(), task.result())
            loop.call_later(self.stale_s, self._drop_kept, key, kept)

    def _forget(self, key: Hashable, task: asyncio.Future) -> None:
        if self._results.get(key) is task:
            del self._results[key]

    def _drop_kept(self, key: Hashable, kept: tuple[float, Any]) -> None:
        if self._kept.get(key) is kept:
            del self._kept[key]
