"""The evaluator's schedule: for each group, the next instant time alone can change its status (next_change.py), so
the evaluator evaluates exactly the groups that are due instead of sweeping all of them. One sorted set per
changes-topic partition (score = the instant, ms): the instance holding a partition owns its groups, and their
schedule moves with the partition; it lives in Redis, so it survives restarts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from redis.asyncio import Redis

from lagwatch.shared.protocol import keys

DUE_BATCH = 2000  # groups taken per partition per look (a backlog is worked off in rounds)


class ScheduleStore:
    def __init__(self, redis: Redis, cluster: str) -> None:
        self.redis, self.cluster = redis, cluster

    async def set(self, instants: Mapping[str, int | None], partition_of: Callable[[str], int]) -> None:
        """Schedule each group at its instant; None takes it off the schedule (nothing time-driven can change it)."""
        if not instants:
            return
        adds: dict[int, dict[str, int]] = {}
        removes: dict[int, list[str]] = {}
        for group, at in instants.items():
            if at is None:
                removes.setdefault(partition_of(group), []).append(group)
            else:
                adds.setdefault(partition_of(group), {})[group] = at
        async with self.redis.pipeline(transaction=False) as pipe:
            for partition, mapping in adds.items():
                pipe.zadd(keys.due_groups(self.cluster, partition), mapping)
            for partition, groups in removes.items():
                pipe.zrem(keys.due_groups(self.cluster, partition), *groups)
            await pipe.execute()

    async def due(self, partitions: Iterable[int], now_ms: int) -> list[str]:
        """Groups of these partitions whose instant has come (at most DUE_BATCH per partition)."""
        replies = await self._each(partitions, lambda pipe, key: pipe.zrangebyscore(key, "-inf", now_ms, 0, DUE_BATCH))
        return [g.decode() for reply in replies for g in reply]

    async def earliest(self, partitions: Iterable[int]) -> int | None:
        """The earliest instant scheduled in these partitions, or None when nothing is."""
        replies = await self._each(partitions, lambda pipe, key: pipe.zrange(key, 0, 0, withscores=True))
        return min((int(reply[0][1]) for reply in replies if reply), default=None)

    async def _each(self, partitions: Iterable[int], command: Callable[[Any, str], object]) -> list[Any]:
        """`command` on each partition's schedule, in one round trip: the replies."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for partition in sorted(partitions):
                command(pipe, keys.due_groups(self.cluster, partition))
            return await pipe.execute()

    async def instants(self, partition: int) -> dict[str, int]:
        """Everything scheduled in one partition (tests, operations)."""
        raw = await self.redis.zrange(keys.due_groups(self.cluster, partition), 0, -1, withscores=True)
        return {g.decode(): int(at) for g, at in raw}
