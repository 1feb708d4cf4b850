"""History reprocessing: commits replayed per second by the Spark job on `local[2]`, for 1M, 5M and 10M commits,
against the same replay done by one plain-Python process in the same run.

The histories are generated (`spark/synthetic_history.py`: every scenario, 4 partitions per group, 20 commits per
partition, a log-end sample per partition every 10 s, so about as many samples as commits) and written as the
archiver writes them. Both sides read the same Parquet files and run the same per-group code (`replay_rows`:
timeline, events, report and the production backtest row); the Spark side also writes every output.

    python bench/bench_spark.py [--sizes 1000000 5000000 10000000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.dataset as ds

from lagwatch.shared.config import load_config
from lagwatch.shared.history import KIND_COMMIT
from lagwatch.shared.history_files import HistoryFileWriter
from lagwatch.spark.backtest import production_variant
from lagwatch.spark.replay import CommitInput, ReplayConfig, SampleInput
from lagwatch.spark.replay_batches import FrameJob, replay_rows
from lagwatch.spark.synthetic_history import HistoryShape, history_records

PARTITIONS, COMMITS_PER_PARTITION = 4, 20
SIZES = (1_000_000, 5_000_000, 10_000_000)


def shape_for(commits: int) -> HistoryShape:
    return HistoryShape(
        groups=commits // (PARTITIONS * COMMITS_PER_PARTITION),
        partitions=PARTITIONS,
        commits_per_partition=COMMITS_PER_PARTITION,
    )


def generate(shape: HistoryShape, root: Path) -> tuple[int, float]:
    started = time.perf_counter()
    writer = HistoryFileWriter(str(root), flush_rows=1_000_000)
    step = 1000
    for first in range(0, shape.groups, step):
        if writer.add(history_records(shape, first, step)):
            writer.flush()
    writer.flush()
    return writer.rows_written, time.perf_counter() - started


def plain_python(root: Path, job: FrameJob) -> dict:
    """One process: read the files, group by group, replay each: what the Spark job does, without Spark."""
    started = time.perf_counter()
    table = ds.dataset(root, format="parquet", partitioning="hive").to_table()
    columns = {name: table.column(name).to_pylist() for name in table.column_names}
    read_s = time.perf_counter() - started
    commits: dict[tuple[str, str], list[CommitInput]] = {}
    samples: dict[tuple[str, str], list[SampleInput]] = {}
    rows = zip(
        columns["kind"],
        columns["cluster"],
        columns["group"],
        columns["topic"],
        columns["partition"],
        columns["offset"],
        columns["commit_timestamp"],
        columns["order"],
        columns["observed_at"],
        strict=True,
    )
    for kind, cluster, group, topic, partition, offset, ts, order, observed in rows:
        if kind == KIND_COMMIT:
            commits.setdefault((cluster, group), []).append(CommitInput(topic, partition, offset, ts, order, observed))
        else:
            samples.setdefault((cluster, topic), []).append(SampleInput(topic, partition, offset, observed))
    del columns, table
    output_rows = 0
    n = 0
    for (cluster, group), group_commits in commits.items():
        topics = {c.topic for c in group_commits}
        group_samples = [s for t in topics for s in samples.get((cluster, t), [])]
        output_rows += len(replay_rows(cluster, group, group_commits, group_samples, job))
        n += len(group_commits)
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 1), "read_seconds": round(read_s, 1), "commits": n, "output_rows": output_rows}


def spark_job(root: Path, out: Path) -> dict:
    from lagwatch.spark.reprocess import ReprocessOptions, run

    started = time.perf_counter()
    summary = run(
        ReprocessOptions(input=str(root), output=str(out), master="local[2]", charts=0),
        load_config(None, env={}),
    )
    return {
        "seconds": round(time.perf_counter() - started, 1),
        "groups": summary["groups"],
        "events": summary["events"],
    }


def run(sizes: tuple[int, ...] = SIZES) -> dict:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    config = load_config(None, env={})
    job = FrameJob(ReplayConfig(), (production_variant(config, 10_000),), {})
    results = {}
    for size in sizes:
        shape = shape_for(size)
        work = Path(tempfile.mkdtemp(prefix="lagwatch-bench-spark-"))
        try:
            rows, gen_s = generate(shape, work / "history")
            ends = {shape.cluster: shape.end_ms}
            plain = plain_python(work / "history", FrameJob(job.production, job.variants, ends))
            spark = spark_job(work / "history", work / "out")
            commits = plain["commits"]
            results[f"{size:,} commits"] = {
                "groups": shape.groups,
                "history_rows": rows,
                "generate_seconds": round(gen_s, 1),
                "plain_python_seconds": plain["seconds"],
                "plain_python_commits_per_s": round(commits / plain["seconds"]),
                "spark_local2_seconds": spark["seconds"],
                "spark_local2_commits_per_s": round(commits / spark["seconds"]),
                "spark_vs_plain": round(plain["seconds"] / spark["seconds"], 2),
                "events": spark["events"],
            }
            print(json.dumps({f"{size:,}": results[f"{size:,} commits"]}), flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    results["driver_max_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    print(json.dumps(run(tuple(parser.parse_args().sizes)), indent=2))
