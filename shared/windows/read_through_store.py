"""Where each ingest records how far it has read (`shared/windows/read_through.py`): the hash
`lw:c:{<cluster>}:read-through`, offsets-topic partition (or "admin:<worker>/<workers>") -> the instant (ms) through
which its commits are stored."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from redis.asyncio import Redis

from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.redis_client import reply
from lagwatch.shared.windows.read_through import ADMIN_PREFIX, judging_clock


class ReadThroughStore:
    def __init__(self, redis: Redis, cluster: str) -> None:
        self.redis = redis
        self.key = keys.read_through(cluster)
        self._cleared = False  # entries of another mode (or worker count) removed, once per writer

    async def record_partitions(self, partitions: Iterable[int], at_ms: int) -> None:
        """Topic mode: these offsets-topic partitions' commits are stored through `at_ms`."""
        await self._record({str(p): at_ms for p in partitions}, lambda field: field.startswith(ADMIN_PREFIX))

    async def record_admin(self, shard: tuple[int, int], at_ms: int) -> None:
        """Admin mode: the groups of this worker's shard (index, count) are stored as fetched at `at_ms`."""
        index, count = shard
        suffix = f"/{count}"
        await self._record(
            {f"{ADMIN_PREFIX}{index}{suffix}": at_ms},
            lambda field: not (field.startswith(ADMIN_PREFIX) and field.endswith(suffix)),
        )

    async def _record(self, fields: dict[str, int], stale: Callable[[str], bool]) -> None:
        """Entries an earlier run left in another mode, or with another number of workers, would hold the clock for
        good: the first write of a writer removes them."""
        if not fields:
            return
        if not self._cleared:
            gone = [f for f in (b.decode() for b in await reply(self.redis.hkeys(self.key))) if stale(f)]
            if gone:
                await reply(self.redis.hdel(self.key, *gone))
            self._cleared = True
        await reply(self.redis.hset(self.key, mapping=fields))

    async def instants(self) -> list[int]:
        """The recorded instants; a value lagwatch did not write (not an integer) is left out, not fatal."""
        values = (await reply(self.redis.hgetall(self.key))).values()
        return [int(v) for v in values if v.isdigit()]

    async def judging_clock(self) -> tuple[int, int]:
        """(wall clock, the clock the rules judge at) now."""
        instants = await self.instants()
        wall = now_ms()
        return wall, judging_clock(wall, instants)
