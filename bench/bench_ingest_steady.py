"""The ingest at a steady commit rate: CPU per commit and batches per second when it keeps up, not catching up.

A cluster's consumers commit all day at some rate; the ingest reads the offsets topic as the commits come. This
writes coordinator-format commits at RATE records/s for SECONDS (GROUPS groups x 4 partitions, in turn) into the
Kafka mock (its own process), with one `lagwatch run ingest` worker and a fresh redis-server running, and prints:
the ingest's and redis-server's CPU over the steady part (% of one core, and µs per commit) and the ingest's
batches per second (its `batches` count in Redis). How a worker trades latency for batching shows here: a batch
per fetch costs a Redis round trip, a notice publish and a commit each.

Usage: `python bench/bench_ingest_steady.py [rate ...]` (default 2000 20000 records/s).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from confluent_kafka import Producer
from redis import Redis

from lagwatch.devkit import offsets_encoders as encoders
from lagwatch.devkit.mock_kafka import start_mock_kafka_process, stop_process
from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OFFSETS_TOPIC, offsets_partition_for
from lagwatch.devkit.redis_server import RedisServer
from lagwatch.shared.protocol import keys

CLUSTER = "steady"
GROUPS, PARTITIONS = 2000, 4
WARM_UP_S, SECONDS = 3.0, 15.0
TICK_S = 0.01


def write_steadily(bootstrap: str, rate: int, seconds: float) -> int:
    """Commits at `rate` records/s, a tick's worth every TICK_S; returns how many were written."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    per_tick, n, started = max(1, int(rate * TICK_S)), 0, time.monotonic()
    while time.monotonic() - started < seconds:
        now = int(time.time() * 1000)
        for _ in range(per_tick):
            group = f"group-{(n // PARTITIONS) % GROUPS}"
            key = encoders.encode_offset_commit_key(group, "orders", n % PARTITIONS)
            producer.produce(
                OFFSETS_TOPIC, encoders.encode_offset_commit_value(n, now), key, partition=offsets_partition_for(group)
            )
            n += 1
        producer.poll(0)
        time.sleep(max(0.0, started + (n / rate) - time.monotonic()))
    producer.flush(30)
    return n


def measure(rate: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp, RedisServer() as redis:
        redis.start()
        kafka, control = start_mock_kafka_process(Path(tmp), {OFFSETS_TOPIC: DEFAULT_PARTITIONS, "orders": PARTITIONS})
        env = dict(
            os.environ, REDIS_URL=redis.url, **{f"LAGWATCH__CLUSTERS__{CLUSTER}__BOOTSTRAP_SERVERS": control.bootstrap}
        )
        command = [str(Path(sys.executable).parent / "lagwatch"), "run", "ingest", "--cluster", CLUSTER]
        command += ["--http-port", "0", "--log-level", "WARNING", "--workers", "1"]
        ingest = subprocess.Popen(command, env=env)
        client = Redis.from_url(redis.url)
        try:
            write_steadily(control.bootstrap, rate, WARM_UP_S)  # groups loaded, consumer settled
            procs = {"ingest": psutil.Process(ingest.pid), "redis-server": psutil.Process(redis.pid)}
            cpu0 = {k: sum(p.cpu_times()[:2]) for k, p in procs.items()}
            batches0 = int(client.hget(keys.ingest_stats(CLUSTER), "batches") or 0)
            started = time.monotonic()
            written = write_steadily(control.bootstrap, rate, SECONDS)
            elapsed = time.monotonic() - started
            time.sleep(0.5)
            cpu = {k: sum(p.cpu_times()[:2]) - cpu0[k] for k, p in procs.items()}
            batches = int(client.hget(keys.ingest_stats(CLUSTER), "batches") or 0) - batches0
        finally:
            ingest.terminate()
            ingest.wait(30)
            stop_process(kafka)
    out = {"rate": rate, "written": written, "batches_per_s": round(batches / elapsed, 1)}
    for name, seconds in cpu.items():
        out[f"{name}_core_pct"] = round(100 * seconds / elapsed, 1)
        out[f"{name}_us_per_commit"] = round(1e6 * seconds / written, 1)
    return out


def run(rates: tuple[int, ...] = (2000, 20000)) -> dict:
    """Every rate's numbers, flat: `<name>_at_<rate>`."""
    out = {}
    for rate in rates:
        out |= {f"{name}_at_{rate}": value for name, value in measure(rate).items() if name != "rate"}
    return out


if __name__ == "__main__":
    for rate in [int(a) for a in sys.argv[1:]] or [2000, 20000]:
        print("ingest steady:", measure(rate), flush=True)
