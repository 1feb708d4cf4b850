"""The bridge between Spark and the pure replay: one (cluster, group)'s history as a pandas frame in, every output
row of that group out (timeline, events, report, backtest counts), in one wide frame that `OUTPUT_COLUMNS`
describes. Spark calls `replay_frame` inside `applyInPandas`; nothing here imports Spark, so it is testable alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from lagwatch.shared.history import KIND_COMMIT
from lagwatch.shared.status_event import encode
from lagwatch.spark.backtest import Variant, count_notifications
from lagwatch.spark.replay import CommitInput, ReplayConfig, ReplayResult, SampleInput, replay_group
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
# pandas dtypes that keep nulls in integer and boolean columns
_DTYPES = {"long": "Int64", "int": "Int32", "double": "float64", "boolean": "boolean", "string": "object"}


def output_ddl() -> str:
    return ", ".join(f"`{name}` {kind}" for name, kind in OUTPUT_COLUMNS)


@dataclass(frozen=True)
class FrameJob:
    """What every group's replay needs: picklable, shipped to the Spark workers once per task."""

    production: ReplayConfig
    variants: Sequence[Variant]  # backtest variants (may include "production")
    ends: Mapping[str, int]  # cluster -> end of its history (ms): quiet groups are evaluated until then


def split_inputs(frame: pd.DataFrame) -> tuple[list[CommitInput], list[SampleInput]]:
    is_commit = (frame["kind"] == KIND_COMMIT).to_numpy()
    c, s = frame[is_commit], frame[~is_commit]
    commits = list(
        map(
            CommitInput._make,
            zip(
                c["topic"].tolist(),
                c["partition"].astype("int64").tolist(),
                c["offset"].astype("int64").tolist(),
                c["commit_timestamp"].astype("int64").tolist(),
                c["order"].astype("int64").tolist(),
                c["observed_at"].astype("int64").tolist(),
                strict=True,
            ),
        )
    )
    samples = list(
        map(
            SampleInput._make,
            zip(
                s["topic"].tolist(),
                s["partition"].astype("int64").tolist(),
                s["offset"].astype("int64").tolist(),
                s["observed_at"].astype("int64").tolist(),
                strict=True,
            ),
        )
    )
    return commits, samples


def replay_rows(
    cluster: str, group: str, commits: list[CommitInput], samples: list[SampleInput], job: FrameJob
) -> list[dict[str, Any]]:
    end = job.ends.get(cluster)
    result = replay_group(cluster, group, commits, samples, job.production, end_ms=end)
    rows = _timeline_rows(cluster, group, result) + _event_rows(cluster, group, result)
    rows.append(_report_row(cluster, group, result, len(commits)))
    for variant in job.variants:
        same = variant.replay == job.production
        replayed = result if same else replay_group(cluster, group, commits, samples, variant.replay, end_ms=end)
        rows.append(_backtest_row(cluster, group, variant, replayed))
    return rows


def replay_frame(job: FrameJob, key: tuple, frame: pd.DataFrame) -> pd.DataFrame:
    """`applyInPandas` entry point: key = (cluster, group)."""
    cluster, group = key
    commits, samples = split_inputs(frame)
    return to_frame(replay_rows(cluster, group, commits, samples, job))


def to_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(rows, columns=OUTPUT_NAMES)
    return frame.astype({name: _DTYPES[kind] for name, kind in OUTPUT_COLUMNS})


def _timeline_rows(cluster: str, group: str, result: ReplayResult) -> list[dict[str, Any]]:
    base = {"row_type": ROW_TIMELINE, "cluster": cluster, "group": group}
    return [{**base, **row._asdict()} for row in result.timeline]


def _event_rows(cluster: str, group: str, result: ReplayResult) -> list[dict[str, Any]]:
    return [
        {
            "row_type": ROW_EVENT,
            "cluster": cluster,
            "group": group,
            "at": e["evaluated_at"],
            "status": e["status"],
            "totallag": e["totallag"],
            "max_lag_seconds": e["max_lag_seconds"],
            "max_lag_seconds_lower_bound": e["max_lag_seconds_lower_bound"],
            "seq": e["seq"],
            "previous_status": e["previous_status"],
            "incident_id": e["incident_id"],
            "event": encode(e).decode(),
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
