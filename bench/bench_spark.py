"""History reprocessing: commits replayed per second by the Spark job on `local[2]`, for 1M, 5M and 10M commits,
against the same replay done by one plain-Python process in the same run.

The histories are generated (`spark/synthetic_history.py`: every scenario, 4 partitions per group, 20 commits per
partition, a log-end sample per partition every 10 s, so about as many samples as commits) and written as the
archiver writes them. Both sides read the same Parquet files and run the same per-group code (`group_rows`:
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

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from lagwatch.shared.records.history import COLUMN_NAMES, KIND_COMMIT
from lagwatch.shared.records.history_files import HistoryFileWriter
from lagwatch.shared.runtime.config import load_config
from lagwatch.spark.backtest import production_variant
from lagwatch.spark.replay import ReplayConfig
from lagwatch.spark.replay_batches import ReplayJob, replay_batches
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


def plain_python(root: Path, job: ReplayJob) -> dict:
    """One process, the same steps as the job without Spark: read the files, give each group its topics' samples,
    sort by group, and stream the rows through the same `replay_batches`."""
    started = time.perf_counter()
    table = ds.dataset(root, format="parquet", partitioning="hive").to_table(columns=list(COLUMN_NAMES))
    commits = table.filter(pc.field("kind") == KIND_COMMIT)
    group_topics = commits.select(["cluster", "group", "topic"]).group_by(["cluster", "group", "topic"]).aggregate([])
    samples = (
        table.filter(pc.field("kind") != KIND_COMMIT).drop_columns(["group"]).join(group_topics, ["cluster", "topic"])
    )
    inputs = pa.concat_tables([commits, samples.select(list(COLUMN_NAMES)).cast(commits.schema)])
    inputs = inputs.sort_by([("cluster", "ascending"), ("group", "ascending")])
    ends = table.group_by("cluster").aggregate([("observed_at", "max")]).to_pylist()  # as the job finds them
    job = ReplayJob(job.production, job.variants, {e["cluster"]: e["observed_at_max"] for e in ends})
    read_s = time.perf_counter() - started
    output_rows = sum(batch.num_rows for batch in replay_batches(job, inputs.to_batches(max_chunksize=65_536)))
    seconds = time.perf_counter() - started
    return {
        "seconds": round(seconds, 1),
        "read_seconds": round(read_s, 1),
        "commits": commits.num_rows,
        "output_rows": output_rows,
    }


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
    job = ReplayJob(ReplayConfig(), (production_variant(config, 10_000),), {})
    results = {}
    for size in sizes:
        shape = shape_for(size)
        work = Path(tempfile.mkdtemp(prefix="lagwatch-bench-spark-"))
        try:
            rows, gen_s = generate(shape, work / "history")
            plain = plain_python(work / "history", job)
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
