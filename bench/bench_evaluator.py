"""Evaluator: detection latency (commit record -> status-change event on the topic) and sweep cost.

Setup: the Kafka mock cluster in its own process, a fresh redis-server, `lagwatch run ingest` and
`lagwatch run evaluator` as processes, 10k groups x 10 partitions watched, plus probe groups on a topic with lag.
* Latency: each probe writes one commit that rewinds its group (OK -> ERR) and waits for the event on the status
  topic; p50/p99 over the probes. The sweep interval is long, so this is the event-driven path.
* Sweep cost: evaluating all 10k groups from Redis with the shared rules (in this process, no transitions).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer
from bench_ingest import produce
from confluent_kafka import Producer
from redis.asyncio import Redis

from lagwatch.devkit.mock_kafka import start_mock_kafka_process, stop_process
from lagwatch.devkit.offsets_topic_writer import (
    DEFAULT_PARTITIONS,
    OFFSETS_TOPIC,
    OffsetCommitSpec,
    OffsetsTopicWriter,
)
from lagwatch.devkit.redis_server import RedisServer
from lagwatch.services.evaluator.evaluation import GroupEvaluator
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.protocol.types import RuleConfig, WindowConfig
from lagwatch.shared.windows.store import WindowStore

CLUSTER = "local"
PROBE_TOPIC = "probe"


class NoPublisher:
    async def publish(self, items):
        return set()


def lagwatch_process(service: str, env: dict) -> subprocess.Popen:
    lagwatch = Path(sys.executable).parent / "lagwatch"
    log = Path(tempfile.gettempdir()) / f"lagwatch-bench-{service}.log"
    return subprocess.Popen(
        [str(lagwatch), "run", service, "--http-port", "0", "--log-level", "INFO", "--log-file", str(log)],
        env=env,
    )


async def read_events(consumer: AIOKafkaConsumer, until, timeout: float) -> list[dict]:
    events: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until(events):
        for messages in (await consumer.getmany(timeout_ms=200)).values():
            events += [json.loads(m.value) | {"_received": time.time()} for m in messages]
    return events


async def measure(bootstrap: str, redis_url: str, groups: int, probes: int) -> dict:
    consumer = AIOKafkaConsumer(
        "lagwatch.status",
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        group_id=f"bench-{time.time()}",
        fetch_max_wait_ms=20,
    )
    await consumer.start()
    try:
        start = time.perf_counter()
        events = await read_events(consumer, lambda ev: len(ev) >= groups + probes, timeout=600)
        first_sweep = time.perf_counter() - start
        latencies = []
        async with OffsetsTopicWriter(bootstrap) as writer:
            for i in range(probes):
                sent = time.time()
                await writer.commit(f"probe-{i}", PROBE_TOPIC, 0, 5)  # below its last commit: REWIND, ERR
                got = await read_events(consumer, lambda ev, g=f"probe-{i}": any(e["group"] == g for e in ev), 30)
                hits = [e for e in got if e["group"] == f"probe-{i}"]
                if not hits:
                    raise RuntimeError(
                        f"no event for probe-{i} within 30 s (read {len(got)} others, {len(events)} before)"
                    )
                hit = hits[0]
                latencies.append(hit["_received"] - sent)
        return {
            "initial_events": len(events),
            "initial_events_seconds": round(first_sweep, 1),
            "latency_p50_ms": round(statistics.median(latencies) * 1000, 1),
            "latency_p99_ms": round(sorted(latencies)[int(len(latencies) * 0.99) - 1] * 1000, 1),
            "latency_max_ms": round(max(latencies) * 1000, 1),
        }
    finally:
        await consumer.stop()


async def sweep_cost(redis_url: str, groups: list[str]) -> float:
    redis = Redis.from_url(redis_url)
    store = WindowStore(redis, WindowConfig())
    evaluator = GroupEvaluator(CLUSTER, store, StatusStore(redis, 604_800_000), NoPublisher(), RuleConfig())
    start = time.perf_counter()
    for i in range(0, len(groups), 500):
        await evaluator.evaluate(groups[i : i + 500])
    elapsed = time.perf_counter() - start
    await redis.aclose()
    return elapsed


def write_probe_history(bootstrap: str, probes: int) -> None:
    """Probe groups: three commits each on a topic whose log end is far ahead (lag shrinking: OK)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10})
    for _ in range(1000):
        producer.produce(PROBE_TOPIC, b"x", partition=0)
    producer.flush()

    async def commits():
        now = int(time.time() * 1000)
        async with OffsetsTopicWriter(bootstrap) as writer:
            await writer.commits(
                [
                    OffsetCommitSpec(f"probe-{i}", PROBE_TOPIC, 0, off, timestamp=now - (3 - k) * 600_000)
                    for i in range(probes)
                    for k, off in enumerate([10, 20, 30])
                ]
            )

    asyncio.run(commits())


def run(groups: int = 10_000, partitions: int = 10, probes: int = 100) -> dict:
    with tempfile.TemporaryDirectory() as tmp, RedisServer() as redis:
        redis.start()
        topics = {OFFSETS_TOPIC: DEFAULT_PARTITIONS, "lagwatch.changes": 12, "lagwatch.status": 12, PROBE_TOPIC: 1}
        topics |= {f"topic-{t}": partitions for t in range(100)}
        kafka, control = start_mock_kafka_process(Path(tmp), topics)
        env = dict(
            os.environ,
            REDIS_URL=redis.url,
            KAFKA_BOOTSTRAP_SERVERS=control.bootstrap,
            LAGWATCH__EVALUATOR__SWEEP_INTERVAL="30",
        )
        services = []
        try:
            produce(control.bootstrap, groups, partitions, rounds=3)
            write_probe_history(control.bootstrap, probes)
            services = [lagwatch_process("ingest", env), lagwatch_process("evaluator", env)]
            result = asyncio.run(measure(control.bootstrap, redis.url, groups, probes))
            for proc in services:
                proc.terminate()
                proc.wait(30)
            names = [f"group-{g}" for g in range(groups)]
            result["sweep_seconds_10k_groups"] = round(asyncio.run(sweep_cost(redis.url, names)), 2)
        finally:
            for proc in services:
                if proc.poll() is None:
                    proc.kill()
            stop_process(kafka)
    return {"groups": groups, "partitions_per_group": partitions, "probes": probes, **result}


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:4]]
    for key, value in run(*args).items():
        print(f"evaluator: {key}: {value}")
