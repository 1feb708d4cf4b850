"""The history reprocessing job: months of offset commits replayed with the live rules, on Spark.

    lagwatch spark reprocess --input history/ --output replay/ [--variants variants.yaml] [--master local[*]]
    spark-submit -m lagwatch.spark.reprocess ... (or: spark-submit .../spark/reprocess.py ...)

Steps: read the history (`inputs.py`), count and skip bad rows, give every group the samples of its topics (log ends
and starts, the log probe's answers), replay each (cluster, group) in `mapInArrow` with the shared window and rules
(`replay.py`), and write:

    <output>/timeline/        Parquet: a group's status, total lag, worst partition, explanation and messages
                              skipped by retention at every change
    <output>/events/          Parquet: the status-change events the live evaluator would have published
                              (`event` holds the exact JSON, schema shared/events/schemas/status_event.json,
                              replayed=true)
    <output>/events_jsonl/    the same events as JSON lines
    <output>/report/          Parquet (+ report_csv/): per group time in each status, incidents, max and p95 lag
    <output>/backtest/        Parquet: per variant and group, status changes and notifications
    <output>/backtest.csv, backtest.json   per variant totals: the side-by-side comparison
    <output>/charts/index.html           lag over time with status bands for the groups with most incidents
    <output>/summary.json     what was read, skipped (by reason), replayed and written, and how long it took
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import json
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from lagwatch.shared.notifications.templating.templates import duration
from lagwatch.shared.protocol.group_filter import GroupFilter
from lagwatch.shared.records.history import COLUMN_NAMES, KIND_OFFSET_DELETED, KIND_TOPIC_DELETED, SAMPLE_KINDS
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.config import Config, ConfigError, load_config
from lagwatch.spark.backtest import BacktestError, Variant, load_variants, production_variant
from lagwatch.spark.charts import PAD, WIDTH
from lagwatch.spark.inputs import FORMATS, HistorySource, InputError, bad_row_reason, read_history
from lagwatch.spark.replay import ReplayConfig, TimelineRow
from lagwatch.spark.replay_batches import (
    OUTPUT_COLUMNS,
    OUTPUT_NAMES,
    ROW_BACKTEST,
    ROW_EVENT,
    ROW_REPORT,
    ROW_TIMELINE,
    ReplayJob,
    replay_batches,
)
from lagwatch.spark.spark_types import ddl

HISTORY_NAMES = list(COLUMN_NAMES)
TIMELINE_COLUMNS = list(OUTPUT_NAMES[OUTPUT_NAMES.index("cluster") : OUTPUT_NAMES.index("skipped_messages") + 1])
EVENT_COLUMNS = ["cluster", "group", "seq", "at", "previous_status", "status", "incident_id", "totallag", "event"]
REPORT_COLUMNS = [
    "cluster",
    "group",
    "status",
    *OUTPUT_NAMES[OUTPUT_NAMES.index("observed_ms") : OUTPUT_NAMES.index("commits_stored") + 1],
]
BACKTEST_COUNTS = ["status_changes", "incidents", "notifications", "opens", "updates", "closes", "repeats"]
BACKTEST_COLUMNS = ["variant", "cluster", "group", *BACKTEST_COUNTS, "ms_warn", "ms_err"]


CHART_STEPS = 2 * (WIDTH - 2 * PAD)  # steps per chart: twice the plot's width in pixels, finer is not visible
_STATUS_RANK = ("NOTFOUND", "OK", "WARN", "ERR")  # the order of badness a chart's step shows the worst of


class JobError(ValueError):
    """The job cannot run as asked (bad input, bad options): one clear line for the user."""


@dataclass
class ReprocessOptions:
    input: str
    output: str
    input_format: str = "auto"
    master: str = field(default_factory=lambda: os.environ.get("SPARK_MASTER", "local[*]"))
    tick_seconds: float | None = None  # None: the configured offset-refresh
    variants_file: str | None = None
    charts: int = 50  # groups charted (most incidents first); 0 = none
    shuffle_partitions: int | None = None
    publish_topic: str | None = None  # also publish the replayed events to this topic
    publish_cluster: str | None = None  # of the configured clusters; default: the only one
    future_tolerance_seconds: float = 3600.0  # rows observed further past the job's clock are bad rows (inputs.py)


def _say(message: str, started: float) -> None:
    print(f"[lagwatch reprocess {time.monotonic() - started:7.1f}s] {message}", file=sys.stderr, flush=True)


def tick_ms(options: ReprocessOptions, config: Config) -> int:
    if options.tick_seconds is not None:
        if not (math.isfinite(options.tick_seconds) and options.tick_seconds >= 0.001):  # ticks are whole ms
            raise JobError("--tick must be at least 0.001 seconds")
        return int(options.tick_seconds * 1000)
    refreshes = {c.offset_refresh for c in config.clusters.values()} or {10.0}
    return max(1, int(min(refreshes) * 1000))


def replay_job(options: ReprocessOptions, config: Config, ends: dict[str, int]) -> ReplayJob:
    tick = tick_ms(options, config)
    production = ReplayConfig(window=config.window(), rules=config.rules(), tick_ms=tick)
    variants: list[Variant] = [production_variant(config, tick)]
    if options.variants_file:
        try:
            variants = load_variants(Path(options.variants_file), config, tick)
        except BacktestError as exc:
            raise JobError(str(exc)) from None
    return ReplayJob(production=production, variants=tuple(variants), ends=ends)


def spark_session(options: ReprocessOptions):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers run this interpreter (and lagwatch)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName("lagwatch-reprocess")
        .master(options.master)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "true")
        .config("spark.ui.enabled", "false")
    )
    if options.shuffle_partitions:
        builder = builder.config("spark.sql.shuffle.partitions", str(options.shuffle_partitions))
    elif options.master.startswith("local"):
        builder = builder.config("spark.sql.shuffle.partitions", str(max(4, 4 * (os.cpu_count() or 2))))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def run(options: ReprocessOptions, config: Config, *, spark=None) -> dict[str, Any]:
    """Run the job; returns the summary it also writes to `<output>/summary.json`."""
    started = time.monotonic()
    output = Path(options.output)
    source = HistorySource(options.input, options.input_format)
    try:
        source.check()
    except InputError as exc:
        raise JobError(str(exc)) from None
    check_options(options)
    job = replay_job(options, config, {})  # bad options fail here, before Spark starts
    own_session = spark is None
    spark = spark or spark_session(options)
    try:
        _say(f"reading history from {options.input}", started)
        rows = _read_rows(spark, source, config, int(options.future_tolerance_seconds * 1000))
        job = dataclasses.replace(job, ends=rows.ends)
        _say(f"{rows.good:,} good rows, {sum(rows.bad.values()):,} bad rows skipped {rows.bad or ''}", started)
        variants = ", ".join(v.name for v in job.variants)
        _say(f"replaying (tick {job.production.tick_ms / 1000:g}s, variants: {variants})", started)
        replayed = _replay(spark, rows.frame, job)
        counts = {r["row_type"]: r["count"] for r in replayed.groupBy("row_type").count().collect()}
        _say(f"replayed: {counts}", started)
        backtest = _write_outputs(replayed, job, output)
        _say("outputs written", started)
        charted = _write_charts(replayed, output / "charts", options.charts, rows.ends) if options.charts > 0 else 0
        published = _publish(_rows_of(replayed, ROW_EVENT), options, config) if options.publish_topic else 0
        summary = {
            "input": options.input,
            "rows_good": rows.good,
            "rows_bad": rows.bad,
            "commits_filtered_by_group_filter": rows.filtered,
            "groups": counts.get(ROW_REPORT, 0),
            "timeline_rows": counts.get(ROW_TIMELINE, 0),
            "events": counts.get(ROW_EVENT, 0),
            "events_published": published,
            "groups_charted": charted,
            "tick_ms": job.production.tick_ms,
            "backtest": backtest,
            "seconds": round(time.monotonic() - started, 2),
            "output": str(output),
        }
        (output / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        replayed.unpersist()
        _say(f"done: {summary['groups']:,} groups, {summary['events']:,} status changes -> {output}", started)
        return summary
    finally:
        if own_session:
            spark.stop()


@dataclass
class _Rows:
    frame: Any  # the good rows the group filter keeps (a DataFrame)
    good: int  # good rows read
    bad: dict[str, int]  # bad rows skipped, by reason
    ends: dict[str, int]  # the end of each cluster's history
    filtered: int  # commits the group filter dropped


def _read_rows(spark, source: HistorySource, config: Config, future_tolerance_ms: int) -> _Rows:
    """One pass over the input: bad rows by reason, good rows and the end of each cluster's history."""
    try:
        raw = read_history(spark, source, config)
    except InputError as exc:
        raise JobError(str(exc)) from None
    checked = raw.withColumn("bad_reason", bad_row_reason(now_ms(), future_tolerance_ms))
    stats = checked.groupBy("bad_reason", "cluster").agg(F.count("*").alias("rows"), F.max("observed_at").alias("end"))
    bad: dict[str, int] = {}
    ends: dict[str, int] = {}
    good_rows = 0
    for r in stats.collect():
        if r["bad_reason"] is None:
            ends[r["cluster"]], good_rows = r["end"], good_rows + r["rows"]
        else:
            bad[r["bad_reason"]] = bad.get(r["bad_reason"], 0) + r["rows"]
    good, filtered = _apply_group_filter(checked.where(F.col("bad_reason").isNull()).drop("bad_reason"), config)
    return _Rows(good, good_rows, bad, ends, filtered)


def _replay(spark, good, job: ReplayJob):
    """The replayed rows (timeline, events, report, backtest), one group per task, kept for the several writes."""
    from pyspark import StorageLevel

    commits = good.where(F.col("kind") == "commit")
    group_topics = commits.select("cluster", "group", "topic").distinct()
    # samples (log ends and starts, probe answers), and deletions of topics from Kafka, go to every group of their topic
    every_group = F.col("kind").isin(*SAMPLE_KINDS) | ((F.col("kind") == KIND_TOPIC_DELETED) & F.col("group").isNull())
    samples = good.where(every_group).drop("group").join(group_topics, ["cluster", "topic"])
    # deletions from one group (a topic through the api, a window on a tombstone) go to that group
    from_group = (F.col("kind") == KIND_TOPIC_DELETED) & F.col("group").isNotNull()
    one_group = good.where(from_group | (F.col("kind") == KIND_OFFSET_DELETED))
    deletions = one_group.join(group_topics, ["cluster", "group", "topic"], "left_semi")
    inputs = commits.unionByName(samples).unionByName(deletions)
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    return (
        inputs.repartition(partitions, "cluster", "group")
        .sortWithinPartitions("cluster", "group")
        .select(*HISTORY_NAMES)
        .mapInArrow(functools.partial(replay_batches, job), schema=ddl(OUTPUT_COLUMNS))
        .persist(StorageLevel.MEMORY_AND_DISK)
    )


def _rows_of(replayed, kind: str):
    return replayed.where(F.col("row_type") == kind)


def _write_outputs(replayed, job: ReplayJob, output: Path) -> list[dict[str, Any]]:
    """Writes the timeline, events, report and backtest folders; returns the backtest's summary."""
    _write(_rows_of(replayed, ROW_TIMELINE).select(*TIMELINE_COLUMNS), output / "timeline")
    events = _rows_of(replayed, ROW_EVENT)
    _write(events.select(*EVENT_COLUMNS), output / "events")
    events.orderBy("cluster", "group", "seq").select("event").write.mode("overwrite").text(str(output / "events_jsonl"))
    report = _rows_of(replayed, ROW_REPORT).select(*REPORT_COLUMNS)
    _write(report, output / "report")
    report.coalesce(1).write.mode("overwrite").option("header", "true").csv(str(output / "report_csv"))
    _write(_rows_of(replayed, ROW_BACKTEST).select(*BACKTEST_COLUMNS), output / "backtest")
    backtest = _backtest_summary(_rows_of(replayed, ROW_BACKTEST), [v.name for v in job.variants])
    _write_backtest_files(backtest, output)
    return backtest


def check_options(options: ReprocessOptions) -> None:
    """What Spark would find only after the replay (or inside its tasks): an output that is not a local directory,
    a partition count below one."""
    if options.shuffle_partitions is not None and options.shuffle_partitions < 1:
        raise JobError("--partitions must be >= 1")
    if not (math.isfinite(options.future_tolerance_seconds) and options.future_tolerance_seconds >= 0):
        raise JobError("--future-tolerance must be a number of seconds >= 0")
    if "://" in options.output:  # the summary, backtest and charts are written with local file calls
        raise JobError(f"--output must be a local directory, not {options.output} (copy the outputs from there)")
    path = Path(options.output).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise JobError(f"output {options.output} cannot be a directory: {existing} is a file")


def _apply_group_filter(frame, config: Config):
    """Commits of groups the allow/deny regexes reject are left out, as the ingest leaves them out: each cluster's
    own lists where set (`Config.group_filter`), matched with Python's `re` as the ingest matches them (Spark's
    `rlike` is Java's: no `(?P<name>...)`, ASCII-only `\\w`). Decided once per distinct (cluster, group)."""
    lists = [(config.storage.group_allowlist, config.storage.group_denylist)]
    lists += [(c.group_allowlist, c.group_denylist) for c in config.clusters.values()]
    if not any(allow or deny for allow, deny in lists):
        return frame, 0
    is_commit = F.col("kind") == "commit"
    pairs = frame.where(is_commit).select("cluster", "group").distinct().collect()
    filters = {cluster: _group_filter(config, cluster) for cluster in {p["cluster"] for p in pairs}}
    rejected = [(p["cluster"], p["group"]) for p in pairs if not filters[p["cluster"]].accepts(p["group"])]
    if not rejected:
        return frame, 0
    spark = frame.sparkSession
    marks = spark.createDataFrame(rejected, "cluster string, `group` string").withColumn("_rejected", F.lit(True))
    joined = frame.join(F.broadcast(marks), ["cluster", "group"], "left")
    dropped = is_commit & F.col("_rejected").isNotNull()  # a sample is kept whatever its group column holds
    filtered = joined.where(dropped).count()
    return joined.where(~dropped).drop("_rejected"), filtered


def _group_filter(config: Config, cluster: str) -> GroupFilter:
    """The cluster's filter as its ingest applies it; storage's for a cluster the configuration does not name."""
    if cluster in config.clusters:
        return config.group_filter(cluster)
    return GroupFilter(config.storage.group_allowlist, config.storage.group_denylist)


def _write(frame, path: Path) -> None:
    frame.write.mode("overwrite").parquet(str(path))


def _backtest_summary(rows, variant_names: Sequence[str]) -> list[dict[str, Any]]:
    totals = rows.groupBy("variant").agg(
        F.count("*").alias("groups"),
        *(F.sum(name).alias(name) for name in BACKTEST_COUNTS),
        F.sum(F.when(F.col("opens") > 0, 1).otherwise(0)).alias("groups_alerted"),
        F.sum("ms_warn").alias("ms_warn"),
        F.sum("ms_err").alias("ms_err"),
    )
    by_name = {r["variant"]: r.asDict() for r in totals.collect()}
    return [
        {k: (int(v) if isinstance(v, int) else v) for k, v in by_name[n].items()} for n in variant_names if n in by_name
    ]


def _write_backtest_files(summary: list[dict[str, Any]], output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    (output / "backtest.json").write_text(json.dumps(summary, indent=2) + "\n")
    if summary:
        with (output / "backtest.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(summary[0]))
            writer.writeheader()
            writer.writerows(summary)


def _write_charts(replayed, directory: Path, limit: int, ends: dict[str, int]) -> int:
    from lagwatch.spark.charts import GroupChart, page

    reports = (
        _rows_of(replayed, ROW_REPORT)
        .orderBy(F.desc("incidents"), F.desc("max_totallag"), "cluster", "group")
        .limit(limit)
        .collect()
    )
    chosen = {(r["cluster"], r["group"]): r for r in reports}
    if not chosen:
        return 0
    rows = _chart_steps(replayed, list(chosen), ends)
    charts = []
    for (cluster, group), report in chosen.items():  # a replay runs to the end of its cluster's history
        charts.append(GroupChart(cluster, group, rows.get((cluster, group), []), ends[cluster], chart_summary(report)))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "index.html").write_text(page(charts))
    return len(charts)


def _chart_steps(replayed, groups: list[tuple[str, str]], ends: dict[str, int]) -> dict[tuple[str, str], list]:
    """The charted groups' timelines, cut in Spark to at most CHART_STEPS steps each over their span: a busy group
    has a row per tick, too many to collect or to draw. A step starts at its first row and shows
    its worst status and largest total lag (a short incident stays visible)."""
    keys = [F.struct(F.lit(c).alias("c"), F.lit(g).alias("g")) for c, g in groups]
    timeline = replayed.where((F.col("row_type") == ROW_TIMELINE) & F.struct("cluster", "group").isin(*keys))
    first = timeline.groupBy("cluster", "group").agg(F.min("at").alias("first"))
    end = F.create_map(*(F.lit(x) for cluster, at in ends.items() for x in (cluster, at)))[F.col("cluster")]
    span = F.greatest(end - F.col("first"), F.lit(1))
    step = F.least(F.floor((F.col("at") - F.col("first")) * CHART_STEPS / span), F.lit(CHART_STEPS - 1)).alias("step")
    rank = F.array_position(F.array(*(F.lit(s) for s in _STATUS_RANK)), F.col("status"))
    steps = (
        timeline.join(first, ["cluster", "group"])
        .groupBy("cluster", "group", step)
        .agg(F.min("at").alias("at"), F.max("totallag").alias("totallag"), F.max(rank).alias("rank"))
        .orderBy("cluster", "group", "at")
        .collect()
    )
    rows: dict[tuple[str, str], list[TimelineRow]] = {}
    for r in steps:
        status = _STATUS_RANK[r["rank"] - 1]
        rows.setdefault((r["cluster"], r["group"]), []).append(TimelineRow(r["at"], status, r["totallag"]))
    return rows


def chart_summary(report: Mapping[str, Any]) -> str:
    """The line above a group's chart: its incidents, time in each status (in days, hours, minutes or seconds), its
    lag."""
    spent = ", ".join(f"{s} {duration((report[f'ms_{s.lower()}'] or 0) / 1000) or '0s'}" for s in ("OK", "WARN", "ERR"))
    lag = f"max total lag {report['max_totallag']:,}, p95 {report['p95_totallag']:,}"
    return f"{report['incidents']} incident(s); {spent}; {lag}"


def _publish(events, options: ReprocessOptions, config: Config) -> int:
    """Produce the replayed events (marked `replayed`) to a topic of a configured cluster, keyed like the live ones."""
    from confluent_kafka import Producer

    from lagwatch.shared.events.status_event import record_key
    from lagwatch.shared.runtime.kafka_client import librdkafka_config

    try:
        name = options.publish_cluster or config.only_cluster()
        cluster = config.cluster(name)
        connection = librdkafka_config(cluster, name)  # the cluster's TLS and SASL login
    except ConfigError as exc:
        raise JobError(str(exc)) from None
    topic = options.publish_topic
    assert topic is not None  # called only when there is one
    producer = Producer({**connection, "linger.ms": 50})
    sent = 0
    for row in events.orderBy("cluster", "group", "seq").select("cluster", "group", "event").toLocalIterator():
        producer.produce(topic, row["event"].encode(), key=record_key(row["cluster"], row["group"]))
        producer.poll(0)
        sent += 1
    if producer.flush(30) > 0:
        raise JobError(f"could not publish every replayed event to {options.publish_topic} within 30 s")
    return sent


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input",
        required=True,
        help="history: a file or directory (Parquet/JSON), or kafka://<servers or a configured cluster>/<topic>",
    )
    parser.add_argument("--output", required=True, help="local directory for the outputs")
    parser.add_argument("--format", dest="input_format", default="auto", choices=FORMATS)
    parser.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[*]"), help="Spark master URL")
    parser.add_argument("--tick", dest="tick_seconds", type=float, help="evaluation tick, seconds (offset-refresh)")
    parser.add_argument("--variants", dest="variants_file", help="backtest variants (YAML, see spark/backtest.py)")
    parser.add_argument("--charts", type=int, default=50, help="groups to chart (most incidents first; 0 = none)")
    parser.add_argument("--partitions", dest="shuffle_partitions", type=int, help="spark.sql.shuffle.partitions")
    parser.add_argument("--publish-topic", help="also publish the replayed events to this Kafka topic")
    parser.add_argument("--publish-cluster", help="configured cluster to publish to (default: the only one)")
    parser.add_argument("--config", help="lagwatch configuration file (rules and storage options)")
    parser.add_argument(
        "--future-tolerance",
        dest="future_tolerance_seconds",
        type=float,
        help="seconds a row may be observed past the job's clock before it is a bad row (default 3600)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lagwatch spark reprocess", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    names = ReprocessOptions.__dataclass_fields__
    try:
        config = load_config(args.config)
        options = ReprocessOptions(**{k: v for k, v in vars(args).items() if k in names and v is not None})
        if options.charts < 0:
            raise JobError("--charts must be >= 0")
        summary = run(options, config)
    except (JobError, ConfigError) as exc:
        print(f"lagwatch spark reprocess: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: summary[k] for k in ("groups", "events", "rows_good", "rows_bad", "seconds", "output")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
