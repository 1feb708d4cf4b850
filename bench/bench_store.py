"""The Redis window store on this machine: commits stored per second one by one vs batched, and memory.

Starts its own redis-server (no persistence). Numbers vary with machine load: compare the ratios within a run.
"""

from __future__ import annotations

import asyncio
import time

from redis.asyncio import Redis

from lagwatch.devkit.redis_server import RedisServer
from lagwatch.shared.protocol.types import Commit, WindowConfig
from lagwatch.shared.windows.store import WindowStore

CLUSTER = "bench"


def commits(groups: int, partitions: int, rounds: int, now: int) -> list[Commit]:
    out, order = [], 0
    for r in range(rounds):
        for g in range(groups):
            for p in range(partitions):
                order += 1
                out.append(Commit(f"group-{g}", "topic", p, r * 100 + p, now - (rounds - r) * 60_000, order, now))
    return out


async def used_memory(redis: Redis) -> int:
    return int((await redis.info("memory"))["used_memory"])


async def run_async(url: str, groups: int, partitions: int, batch: int) -> dict:
    redis = Redis.from_url(url)
    store = WindowStore(redis, WindowConfig())
    now = int(time.time() * 1000)
    await redis.flushdb()
    await store.writes.add_broker_offsets(CLUSTER, "topic", [10_000] * partitions, sampled_at=now)
    brokers = {("topic", p): 10_000 for p in range(partitions)}
    result: dict = {}

    single = commits(groups=200, partitions=partitions, rounds=5, now=now)
    start = time.perf_counter()
    for c in single:
        await store.writes.add_commits(CLUSTER, [c], now)
    result["one_by_one_per_s"] = round(len(single) / (time.perf_counter() - start))
    await redis.flushdb()
    await store.writes.add_broker_offsets(CLUSTER, "topic", [10_000] * partitions, sampled_at=now)

    base = await used_memory(redis)
    full = commits(groups=groups, partitions=partitions, rounds=10, now=now)  # fills every ring
    start = time.perf_counter()
    for i in range(0, len(full), batch):
        await store.writes.add_commits(CLUSTER, full[i : i + batch], now, broker_offsets=brokers)
    elapsed = time.perf_counter() - start
    result["batched_commits"] = len(full)
    result["batch_size"] = batch
    result["batched_per_s"] = round(len(full) / elapsed)
    result["partition_windows"] = groups * partitions
    result["bytes_per_partition_window"] = round((await used_memory(redis) - base) / (groups * partitions))

    start = time.perf_counter()
    for i in range(0, 20_000, batch):
        await store.writes.add_commits(CLUSTER, full[i : i + batch], now)  # broker offsets read from Redis first
    result["batched_fetching_broker_offsets_per_s"] = round(20_000 / (time.perf_counter() - start))
    await redis.aclose()
    return result


def run(groups: int = 10_000, partitions: int = 10, batch: int = 2_000) -> dict:
    with RedisServer() as server:
        server.start()
        return asyncio.run(run_async(server.url, groups, partitions, batch))


if __name__ == "__main__":
    r = run()
    print(f"store: one commit per call: {r['one_by_one_per_s']:,} commits/s")
    print(f"store: batches of {r['batch_size']}: {r['batched_per_s']:,} commits/s ({r['batched_commits']:,} commits)")
    print(f"store: batches, broker offsets read from Redis: {r['batched_fetching_broker_offsets_per_s']:,} commits/s")
    print(
        f"store: Redis memory per full 10-entry partition window: {r['bytes_per_partition_window']} bytes "
        f"({r['partition_windows']:,} windows)"
    )
