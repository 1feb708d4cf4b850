"""The evaluator's schedule: for each group, the next instant time alone can change its status (a STOP rule turning
true, the group expiring, a lag-seconds threshold being crossed), so the evaluator evaluates exactly the groups that
are due, when they are due, instead of sweeping all of them. Key layout: `keys.py`.

One sorted set per changes-topic partition (score = the instant, ms): the evaluator instance that holds a partition
of the changes topic owns its groups, and their schedule moves with the partition to whichever instance holds it
next; it lives in Redis, so it survives restarts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

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
        partitions = sorted(partitions)
        async with self.redis.pipeline(transaction=False) as pipe:
            for partition in partitions:
                pipe.zrangebyscore(keys.due_groups(self.cluster, partition), "-inf", now_ms, start=0, num=DUE_BATCH)
            replies = await pipe.execute()
        return [g.decode() for reply in replies for g in reply]

    async def earliest(self, partitions: Iterable[int]) -> int | None:
        """The earliest instant scheduled in these partitions, or None when nothing is."""
        partitions = sorted(partitions)
        async with self.redis.pipeline(transaction=False) as pipe:
            for partition in partitions:
                pipe.zrange(keys.due_groups(self.cluster, partition), 0, 0, withscores=True)
            replies = await pipe.execute()
        scores = [int(reply[0][1]) for reply in replies if reply]
        return min(scores) if scores else None

    async def instants(self, partition: int) -> dict[str, int]:
        """Everything scheduled in one partition (tests, operations)."""
        raw = await self.redis.zrange(keys.due_groups(self.cluster, partition), 0, -1, withscores=True)
        return {g.decode(): int(at) for g, at in raw}
