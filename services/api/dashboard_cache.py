"""Recent answers shared between callers: every open dashboard polls the same overview, and computing one means
evaluating every group of a cluster (seconds at thousands of groups), so all requests within `ttl_s` of a
computation share it, including those that arrive while it runs. Failures are not kept: the next caller retries.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any


class SharedRecentResults:
    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._results: dict[Hashable, tuple[float, asyncio.Future]] = {}

    async def get(self, key: Hashable, compute: Callable[[], Awaitable[Any]]) -> Any:
        """`compute()`'s answer for `key`, from a computation started less than `ttl_s` ago when there is one."""
        now = time.monotonic()
        self._forget_older_than(now - self.ttl_s)
        if key not in self._results:
            task = asyncio.ensure_future(compute())
            task.add_done_callback(lambda done: self._forget_failure(key, done))
            self._results[key] = (now, task)
        # shielded: a caller that goes away (client disconnect, request timeout) does not cancel the others' answer
        return await asyncio.shield(self._results[key][1])

    def _forget_older_than(self, oldest: float) -> None:
        for key in [k for k, (started, task) in self._results.items() if started < oldest and task.done()]:
            del self._results[key]

    def _forget_failure(self, key: Hashable, task: asyncio.Future) -> None:
        if (task.cancelled() or task.exception() is not None) and self._results.get(key, (0, None))[1] is task:
            del self._results[key]
