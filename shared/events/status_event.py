"""The status-change event: what the evaluator publishes on the status topic (`lagwatch.status`) when a consumer
group's status changes, and what the notifier and the Spark replay consume. Schema: `schemas/status_event.json`;
its fields, ids and Kafka key: docs/status-topic.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal, TypedDict, Unpack, cast

import msgspec
from msgspec import UNSET, UnsetType

from lagwatch.shared.events.event_codec import EventDecodeError as EventDecodeError  # (re-exported)
from lagwatch.shared.events.event_codec import EventFields, JsonEvent, Number, load_schema
from lagwatch.shared.events.event_codec import encode as encode  # (re-exported: the codec's, for any event)
from lagwatch.shared.protocol.types import GroupStatus, PartitionStatus, Status
from lagwatch.shared.statuses.explanation import Explanation
from lagwatch.shared.statuses.retention import RetentionRisk, group_risk
from lagwatch.shared.statuses.time_lag import TimeLag, seconds_fields, worst
from lagwatch.shared.statuses.velocity import Velocity, group_velocity

SCHEMA_VERSION: Final = 1
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


GroupStatusName = Literal["NOTFOUND", "OK", "WARN", "ERR"]
PartitionStatusName = Literal["OK", "WARN", "STOP", "STALL", "REWIND"]


class VelocityFields(EventFields, frozen=True, kw_only=True):
    """A lag velocity in an event (velocity.py's `Velocity.to_json`)."""

    consume_rate: Number | None
    produce_rate: Number | None
    lag_growth_per_second: Number | None
    catchup: Literal["caught_up", "keeping_up", "catching_up", "never", "unknown"]
    catchup_seconds: Number | None


class RetentionFields(EventFields, frozen=True, kw_only=True):
    """A retention risk in an event (retention.py's `RetentionRisk.to_json`)."""

    retention_risk_seconds: Number | None
    retention_risk_basis: Literal["log-start", "retention.ms"] | None
    skipped_messages: int


class ExplanationFields(EventFields, frozen=True, kw_only=True):
    """Why the group is where it is (explanation.py), in an event."""

    code: str
    text: str


class EventPartition(EventFields, frozen=True, kw_only=True):
    """A partition in a status-change event (the group's worst, or one not OK)."""

    topic: str
    partition: int
    status: PartitionStatusName
    start_offset: int | None
    end_offset: int | None
    current_lag: int
    owner: str
    client_id: str
    lag_seconds: Number | UnsetType | None = UNSET
    lag_seconds_lower_bound: bool | None = None
    velocity: VelocityFields | None = None
    retention: RetentionFields | None = None


class StatusEvent(JsonEvent, frozen=True, kw_only=True):
    """A status-change event, field for field as `schemas/status_event.json` describes it (a required field has no
    default, not even `schema_version` or `replayed`: a field at its default is left out of the JSON)."""

    KEY_FIELDS: ClassVar = frozenset(
        {"event_id", "cluster", "group", "status", "previous_status", "incident_id", "evaluated_at"}
    )
    schema_version: Literal[1]
    event_id: str
    seq: int
    cluster: str
    group: str
    previous_status: GroupStatusName
    status: GroupStatusName
    incident_id: str | None
    incident_started_at: int | None
    evaluated_at: int
    complete: Number
    partition_count: int
    totallag: int
    maxlag: EventPartition | None
    partitions: tuple[EventPartition, ...]
    partitions_not_ok: int | None = None  # set when `partitions` lists only some of them (`fitted`)
    max_lag_seconds: Number | UnsetType | None = UNSET
    max_lag_seconds_lower_bound: bool | None = None
    velocity: VelocityFields | None = None
    explanation: ExplanationFields | None = None
    retention: RetentionFields | None = None
    replayed: bool

    @property
    def not_ok_count(self) -> int:
        """How many of the group's partitions are not OK, those `partitions` lists or not."""
        return self.partitions_not_ok if self.partitions_not_ok is not None else len(self.partitions)

    @property
    def topics(self) -> list[str]:
        """The topics of its partitions not OK (what a silence's topic matcher looks at)."""
        return sorted({p.topic for p in self.partitions})


# Kafka refuses a record over 1 MiB by default (producer and broker): an event must stay under it, with room to spare
MAX_EVENT_BYTES = 900_000


def fitted(event: StatusEvent, limit: int = MAX_EVENT_BYTES) -> tuple[bytes, int]:
    """The event's bytes, at most `limit` when it can be, and how many partitions they list: an event Kafka refuses
    for its size is never published and holds back every later event of its group. A group with thousands of
    partitions not OK lists then only the worst of them (by status, then lag) that fit, in their order; the
    group's own fields (`partition_count`, `totallag`, `maxlag`) are all kept, and `partitions_not_ok` says how
    many there are (what a notification counts)."""
    raw = event.encode()
    if len(raw) <= limit:
        return raw, len(event.partitions)
    counted = msgspec.structs.replace(event, partitions_not_ok=event.not_ok_count)  # (fitted again: kept)
    room = limit - len(msgspec.structs.replace(counted, partitions=()).encode())
    worst_first = sorted(
        range(len(event.partitions)),
        key=lambda i: (Status[event.partitions[i].status], event.partitions[i].current_lag),
        reverse=True,
    )
    kept: set[int] = set()
    for i in worst_first:
        room -= len(encode(event.partitions[i])) + 1  # and its comma
        if room < 0:
            break
        kept.add(i)
    listed = tuple(p for i, p in enumerate(event.partitions) if i in kept)
    return msgspec.structs.replace(counted, partitions=listed).encode(), len(listed)


@dataclass(frozen=True, slots=True)
class StatusChange:
    """A transition: the group's status, transition number and incident after it, and the event announcing it."""

    status: Status
    seq: int
    incident: Incident  # the incident the group keeps (closed: Incident(None, None))
    event: StatusEvent


class EventDetails(TypedDict, total=False):
    """What an event adds when known: `time_lags` (lag in seconds per partition) `lag_seconds` fields, `velocities`
    (per partition, `velocity.py`) `velocity` objects on the group and its partitions, `explanation` its
    `explanation`, `retention` (per partition, `retention.py`) `retention` objects; `group_velocity` and
    `group_retention` the group's own, when computed already from those (the evaluator judges by them too)."""

    replayed: bool
    time_lags: Mapping[tuple[str, int], TimeLag | None] | None
    velocities: Mapping[tuple[str, int], Velocity] | None
    explanation: Explanation | None
    retention: Mapping[tuple[str, int], RetentionRisk] | None
    group_velocity: Velocity  # `group_velocity(velocities)`, where the caller has it already
    group_retention: RetentionRisk  # `group_risk(retention)`, likewise


def transition(
    cluster: str,
    group: str,
    previous: Status,
    seq_so_far: int,
    incident: Incident,
    group_status: GroupStatus | None,
    now_ms: int,
    **details: Unpack[EventDetails],
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
        **details,
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
    **details: Unpack[EventDetails],
) -> StatusEvent:
    """The event for transition number `seq`; `group_status` None means the group is gone (NOTFOUND)."""
    velocities, explanation, retention = details.get("velocities"), details.get("explanation"), details.get("retention")
    status = group_status.status if group_status else Status.NOTFOUND
    lags, speeds, risks = details.get("time_lags") or {}, velocities or {}, retention or {}
    bad = [p for p in group_status.partitions if p.status != Status.OK] if group_status else []
    maxlag = group_status.maxlag if group_status else None
    known = group_status is not None
    return StatusEvent(
        schema_version=SCHEMA_VERSION,
        event_id=event_id(cluster, group, seq),
        seq=seq,
        cluster=cluster,
        group=group,
        previous_status=_name(previous),
        status=_name(status),
        incident_id=incident.incident_id,
        incident_started_at=incident.started_at,
        evaluated_at=evaluated_at,
        complete=group_status.complete if group_status else 0.0,
        partition_count=group_status.partition_count if group_status else 0,
        totallag=group_status.totallag if group_status else 0,
        maxlag=_partition(maxlag, lags, speeds, risks) if maxlag else None,
        partitions=tuple(_partition(p, lags, speeds, risks) for p in bad),
        **seconds_fields(worst(lags.values()), "max_lag_seconds"),
        velocity=VelocityFields.of(_group_velocity(velocities, details)) if velocities is not None and known else None,
        explanation=ExplanationFields.of(explanation) if explanation is not None else None,
        retention=RetentionFields.of(_group_retention(retention, details)) if retention is not None and known else None,
        replayed=details.get("replayed", False),
    )


def _group_velocity(velocities: Mapping[tuple[str, int], Velocity], details: EventDetails) -> Velocity:
    given = details.get("group_velocity")
    return group_velocity(velocities.values()) if given is None else given


def _group_retention(risks: Mapping[tuple[str, int], RetentionRisk], details: EventDetails) -> RetentionRisk:
    given = details.get("group_retention")
    return group_risk(risks.values()) if given is None else given


def _name(status: Status) -> GroupStatusName:
    return cast("GroupStatusName", status.name)


def _partition(
    p: PartitionStatus,
    lags: Mapping[tuple[str, int], TimeLag | None],
    velocities: Mapping[tuple[str, int], Velocity],
    risks: Mapping[tuple[str, int], RetentionRisk],
) -> EventPartition:
    velocity = velocities.get((p.topic, p.partition))
    risk = risks.get((p.topic, p.partition))
    return EventPartition(
        topic=p.topic,
        partition=p.partition,
        status=cast("PartitionStatusName", p.status.name),
        start_offset=p.start.offset if p.start else None,
        end_offset=p.end.offset if p.end else None,
        current_lag=p.current_lag,
        owner=p.owner,
        client_id=p.client_id,
        **seconds_fields(lags.get((p.topic, p.partition)), "lag_seconds"),
        velocity=VelocityFields.of(velocity) if velocity is not None else None,
        retention=RetentionFields.of(risk) if risk is not None else None,
    )


def schema() -> dict[str, Any]:
    return load_schema("status_event.json")
