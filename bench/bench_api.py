"""The api on this machine: latency of a group's `/lag` under concurrent clients, and one full `/metrics` scrape.

Starts its own redis-server, stores 10k groups x 10 partitions with full 10-entry windows, then runs
`lagwatch run api` as a separate process (so client and server do not share an event loop) and measures:
`/v3/kafka/{cluster}/consumer/{group}/lag` for random groups (p50/p99 over 500 requests, 8 at a time), and one
`/metrics` scrape of everything (Burrow's per-partition metrics for all 100k partitions).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
from redis.asyncio import Redis

from lagwatch.devkit.ports import free_port
from lagwatch.devkit.redis_server import RedisServer
from lagwatch.shared.protocol.types import Commit, WindowConfig
from lagwatch.shared.windows.store import WindowStore

CLUSTER = "bench"
TOPIC = "topic"
LOG_END = 10_000


async def populate(url: str, groups: int, partitions: int, rounds: int = 10, batch: int = 5_000) -> None:
    redis = Redis.from_url(url)
    store = WindowStore(redis, WindowConfig())
    now = int(time.time() * 1000)
    await store.writes.add_broker_offsets(CLUSTER, TOPIC, [LOG_END] * partitions, sampled_at=now)
    brokers = {(TOPIC, p): LOG_END for p in range(partitions)}
    pending: list[Commit] = []
    order = 0
    for r in range(rounds):
        for g in range(groups):
            for p in range(partitions):
                order += 1
                ts = now - (rounds - r) * 60_000
                pending.append(Commit(f"group-{g}", TOPIC, p, r * 100 + p * 7 + g % 50, ts, order, ts))
                if len(pending) >= batch:
                    await store.writes.add_commits(CLUSTER, pending, now, broker_offsets=brokers)
                    pending = []
    if pending:
        await store.writes.add_commits(CLUSTER, pending, now, broker_offsets=brokers)
    await redis.aclose()


def start_api(redis_url: str, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_BOOTSTRAP_SERVERS", "LAGWATCH_CONFIG")}
    env.update(REDIS_URL=redis_url, LAGWATCH__API__PORT=str(port), LAGWATCH__API__REQUEST_TIMEOUT="300")
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "lagwatch"), "run", "api", "--log-level", "WARNING"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def wait_until_serving(session: aiohttp.ClientSession, base: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            async with session.get(f"{base}/healthz") as response:
                if response.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError("the api did not start")


async def lag_latencies(
    session: aiohttp.ClientSession, base: str, groups: int, requests: int, concurrency: int
) -> list[float]:
    rng = random.Random(1)
    targets = [f"{base}/v3/kafka/{CLUSTER}/consumer/group-{rng.randrange(groups)}/lag" for _ in range(requests)]
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def one(url: str) -> None:
        async with gate:
            started = time.perf_counter()
            async with session.get(url) as response:
                await response.read()
                assert response.status == 200, response.status
            latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(one(url) for url in targets))
    return latencies


async def measure(base: str, groups: int, requests: int, concurrency: int) -> dict:
    result: dict = {}
    connector = aiohttp.TCPConnector(limit=concurrency + 1)  # + the scrape
    async with aiohttp.ClientSession(connector=connector) as session:
        await wait_until_serving(session, base)
        await lag_latencies(session, base, groups, 50, concurrency)  # warm-up: connections, script cache
        started = time.perf_counter()
        latencies = sorted(await lag_latencies(session, base, groups, requests, concurrency))
        elapsed = time.perf_counter() - started
        result["lag_requests"] = requests
        result["lag_concurrency"] = concurrency
        result["lag_p50_ms"] = round(statistics.median(latencies) * 1000, 2)
        result["lag_p99_ms"] = round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 2)
        result["lag_requests_per_s"] = round(requests / elapsed)
        started = time.perf_counter()
        text = await scrape(session, base)
        result["metrics_scrape_s"] = round(time.perf_counter() - started, 2)
        result["metrics_scrape_mib"] = round(len(text.encode()) / 2**20, 1)
        result["metrics_samples"] = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        # the same /lag load while a scrape runs: how much a scrape delays other requests
        during, _ = await asyncio.gather(
            lag_latencies(session, base, groups, requests, concurrency), scrape(session, base)
        )
        during.sort()
        result["lag_during_scrape_p50_ms"] = round(statistics.median(during) * 1000, 2)
        result["lag_during_scrape_p99_ms"] = round(during[int(len(during) * 0.99) - 1] * 1000, 2)
    return result


async def scrape(session: aiohttp.ClientSession, base: str) -> str:
    async with session.get(f"{base}/metrics", timeout=aiohttp.ClientTimeout(total=600)) as response:
        assert response.status == 200, response.status
        return await response.text()


def against_api(groups: int, partitions: int, populate_with, measure_with) -> dict:
    """A fresh redis-server holding `populate_with(url, groups, partitions)`, an api process serving it, and
    `measure_with(api base url)`'s numbers, with the shape and how long storing took."""
    with RedisServer() as server:
        server.start()
        started = time.perf_counter()
        asyncio.run(populate_with(server.url, groups, partitions))
        populate_s = round(time.perf_counter() - started, 1)
        port = free_port()
        api = start_api(server.url, port)
        try:
            result = asyncio.run(measure_with(f"http://127.0.0.1:{port}"))
        finally:
            api.send_signal(signal.SIGTERM)
            try:
                api.wait(30)
            except subprocess.TimeoutExpired:
                api.kill()
    return {**result, "groups": groups, "partitions_per_group": partitions, "populate_s": populate_s}


def run(groups: int = 10_000, partitions: int = 10, requests: int = 500, concurrency: int = 8) -> dict:
    return against_api(groups, partitions, populate, lambda base: measure(base, groups, requests, concurrency))


if __name__ == "__main__":
    r = run()
    print(f"api: {r['groups']:,} groups x {r['partitions_per_group']} partitions (stored in {r['populate_s']}s)")
    print(
        f"api: GET .../consumer/<group>/lag, {r['lag_requests']} requests, {r['lag_concurrency']} at a time: "
        f"p50 {r['lag_p50_ms']} ms, p99 {r['lag_p99_ms']} ms, {r['lag_requests_per_s']:,} requests/s"
    )
    print(
        f"api: one /metrics scrape: {r['metrics_scrape_s']} s, {r['metrics_scrape_mib']} MiB, "
        f"{r['metrics_samples']:,} samples"
    )
    print(
        f"api: /lag while a scrape runs: p50 {r['lag_during_scrape_p50_ms']} ms, p99 {r['lag_during_scrape_p99_ms']} ms"
    )
