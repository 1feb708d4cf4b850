"""Recent answers shared between callers: every open dashboard polls the same overview, and computing one means
reading every group of a cluster (a second or more at 100k groups), so an answer is reused for `ttl_s` after its
computation FINISHED, and callers that arrive while it runs wait for it rather than start another. (Counted from
its start instead, nothing would be reused once a computation takes longer than `ttl_s`: every poll would compute
again.) An answer is dropped `ttl_s` after it finished, whether or not anyone asks again, so a cluster nobody looks at
keeps no memory. Failures are not kept: the next caller retries.
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
