"""The bridge between Spark and the pure replay: Arrow record batches of history in, sorted by (cluster, group),
and every output row of each group out (timeline, events, report, backtest counts) as record batches of the wide
shape `OUTPUT_COLUMNS` describes. Spark calls `replay_batches` inside `mapInArrow` once per partition.

Why not `applyInPandas` grouped by group: it builds a pandas frame per group, and at 100k+ groups that fixed cost
outweighed the replay itself. Here a partition streams through once; a group is cut out of the sorted rows (it may
span batches) and replayed as plain tuples. Nothing here imports Spark, so it is testable alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lagwatch.shared.events.event_codec import present
from lagwatch.shared.events.status_event import fitted
from lagwatch.shared.records.history import PROBE_COLUMNS
from lagwatch.spark.backtest import Variant, count_notifications
from lagwatch.spark.replay import (
    CommitInput,
    Other,
    ReplayConfig,
    ReplayResult,
    history_input,
    replay_group,
)
from lagwatch.spark.report import group_report

ROW_TIMELINE, ROW_EVENT, ROW_REPORT, ROW_BACKTEST = "timeline", "event", "report", "backtest"

# (name, Spark SQL type): the wide output; each row type fills its own columns and leaves the rest null
OUTPUT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("row_type", "string"),
    ("cluster", "string"),
    ("group", "string"),
    ("variant", "string"),
    # timeline
    ("at", "long"),
    ("status", "string"),
    ("totallag", "long"),
    ("partition_count", "int"),
    ("bad_partitions", "int"),
    ("maxlag_topic", "string"),
    ("maxlag_partition", "int"),
    ("maxlag", "long"),
    ("max_lag_seconds", "double"),
    ("max_lag_seconds_lower_bound", "boolean"),
    ("catchup_seconds", "double"),
    ("lag_growth_per_second", "double"),
    ("explanation", "string"),
    ("retention_risk_seconds", "double"),
    ("skipped_messages", "long"),
    # events
    ("seq", "int"),
    ("previous_status", "string"),
    ("incident_id", "string"),
    ("event", "string"),
    # report and backtest
    ("observed_ms", "long"),
    ("ms_notfound", "long"),
    ("ms_ok", "long"),
    ("ms_warn", "long"),
    ("ms_err", "long"),
    ("status_changes", "int"),
    ("incidents", "int"),
    ("open_incident", "boolean"),
    ("incident_mean_ms", "double"),
    ("incident_max_ms", "long"),
    ("max_totallag", "long"),
    ("p95_totallag", "long"),
    ("commits", "long"),
    ("commits_stored", "long"),
    ("notifications", "int"),
    ("opens", "int"),
    ("updates", "int"),
    ("closes", "int"),
    ("repeats", "int"),
)
OUTPUT_NAMES = tuple(name for name, _ in OUTPUT_COLUMNS)
_ARROW = {"long": pa.int64(), "int": pa.int32(), "double": pa.float64(), "boolean": pa.bool_(), "string": pa.string()}


@dataclass(frozen=True)
class ReplayJob:
    """What every group's replay needs: picklable, shipped to the Spark workers with each task."""

    production: ReplayConfig
    variants: Sequence[Variant]  # backtest variants (may include "production")
    ends: Mapping[str, int]  # cluster -> end of its history (ms): quiet groups are evaluated until then


def group_rows(
    cluster: str, group: str, commits: list[CommitInput], samples: list[Other], job: ReplayJob
) -> Iterator[dict[str, Any]]:
    """A group's output rows, one at a time: a busy group over months has a timeline row per tick, far too many to
    hold at once."""
    end = job.ends.get(cluster)
    result = replay_group(cluster, group, commits, samples, job.production, end_ms=end)
    yield from _timeline_rows(cluster, group, result)
    yield from _event_rows(cluster, group, result)
    # the archive is at-least-once: a commit read twice is one commit (its `order` tells)
    yield _report_row(cluster, group, result, len({c.order for c in commits}))
    for variant in job.variants:
        same = variant.replay == job.production
        replayed = result if same else replay_group(cluster, group, commits, samples, variant.replay, end_ms=end)
        yield _backtest_row(cluster, group, variant, replayed)


def replay_batches(
    job: ReplayJob, batches: Iterable[pa.RecordBatch], *, rows_per_batch: int = 20_000
) -> Iterator[pa.RecordBatch]:
    """`mapInArrow` entry point: history rows sorted by (cluster, group) in, output rows out, at most
    `rows_per_batch` a batch (one group may fill many)."""
    schema = output_schema()
    out: list[dict[str, Any]] = []
    for (cluster, group), commits, samples in _groups(batches):
        for row in group_rows(cluster, group, commits, samples, job):
            out.append(row)
            if len(out) >= rows_per_batch:
                yield pa.RecordBatch.from_pylist(out, schema=schema)
                out = []
    if out:
        yield pa.RecordBatch.from_pylist(out, schema=schema)


def _groups(
    batches: Iterable[pa.RecordBatch],
) -> Iterator[tuple[tuple[str, str], list[CommitInput], list[Other]]]:
    """Consecutive rows of one (cluster, group), as replay inputs; a group may continue into the next batch."""
    key: tuple[str, str] | None = None
    commits: list[CommitInput] = []
    samples: list[Other] = []
    for batch in batches:
        c = batch.to_pydict()
        rows = zip(
            c["cluster"],
            c["group"],
            c["kind"],
            c["topic"],
            c["partition"],
            c["offset"],
            c["commit_timestamp"],
            c["order"],
            c["observed_at"],
            *(c[name] for name in PROBE_COLUMNS),
            strict=True,
        )
        for cluster, group, kind, topic, partition, offset, timestamp, order, observed_at, *probed in rows:
            if (cluster, group) != key:
                if key is not None:
                    yield key, commits, samples
                key, commits, samples = (cluster, group), [], []
            item = history_input(kind, topic, partition, offset, timestamp, order, observed_at, *probed)
            if isinstance(item, CommitInput):
                commits.append(item)
            else:
                samples.append(item)
    if key is not None:
        yield key, commits, samples


def output_schema() -> pa.Schema:
    return pa.schema([pa.field(name, _ARROW[kind]) for name, kind in OUTPUT_COLUMNS])


def _timeline_rows(cluster: str, group: str, result: ReplayResult) -> Iterator[dict[str, Any]]:
    base = {"row_type": ROW_TIMELINE, "cluster": cluster, "group": group}
    return ({**base, **row._asdict()} for row in result.timeline)


def _event_rows(cluster: str, group: str, result: ReplayResult) -> list[dict[str, Any]]:
    return [
        {
            "row_type": ROW_EVENT,
            "cluster": cluster,
            "group": group,
            "at": e.evaluated_at,
            "status": e.status,
            "totallag": e.totallag,
            "max_lag_seconds": present(e.max_lag_seconds),
            "max_lag_seconds_lower_bound": e.max_lag_seconds_lower_bound,
            "seq": e.seq,
            "previous_status": e.previous_status,
            "incident_id": e.incident_id,
            "event": fitted(e)[0].decode(),  # as the evaluator publishes it: under Kafka's record size
        }
        for e in result.events
    ]


def _report_row(cluster: str, group: str, result: ReplayResult, commits: int) -> dict[str, Any]:
    report = group_report(result)
    stored = sum(n for name, n in result.outcomes.items() if name in ("APPENDED", "INSERTED", "MERGED"))
    return {
        "row_type": ROW_REPORT,
        "cluster": cluster,
        "group": group,
        "status": result.timeline[-1].status if result.timeline else None,
        **report._asdict(),
        "commits": commits,
        "commits_stored": stored,
    }


def _backtest_row(cluster: str, group: str, variant: Variant, result: ReplayResult) -> dict[str, Any]:
    report = group_report(result)
    counts = count_notifications(variant.policy, result.events, result.last_at or 0)
    return {
        "row_type": ROW_BACKTEST,
        "cluster": cluster,
        "group": group,
        "variant": variant.name,
        "ms_warn": report.ms_warn,
        "ms_err": report.ms_err,
        **counts._asdict(),
    }
