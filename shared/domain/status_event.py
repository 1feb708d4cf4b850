"""The status-change event: what the evaluator publishes on the status topic (`lagwatch.status`) when a consumer
group's status changes, and what the notifier and the Spark replay consume. Schema: `schemas/status_event.json`.

* `event_id` is deterministic for the transition (cluster, group, transition number): a consumer that sees it twice
  (a redelivery) can drop the second copy.
* `incident_id` is shared by every event of one bad period: it is set when a group leaves OK (or NOTFOUND) and kept
  until the event that brings it back to OK or NOTFOUND, which carries it one last time.
* Kafka record key: `<cluster>/<group>`, so one group's events stay in order in one partition.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lagwatch.shared.domain.explanation import Explanation
from lagwatch.shared.domain.protocol import GroupStatus, PartitionStatus, Status
from lagwatch.shared.domain.retention import RetentionRisk, group_risk
from lagwatch.shared.domain.time_lag import TimeLag, seconds_fields, worst
from lagwatch.shared.domain.velocity import Velocity, group_velocity

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).parent.parent / "schemas" / "status_event.json"
QUIET = (Status.OK, Status.NOTFOUND)  # statuses outside an incident


def record_key(cluster: str, group: str) -> bytes:
    return f"{cluster}/{group}".encode()


def event_id(cluster: str, group: str, seq: int) -> str:
    return hashlib.sha256(f"{cluster}\x00{group}\x00{seq}".encode()).hexdigest()[:32]


def new_incident_id(cluster: str, group: str, seq: int) -> str:
    return "inc-" + hashlib.sha256(f"incident\x00{cluster}\x00{group}\x00{seq}".encode()).hexdigest()[:24]


@dataclass(frozen=True, slots=True)
class Incident:
    incident_id: str | None
    started_at: int | None


def next_incident(
    previous: Status, status: Status, current: Incident, cluster: str, group: str, seq: int, now_ms: int
) -> tuple[Incident, Incident]:
    """(incident the event carries, incident the group keeps afterwards) for a transition."""
    if previous in QUIET and status not in QUIET:
        opened = Incident(new_incident_id(cluster, group, seq), now_ms)
        return opened, opened
    if status in QUIET:
        return current, Incident(None, None)  # the closing event names the incident it closes
    return current, current


@dataclass(frozen=True, slots=True)
class StatusChange:
    """A transition: the group's status, transition number and incident after it, and the event announcing it."""

    status: Status
    seq: int
    incident: Incident  # the incident the group keeps (closed: Incident(None, None))
    event: dict[str, Any]


def transition(
    cluster: str,
    group: str,
    previous: Status,
    seq_so_far: int,
    incident: Incident,
    group_status: GroupStatus | None,
    now_ms: int,
    *,
    replayed: bool = False,
    time_lags: Mapping[tuple[str, int], TimeLag | None] | None = None,
    velocities: Mapping[tuple[str, int], Velocity] | None = None,
    explanation: Explanation | None = None,
    retention: Mapping[tuple[str, int], RetentionRisk] | None = None,
) -> StatusChange | None:
    """The status → event step, shared by the evaluator and the Spark replay: None when the status is unchanged,
    else the next transition number, its incident and its event (`group_status` None: the group is gone)."""
    new = group_status.status if group_status else Status.NOTFOUND
    if new == previous:
        return None
    seq = seq_so_far + 1
    carried, keeps = next_incident(previous, new, incident, cluster, group, seq, now_ms)
    event = build_event(
        cluster=cluster,
        group=group,
        seq=seq,
        previous=previous,
        group_status=group_status,
        incident=carried,
        evaluated_at=now_ms,
        replayed=replayed,
        time_lags=time_lags,
        velocities=velocities,
        explanation=explanation,
        retention=retention,
    )
    return StatusChange(new, seq, keeps, event)


def build_event(
    *,
    cluster: str,
    group: str,
    seq: int,
    previous: Status,
    group_status: GroupStatus | None,
    incident: Incident,
    evaluated_at: int,
    replayed: bool = False,
    time_lags: Mapping[tuple[str, int], TimeLag | None] | None = None,
    velocities: Mapping[tuple[str, int], Velocity] | None = None,
    explanation: Explanation | None = None,
    retention: Mapping[tuple[str, int], RetentionRisk] | None = None,
) -> dict[str, Any]:
    """The event for transition number `seq`; `group_status` None means the group is gone (NOTFOUND).
    `time_lags` (lag in seconds per partition), when known, adds `lag_seconds` fields; `velocities` (per partition,
    `velocity.py`) add `velocity` objects to the group and its partitions; `explanation` adds `explanation`;
    `retention` (per partition, `retention.py`) adds `retention` objects."""
    status = group_status.status if group_status else Status.NOTFOUND
    return {
        "schema_version": SCHEMA_VERSION,
        "event_id": event_id(cluster, group, seq),
        "seq": seq,
        "cluster": cluster,
        "group": group,
        "previous_status": previous.name,
        "status": status.name,
        "incident_id": incident.incident_id,
        "incident_started_at": incident.started_at,
        "evaluated_at": evaluated_at,
        **_group_fields(group_status, time_lags or {}, velocities or {}, retention or {}),
        **_insight_fields(group_status, velocities, explanation, retention),
        "replayed": replayed,
    }


def _group_fields(
    group_status: GroupStatus | None,
    lags: Mapping[tuple[str, int], TimeLag | None],
    speeds: Mapping[tuple[str, int], Velocity],
    risks: Mapping[tuple[str, int], RetentionRisk],
) -> dict[str, Any]:
    """The group's numbers and its partitions that are not OK (none for a gone group)."""
    if group_status is None:
        return {
            "complete": 0.0,
            "partition_count": 0,
            "totallag": 0,
            "maxlag": None,
            "partitions": [],
            **seconds_fields(worst(lags.values()), "max_lag_seconds"),
        }
    bad = [p for p in group_status.partitions if p.status != Status.OK]
    maxlag = group_status.maxlag
    return {
        "complete": group_status.complete,
        "partition_count": group_status.partition_count,
        "totallag": group_status.totallag,
        "maxlag": _partition(maxlag, lags, speeds, risks) if maxlag else None,
        "partitions": [_partition(p, lags, speeds, risks) for p in bad],
        **seconds_fields(worst(lags.values()), "max_lag_seconds"),
    }


def _insight_fields(
    group_status: GroupStatus | None,
    velocities: Mapping[tuple[str, int], Velocity] | None,
    explanation: Explanation | None,
    retention: Mapping[tuple[str, int], RetentionRisk] | None,
) -> dict[str, Any]:
    """The optional group-level `velocity`, `explanation` and `retention` objects, when they were given."""
    extra: dict[str, Any] = {}
    if velocities is not None and group_status is not None:
        extra["velocity"] = group_velocity(velocities.values()).to_json()
    if explanation is not None:
        extra["explanation"] = explanation.to_json()
    if retention is not None and group_status is not None:
        extra["retention"] = group_risk(retention.values()).to_json()
    return extra


def _partition(
    p: PartitionStatus,
    lags: Mapping[tuple[str, int], TimeLag | None],
    velocities: Mapping[tuple[str, int], Velocity],
    risks: Mapping[tuple[str, int], RetentionRisk],
) -> dict[str, Any]:
    velocity = velocities.get((p.topic, p.partition))
    risk = risks.get((p.topic, p.partition))
    return {
        "topic": p.topic,
        "partition": p.partition,
        "status": p.status.name,
        "start_offset": p.start.offset if p.start else None,
        "end_offset": p.end.offset if p.end else None,
        "current_lag": p.current_lag,
        "owner": p.owner,
        "client_id": p.client_id,
        **seconds_fields(lags.get((p.topic, p.partition)), "lag_seconds"),
        **({"velocity": velocity.to_json()} if velocity is not None else {}),
        **({"retention": risk.to_json()} if risk is not None else {}),
    }


def encode(event: Mapping[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":"), sort_keys=True).encode()


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
    return loaded
