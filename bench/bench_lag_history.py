"""Lag in seconds: cost of one broker-offset poll for 100k partitions (rings + log-end histories written in
Redis, flat stretches collapsed), and Redis memory per partition history.

Half the partitions move every poll (their history grows by a sample per poll until the age/size bound); the
other half are quiet (their history collapses to two samples)."""

from __future__ import annotations

import asyncio
import statistics
import time

from redis.asyncio import Redis

from lagwatch.devkit.redis_server import RedisServer
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import WindowConfig
from lagwatch.shared.windows.store import WindowStore

CLUSTER = "bench"


async def used_memory(redis: Redis) -> int:
    return int((await redis.info("memory"))["used_memory"])


async def run_async(url: str, topics: int, partitions: int, polls: int) -> dict:
    redis = Redis.from_url(url)
    store = WindowStore(redis, WindowConfig())
    now = int(time.time() * 1000)
    seconds = []
    for poll in range(polls):
        batch = {
            f"topic-{t}": {p: (1000 + poll * 10 if p % 2 == 0 else 1000) for p in range(partitions)}
            for t in range(topics)
        }
        start = time.perf_counter()
        await store.writes.add_broker_polls(CLUSTER, batch, sampled_at=now + poll * 10_000)
        seconds.append(time.perf_counter() - start)
    moving = await redis.hget(keys.offset_history(CLUSTER, "topic-0"), 0)
    quiet = await redis.hget(keys.offset_history(CLUSTER, "topic-0"), 1)
    before = await used_memory(redis)
    await redis.delete(*[keys.offset_history(CLUSTER, f"topic-{t}") for t in range(topics)])
    history_bytes = before - await used_memory(redis)
    await redis.aclose()
    total = topics * partitions
    return {
        "partitions": total,
        "polls": polls,
        "poll_seconds_median": round(statistics.median(seconds), 3),
        "poll_seconds_max": round(max(seconds), 3),
        "partitions_per_s": round(total / statistics.median(seconds)),
        "history_bytes_per_partition": round(history_bytes / total),
        "samples_kept_moving_partition": len(moving or b"") // 16,
        "samples_kept_quiet_partition": len(quiet or b"") // 16,
    }


def run(topics: int = 1000, partitions: int = 100, polls: int = 30) -> dict:
    with RedisServer() as server:
        server.start()
        return asyncio.run(run_async(server.url, topics, partitions, polls))


if __name__ == "__main__":
    for key, value in run().items():
        print(f"lag history: {key}: {value}")
