"""The cost of keeping history for the Spark replay: ingest throughput with `history.enabled` against without (same
records, same run), and the archiver's throughput from the history topic to Parquet files.

    python bench/bench_history.py [groups partitions rounds]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
from bench_ingest import peak_rss_mb, produce, run_ingest

from lagwatch.devkit.mock_kafka import start_mock_kafka_process, stop_process
from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OFFSETS_TOPIC
from lagwatch.devkit.redis_server import RedisServer

HISTORY_TOPIC = "lagwatch.history"


def rows_archived(root: Path) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in root.rglob("*.parquet"))


def run_archiver(bootstrap: str, redis: RedisServer, root: Path, expected: int, cluster: str) -> dict:
    env = dict(
        os.environ,
        REDIS_URL=redis.url,
        **{f"LAGWATCH__CLUSTERS__{cluster}__BOOTSTRAP_SERVERS": bootstrap},
        LAGWATCH__HISTORY__PATH=str(root),
        LAGWATCH__HISTORY__FLUSH_INTERVAL="1",
    )
    lagwatch = Path(sys.executable).parent / "lagwatch"
    command = [str(lagwatch), "run", "archiver", "--cluster", cluster, "--http-port", "0", "--log-level", "WARNING"]
    proc = subprocess.Popen(command, env=env)
    start, done, peak = time.perf_counter(), 0, 0.0
    try:
        deadline = time.monotonic() + 600
        while done < expected and time.monotonic() < deadline:
            time.sleep(0.5)
            peak = max(peak, peak_rss_mb(proc.pid))
            done = rows_archived(root)
        seconds = time.perf_counter() - start
    finally:
        proc.terminate()
        proc.wait(30)
    size = sum(f.stat().st_size for f in root.rglob("*.parquet"))
    return {
        "archiver_rows": done,
        "archiver_per_s": round(done / seconds),
        "archiver_peak_rss_mb": round(peak),
        "parquet_bytes_per_record": round(size / max(done, 1), 1),
    }


def run(groups: int = 5_000, partitions: int = 10, rounds: int = 10) -> dict:
    with tempfile.TemporaryDirectory() as tmp, RedisServer() as redis:
        redis.start()
        topics = {OFFSETS_TOPIC: DEFAULT_PARTITIONS, HISTORY_TOPIC: 12} | {f"topic-{t}": partitions for t in range(100)}
        proc, control = start_mock_kafka_process(Path(tmp) / "kafka", topics)
        try:
            n = produce(control.bootstrap, groups, partitions, rounds)
            without = run_ingest(control.bootstrap, redis, n, cluster="plain")
            with_history = run_ingest(
                control.bootstrap, redis, n, cluster="archived", env={"LAGWATCH__HISTORY__ENABLED": "true"}
            )
            archived = run_archiver(control.bootstrap, redis, Path(tmp) / "history", n, "archived")
        finally:
            stop_process(proc)
    return {
        "records": n,
        "ingest_per_s_without_history": without["per_s"],
        "ingest_per_s_with_history": with_history["per_s"],
        "history_cost": round(1 - with_history["per_s"] / without["per_s"], 2) if without["per_s"] else None,
        "ingest_peak_rss_mb_with_history": with_history["peak_rss_mb"],
        **archived,
    }


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:4]]
    for key, value in run(*args).items():
        print(f"history: {key}: {value}")
