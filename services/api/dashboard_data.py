"""What the dashboard shows about a group, as JSON: a row of the overview (status, lag, lag in seconds, a lag
sparkline) from the evaluator's ready result (results_store.py), and the detail of its partitions with their windows.
The sparkline's points before now are the evaluator's (shared/domain/lag_sparkline.py); the row ends it with the lag
now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lagwatch.services.api.burrow_routes import consumer_topics
from lagwatch.shared.domain.lag_sparkline import Point
from lagwatch.shared.domain.protocol import Status
from lagwatch.shared.domain.status_event import Incident
from lagwatch.shared.domain.time_lag import seconds_fields, worst
from lagwatch.shared.store.redis_store import StoredGroup
from lagwatch.shared.store.results_store import GroupResult, PartitionResult


def group_row(
    result: GroupResult,
    log_ends: Mapping[tuple[str, int], int],
    sparkline: Sequence[Point],
    now_ms: int,
    intervals: int,
    incident: Incident | None,
) -> dict:
    """One group of the overview, from its ready result and its topics' log ends now; `incident` is the
    evaluator's open incident for it, if any."""
    lags = [p.lag(log_ends.get((p.topic, p.partition))) for p in result.partitions]
    totallag = sum(lags)
    maxlag = None
    for p, lag in zip(result.partitions, lags, strict=True):
        if maxlag is None or lag > maxlag[1]:  # first wins ties, as in the rules
            maxlag = (p, lag)
    full = sum(1 for p in result.partitions if p.filled >= intervals)
    return {
        "group": result.group,
        "status": result.status.name,
        "complete": full / len(result.partitions) if result.partitions else 0.0,
        "partition_count": len(result.partitions),
        "totallag": totallag,
        "maxlag": _maxlag(*maxlag) if maxlag else None,
        **seconds_fields(worst(p.time_lag(now_ms) for p in result.partitions), "max_lag_seconds"),
        "last_commit": result.last_commit_ms,
        "rebalances_last_hour": result.rebalances_last_hour(now_ms),
        "velocity": result.velocity_json(now_ms),
        "sparkline": [[at, lag] for at, lag in sparkline if at < now_ms] + [[now_ms, totallag]],
        "incident": incident_json(incident),
    }


def group_detail(status_json: dict, stored: StoredGroup, intervals: int) -> dict:
    """Burrow's status object (with lag in seconds) whose partitions also carry their window, oldest slot first:
    `[{offset, timestamp, observedAt, lag} | null, ...]` as in Burrow's consumer detail."""
    windows = consumer_topics(stored, {}, intervals)
    for part in status_json["partitions"]:
        part["window"] = windows[part["topic"]][part["partition"]]["offsets"]
    return status_json


def severity_order(row: Mapping[str, Any]) -> tuple:
    """Worst first: by status (ERR, WARN, OK, ...), then by total lag, then by name."""
    return (-Status[row["status"]], -row["totallag"], row["group"])


def incident_json(incident: Incident | None) -> dict | None:
    if incident is None or incident.incident_id is None:
        return None
    return {"incident_id": incident.incident_id, "started_at": incident.started_at}


def _maxlag(p: PartitionResult, lag: int) -> dict:
    return {"topic": p.topic, "partition": p.partition, "current_lag": lag}
