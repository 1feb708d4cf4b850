"""End-to-end ingest throughput: offset-commit records from the offsets topic into Redis windows.

Writes `groups x partitions x rounds` commit records (coordinator format) into `__consumer_offsets` (50 partitions)
on the Kafka mock cluster (its own process), then measures in one run:
  * the ceiling: a bare aiokafka consumer that only reads and counts the records;
  * lagwatch: one `lagwatch run ingest` process, from its first stored record to its last (decode + Redis windows),
    with its peak RSS and the Redis memory used by the windows.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer
from confluent_kafka import Producer
from redis import Redis

from lagwatch.devkit import offsets_encoders as encoders
from lagwatch.devkit.mock_kafka import start_mock_kafka_process, stop_process
from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OFFSETS_TOPIC, offsets_partition_for
from lagwatch.devkit.redis_server import RedisServer

CLUSTER = "local"


def produce(bootstrap: str, groups: int, partitions: int, rounds: int) -> int:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    topics = [f"topic-{t}" for t in range(100)]
    now = int(time.time() * 1000)
    n = 0
    for r in range(rounds):
        for g in range(groups):
            group = f"group-{g}"
            target = offsets_partition_for(group)
            for p in range(partitions):
                key = encoders.encode_offset_commit_key(group, topics[g % 100], p)
                value = encoders.encode_offset_commit_value(r * 100 + p, now - (rounds - r) * 1000)
                while True:
                    try:
                        producer.produce(OFFSETS_TOPIC, value, key, partition=target)
                        break
                    except BufferError:
                        producer.poll(0.05)
                n += 1
        producer.poll(0)
    producer.flush()
    return n


async def bare_consumer(bootstrap: str, expected: int) -> float:
    consumer = AIOKafkaConsumer(
        OFFSETS_TOPIC,
        bootstrap_servers=bootstrap,
        group_id=f"bench-bare-{time.time()}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=5000,
        exclude_internal_topics=False,
    )
    await consumer.start()
    seen, start = 0, None
    try:
        while seen < expected:
            batch = await consumer.getmany(timeout_ms=500, max_records=5000)
            if batch and start is None:
                start = time.perf_counter()
            seen += sum(len(v) for v in batch.values())
    finally:
        await consumer.stop()
    return seen / (time.perf_counter() - start)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run_ingest(
    bootstrap: str, redis: RedisServer, expected: int, *, cluster: str = CLUSTER, env: dict | None = None
) -> dict:
    """One `lagwatch run ingest` process for `cluster` (a fresh name starts a fresh consumer group) until it has
    stored `expected` records; `env` adds settings."""
    env = dict(
        os.environ,
        REDIS_URL=redis.url,
        **{f"LAGWATCH__CLUSTERS__{cluster}__BOOTSTRAP_SERVERS": bootstrap},
        **(env or {}),
    )
    lagwatch = Path(sys.executable).parent / "lagwatch"
    command = [
        str(lagwatch),
        "run",
        "ingest",
        "--cluster",
        cluster,
        "--http-port",
        "0",
        "--log-level",
        "WARNING",
        "--workers",
        "1",
    ]
    proc = subprocess.Popen(command, env=env)
    client = Redis.from_url(redis.url)
    start = end = None
    peak = 0.0
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            done = int(client.hget(f"lw:c:{{{cluster}}}:stats", "records") or 0)
            peak = max(peak, peak_rss_mb(proc.pid))
            if done and start is None:
                start = time.perf_counter()
            if done >= expected:
                end = time.perf_counter()
                break
            time.sleep(0.05)
        stats = {k.decode(): int(v) for k, v in client.hgetall(f"lw:c:{{{cluster}}}:stats").items()}
        memory = int(client.info("memory")["used_memory"])
    finally:
        proc.terminate()
        proc.wait(30)
    return {
        "per_s": round(expected / (end - start)) if end else None,
        "seconds": round((end or 0) - (start or 0), 2),
        "peak_rss_mb": round(peak),
        "redis_used_memory_mb": round(memory / 2**20, 1),
        "stats": stats,
    }


def run(groups: int = 10_000, partitions: int = 10, rounds: int = 20) -> dict:
    with tempfile.TemporaryDirectory() as tmp, RedisServer() as redis:
        redis.start()
        topics = {OFFSETS_TOPIC: DEFAULT_PARTITIONS} | {f"topic-{t}": partitions for t in range(100)}
        proc, control = start_mock_kafka_process(Path(tmp), topics)
        try:
            start = time.perf_counter()
            n = produce(control.bootstrap, groups, partitions, rounds)
            produced = time.perf_counter() - start
            ceiling = asyncio.run(bare_consumer(control.bootstrap, n))
            ingest = run_ingest(control.bootstrap, redis, n)
        finally:
            stop_process(proc)
    windows = groups * partitions
    return {
        "records": n,
        "partition_windows": windows,
        "produce_per_s": round(n / produced),
        "bare_aiokafka_read_per_s": round(ceiling),
        "ingest_per_s": ingest["per_s"],
        "ingest_vs_ceiling": round(ingest["per_s"] / ceiling, 2) if ingest["per_s"] else None,
        "ingest_seconds": ingest["seconds"],
        "ingest_peak_rss_mb": ingest["peak_rss_mb"],
        "redis_used_memory_mb": ingest["redis_used_memory_mb"],
        "redis_bytes_per_partition_window": round(ingest["redis_used_memory_mb"] * 2**20 / windows),
        "appended": ingest["stats"].get("outcome:appended", 0),
    }


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:4]]
    for key, value in run(*args).items():
        print(f"ingest: {key}: {value}")
