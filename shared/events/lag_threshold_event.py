"""The lag-threshold event: what the evaluator publishes on the lag-threshold topic (`lagwatch.lag-thresholds`) when a
consumer group crosses a threshold some subscription asked for — lagwatch's own rules, beside Burrow's. Schema:
`schemas/lag_threshold_event.json`; its alerts (`lag-seconds`, `data-loss-risk`, `messages-skipped`), fields and
Kafka key: docs/status-topic.md.

One event per crossing of one threshold: `seq` counts the crossings of (cluster, group, alert, threshold), odd events
go over (`above`), even ones come back under; `event_id` is deterministic for them, and `incident_id` is set by the
event going over and carried by the one coming back under. A topic of its own, so consumers of the status topic see
exactly the events they always did.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Final, Literal, NamedTuple, cast

from msgspec import UNSET, UnsetType

from lagwatch.shared.events.event_codec import EventFields, JsonEvent, Number, load_schema
from lagwatch.shared.events.event_codec import encode as encode  # (re-exported)
from lagwatch.shared.events.status_event import ExplanationFields, GroupStatusName
from lagwatch.shared.protocol.types import GroupStatus, PartitionStatus, Status
from lagwatch.shared.statuses.explanation import Explanation
from lagwatch.shared.statuses.retention import RetentionRisk, group_risk
from lagwatch.shared.statuses.time_lag import TimeLag, exceeds, seconds_fields, worst

SCHEMA_VERSION: Final = 1
KIND: Final = "lag_threshold"


class Alert(StrEnum):
    LAG_SECONDS = "lag-seconds"  # max lag in seconds over the threshold
    DATA_LOSS_RISK = "data-loss-risk"  # retention deletes an unconsumed message in less than the threshold
    MESSAGES_SKIPPED = "messages-skipped"  # retention deleted messages before they were consumed


INCIDENT_PREFIX = {Alert.LAG_SECONDS: "lag", Alert.DATA_LOSS_RISK: "risk", Alert.MESSAGES_SKIPPED: "skip"}


class Reason(StrEnum):
    LAG = "lag"  # the lag went over, or came back under
    RETENTION = "retention"  # the retention risk or the skipped messages crossed (the alerts other than lag-seconds)
    GROUP_GONE = "group_gone"  # the group is NOTFOUND (deleted or expired): nothing is behind any more
    THRESHOLD_REMOVED = "threshold_removed"  # no subscription asks for this threshold now


def threshold_key(threshold_s: float) -> str:
    """A threshold as text, the same for 300 and 300.0 (Redis fields and ids use it)."""
    return format(float(threshold_s), ".15g")


class Threshold(NamedTuple):
    """One threshold in force: a number of seconds for one alert (`Threshold(300)` is a lag-seconds one)."""

    seconds: float
    alert: Alert = Alert.LAG_SECONDS

    @property
    def key(self) -> str:
        """Its field in the group's Redis hash and its part of event ids ("300" for lag-seconds, as ever)."""
        if self.alert == Alert.LAG_SECONDS:
            return threshold_key(self.seconds)
        return f"{self.alert.value}:{threshold_key(self.seconds)}"

    @classmethod
    def from_key(cls, key: str) -> Threshold:
        alert, _, seconds = key.rpartition(":")
        return cls(float(seconds), Alert(alert) if alert else Alert.LAG_SECONDS)


def subscription_thresholds(lag_seconds: float, retention_risk_seconds: float) -> list[Threshold]:
    """The thresholds one subscription asks for: its lag-seconds threshold, and with a retention-risk threshold
    both retention alerts (messages skipped has no threshold: 0)."""
    out = [Threshold(float(lag_seconds))] if lag_seconds > 0 else []
    if retention_risk_seconds > 0:
        out += [Threshold(float(retention_risk_seconds), Alert.DATA_LOSS_RISK), Threshold(0.0, Alert.MESSAGES_SKIPPED)]
    return out


def event_id(cluster: str, group: str, threshold_s: float, seq: int, alert: Alert = Alert.LAG_SECONDS) -> str:
    text = f"lag\x00{cluster}\x00{group}\x00{Threshold(threshold_s, alert).key}\x00{seq}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def incident_id(cluster: str, group: str, threshold_s: float, seq: int, alert: Alert = Alert.LAG_SECONDS) -> str:
    """The incident opened by crossing number `seq` (an odd one)."""
    text = f"lag-incident\x00{cluster}\x00{group}\x00{Threshold(threshold_s, alert).key}\x00{seq}"
    return f"{INCIDENT_PREFIX[alert]}-" + hashlib.sha256(text.encode()).hexdigest()[:24]


@dataclass(frozen=True, slots=True)
class Crossing:
    """One threshold crossed by one group at one evaluation."""

    threshold_s: float
    above: bool
    reason: Reason = Reason.LAG
    alert: Alert = Alert.LAG_SECONDS

    @property
    def threshold(self) -> Threshold:
        return Threshold(self.threshold_s, self.alert)


def at_risk(risk: RetentionRisk | None, threshold: Threshold) -> bool | None:
    """Whether a retention risk is in a retention alert (None: unknown). Data loss risk: the time left is known and
    strictly under the threshold; messages skipped: some were."""
    if risk is None:
        return None
    if threshold.alert == Alert.MESSAGES_SKIPPED:
        return risk.skipped > 0
    return risk.seconds is not None and risk.seconds < threshold.seconds


class LagPartition(EventFields, frozen=True, kw_only=True):
    """A partition in the alert (over the lag threshold, at risk, or with messages skipped)."""

    topic: str
    partition: int
    current_lag: int
    owner: str
    client_id: str
    lag_seconds: Number | None
    lag_seconds_lower_bound: bool
    retention_risk_seconds: Number | UnsetType | None = UNSET  # the retention alerts'
    skipped_messages: int | None = None


class LagThresholdEvent(JsonEvent, frozen=True, kw_only=True):
    """A lag-threshold event, field for field as `schemas/lag_threshold_event.json` describes it (a required field
    has no default, not even `schema_version` or `kind`: a field at its default is left out of the JSON)."""

    KEY_FIELDS: ClassVar = frozenset(
        {"kind", "event_id", "cluster", "group", "threshold_seconds", "above", "incident_id", "evaluated_at"}
    )
    schema_version: Literal[1]
    kind: Literal["lag_threshold"]
    alert: Alert | None = None  # left out by events written before there were other alerts: lag-seconds
    event_id: str
    seq: int
    cluster: str
    group: str
    threshold_seconds: Number
    above: bool
    reason: Reason
    incident_id: str
    incident_started_at: int
    evaluated_at: int
    max_lag_seconds: Number | None
    max_lag_seconds_lower_bound: bool
    status: GroupStatusName
    totallag: int
    partitions: tuple[LagPartition, ...]
    retention_risk_seconds: Number | UnsetType | None = UNSET  # the retention alerts'
    skipped_messages: int | None = None
    explanation: ExplanationFields | None = None

    @property
    def which(self) -> Alert:
        """Its alert (lag-seconds for events written before there were others)."""
        return self.alert or Alert.LAG_SECONDS

    @property
    def topics(self) -> list[str]:
        """The topics of its partitions in the alert (what a silence's topic matcher looks at)."""
        return sorted({p.topic for p in self.partitions})


def build_event(
    *,
    cluster: str,
    group: str,
    crossing: Crossing,
    seq: int,
    incident_started_at: int,
    evaluated_at: int,
    group_status: GroupStatus | None,
    time_lags: Mapping[tuple[str, int], TimeLag | None],
    explanation: Explanation | None = None,
    retention: Mapping[tuple[str, int], RetentionRisk] | None = None,
) -> LagThresholdEvent:
    """The event for crossing number `seq`; `incident_started_at` is when the incident went (or goes) over.
    `retention` (per partition): the retention alerts' fields and partitions."""
    threshold, alert, risks = crossing.threshold_s, crossing.alert, retention or {}
    over = _in_alert(group_status.partitions if group_status else (), crossing, time_lags, risks)
    extra = _risk_fields(group_risk(risks.values())) if alert != Alert.LAG_SECONDS else {}
    opened_by = seq if crossing.above else seq - 1
    return LagThresholdEvent(
        schema_version=SCHEMA_VERSION,
        kind=KIND,
        alert=alert,
        event_id=event_id(cluster, group, threshold, seq, alert),
        seq=seq,
        cluster=cluster,
        group=group,
        threshold_seconds=threshold,
        above=crossing.above,
        reason=crossing.reason,
        incident_id=incident_id(cluster, group, threshold, opened_by, alert),
        incident_started_at=incident_started_at,
        evaluated_at=evaluated_at,
        **seconds_fields(worst(time_lags.values()), "max_lag_seconds"),
        status=cast("GroupStatusName", group_status.status.name if group_status else Status.NOTFOUND.name),
        totallag=group_status.totallag if group_status else 0,
        partitions=tuple(_partition(p, time_lags, risks, with_risk=alert != Alert.LAG_SECONDS) for p in over),
        **extra,
        explanation=ExplanationFields.of(explanation) if explanation is not None else None,
    )


def _in_alert(
    parts: Sequence[PartitionStatus],
    crossing: Crossing,
    time_lags: Mapping[tuple[str, int], TimeLag | None],
    risks: Mapping[tuple[str, int], RetentionRisk],
) -> list[PartitionStatus]:
    """The partitions in the alert, the worst first: the most behind (lag-seconds); the most skipped, then the
    soonest deleted (the retention alerts)."""
    lag_alert = crossing.alert == Alert.LAG_SECONDS

    def order(p: PartitionStatus) -> tuple[Any, ...]:
        tp = (p.topic, p.partition)
        if lag_alert:
            return (-cast(TimeLag, time_lags[tp]).seconds, *tp)  # over the threshold, so known
        return (-risks[tp].skipped, risks[tp].seconds or 0.0, *tp)

    if lag_alert:
        over = [p for p in parts if exceeds(time_lags.get((p.topic, p.partition)), crossing.threshold_s)]
    else:
        over = [p for p in parts if at_risk(risks.get((p.topic, p.partition)), crossing.threshold)]
    return sorted(over, key=order)


def _partition(
    p: PartitionStatus,
    time_lags: Mapping[tuple[str, int], TimeLag | None],
    risks: Mapping[tuple[str, int], RetentionRisk],
    *,
    with_risk: bool,
) -> LagPartition:
    """A partition of the event; `with_risk` (a retention alert's) adds its retention risk."""
    return LagPartition(
        topic=p.topic,
        partition=p.partition,
        current_lag=p.current_lag,
        owner=p.owner,
        client_id=p.client_id,
        **seconds_fields(time_lags.get((p.topic, p.partition)), "lag_seconds"),
        **(_risk_fields(risks.get((p.topic, p.partition))) if with_risk else {}),
    )


def _risk_fields(risk: RetentionRisk | None) -> dict[str, Any]:
    doc = (risk if risk is not None else RetentionRisk(None)).to_json()
    return {k: doc[k] for k in ("retention_risk_seconds", "skipped_messages")}


def is_lag_threshold_event(event: Mapping[str, Any]) -> bool:
    return event.get("kind") == KIND


def schema() -> dict[str, Any]:
    return load_schema("lag_threshold_event.json")
