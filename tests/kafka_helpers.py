"""Test helpers around the Kafka mock cluster: config for a cluster, running a service, waiting for a condition."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from lagwatch.shared.runtime.config import Config, load_config
from lagwatch.shared.runtime.partitioner import partition_for

CLUSTER = "local"
# Notifier settings for tests: private targets allowed (the receivers are local), quick retries, leases and polls.
FAST_NOTIFIER = {
    "NOTIFIER__ALLOW_PRIVATE_TARGETS": "true",
    "NOTIFIER__BACKOFF_BASE": "0.05",
    "NOTIFIER__BACKOFF_CAP": "0.1",
    "NOTIFIER__REQUEST_TIMEOUT": "0.5",
    "NOTIFIER__LEASE": "1",
    "NOTIFIER__POLL_INTERVAL": "0.05",
}


def make_config(bootstrap: str, redis_url: str, **env: str) -> Config:
    """A config for one cluster `local` with quick refreshes; `env` adds LAGWATCH__... overrides (without prefix)."""
    base = {
        "REDIS_URL": redis_url,
        f"LAGWATCH__CLUSTERS__{CLUSTER}__BOOTSTRAP_SERVERS": bootstrap,
        f"LAGWATCH__CLUSTERS__{CLUSTER}__OFFSET_REFRESH": "0.3",
        f"LAGWATCH__CLUSTERS__{CLUSTER}__TOPIC_REFRESH": "1",
        "LAGWATCH__INGEST__HTTP_PORT": "0",
        "LAGWATCH__INGEST__SESSION_TIMEOUT": "3",  # quick rebalances (the mock waits a session for joiners)
    }
    base.update({f"LAGWATCH__{k}": v for k, v in env.items()})
    return load_config(env=base)


async def eventually(check: Callable[[], Awaitable[object]], timeout: float = 20.0, interval: float = 0.1):
    """Await `check()` until it returns something truthy; fail with its last value after `timeout`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s; last value: {last!r}")


async def produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    """Write `n` messages into each given partition of a topic."""
    async with AIOKafkaProducer(bootstrap_servers=bootstrap) as producer:
        for partition, n in per_partition.items():
            for i in range(n):
                await producer.send(topic, b"m%d" % i, partition=partition)
        await producer.flush()


async def consume_and_commit(bootstrap: str, group: str, topic: str, count: int) -> dict[int, int]:
    """A real consumer group reads `count` messages of a topic and commits; returns {partition: committed offset}."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    await consumer.start()
    try:
        seen = 0
        deadline = time.monotonic() + 20
        while seen < count and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200, max_records=count - seen)
            seen += sum(len(v) for v in batch.values())
        await consumer.commit()
        return {tp.partition: (await consumer.committed(tp)) for tp in consumer.assignment()}
    finally:
        await consumer.stop()


@contextlib.asynccontextmanager
async def running(service):
    """Run a service's `run()` as a task; stop it through its `stopping` event and re-raise its failure."""
    task = asyncio.create_task(service.run())
    try:
        yield service
    finally:
        service.stopping.set()
        await asyncio.wait_for(task, timeout=30)


@contextlib.asynccontextmanager
async def in_background(loop: Callable[[], Awaitable[object]]):
    """Run `loop()` as a task while the block runs; cancel it (and wait for it) when the block ends."""
    task = asyncio.create_task(loop())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def readiness(service) -> tuple[int, dict]:
    """A service's `/readyz` answer (status, body); (0, {}) while its health server does not listen yet."""
    import aiohttp

    try:
        async with aiohttp.ClientSession() as http, http.get(service.health.url + "/readyz") as response:
            return response.status, await response.json()
    except OSError:
        return 0, {}


async def check_readiness_follows_the_brokers(kafka, service) -> None:
    """Ready, then not ready with `kafka` false while the mock's brokers are down, then ready again once they are
    up: a consumer keeps its assignment through an outage, so readiness must ask the brokers themselves."""

    async def answer_is(status: int):
        got = await readiness(service)
        return got if got[0] == status else None

    await eventually(lambda: answer_is(200), timeout=30)
    await asyncio.to_thread(kafka.set_broker_down)
    try:
        _, body = await eventually(lambda: answer_is(503), timeout=30)
        others = {name: ok for name, ok in body["checks"].items() if name != "kafka"}
        assert body["checks"]["kafka"] is False and all(others.values()), body
    finally:
        await asyncio.to_thread(kafka.set_broker_up)
    await eventually(lambda: answer_is(200), timeout=60)


def leaders_spread(cluster, topic: str, partitions: int = 3) -> None:
    """Create `topic` on a three-broker mock (`three_brokers`) with partition p led by broker p % 3 + 1."""
    cluster.create_topic(topic, partitions, replication_factor=3)
    for partition in range(partitions):
        cluster.set_partition_leader(topic, partition, partition % 3 + 1)


def key_on(partition: int, prefix: str, partitions: int = 3, name=lambda text: text.encode()) -> str:
    """A name beginning with `prefix` whose record key (`name(text)`) goes to `partition`, as producers place keys."""
    return next(
        f"{prefix}-{i}" for i in itertools.count() if partition_for(name(f"{prefix}-{i}"), partitions) == partition
    )


def evaluator_process(
    bootstrap: str, redis_url: str, out: IO[Any] | int, http_port: int = 0, **settings: str
) -> subprocess.Popen:
    """Another evaluator, as `lagwatch run evaluator` in a process of its own, beside a test's in-process one (each
    Faust app in its own process); `settings` as `LAGWATCH__<SECTION>__<KEY>` variables, quick rebalances as
    `make_config`'s; its output to `out` (a file, or subprocess.PIPE: text)."""
    env = dict(
        os.environ, REDIS_URL=redis_url, KAFKA_BOOTSTRAP_SERVERS=bootstrap, LAGWATCH__INGEST__SESSION_TIMEOUT="3"
    )
    env.update({f"LAGWATCH__{k}": v for k, v in settings.items()})
    command = [str(Path(sys.executable).parent / "lagwatch"), "run", "evaluator", "--http-port", str(http_port)]
    return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
