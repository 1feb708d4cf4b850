"""Recent answers shared between callers (the dashboard's overviews): an answer is reused for `ttl_s` after its
computation FINISHED (counted from its start, a computation longer than `ttl_s` would never be reused), callers
arriving while it runs wait for it, and it is then dropped whether or not anyone asks again. Failures are not kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any


class SharedRecentResults:
    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._results: dict[Hashable, asyncio.Future] = {}

    async def get(self, key: Hashable, compute: Callable[[], Awaitable[Any]]) -> Any:
        """`compute()`'s answer for `key`: that of the computation running now or of one that finished less than
        `ttl_s` ago, when there is one; else a new computation's."""
        task = self._results.get(key)
        if task is None:
            task = self._results[key] = asyncio.ensure_future(compute())
            task.add_done_callback(lambda done: self._finished(key, done))
        # shielded: a caller that goes away (client disconnect, request timeout) does not cancel the others' answer
        return await asyncio.shield(task)

    def _finished(self, key: Hashable, task: asyncio.Future) -> None:
        if task.cancelled() or task.exception() is not None:
            self._forget(key, task)
        else:
            asyncio.get_running_loop().call_later(self.ttl_s, self._forget, key, task)

    def _forget(self, key: Hashable, task: asyncio.Future) -> None:
        if self._results.get(key) is task:
            del self._results[key]
