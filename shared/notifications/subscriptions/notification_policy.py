"""When a subscription is told about a status-change event: Burrow's notifier rules (`threshold`, `send-close`,
`send-once`, `send-interval`), as pure functions; the kinds they send are docs/webhooks.md's table.

Burrow decides per notifier module and evaluation; lagwatch per subscription and status-change event, plus a timer
for repeats (no event arrives while a group stays bad). Unlike Burrow, lagwatch closes only what it opened for this
subscription. The state kept per (subscription, cluster/group) is an `IncidentState`: the incident announced to this
subscription, and the latest event of the group (for repeats and templates). No state = nothing announced.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from lagwatch.shared.events.event_codec import EventDecodeError, from_document
from lagwatch.shared.events.lag_threshold_event import LagThresholdEvent, is_lag_threshold_event
from lagwatch.shared.events.status_event import StatusEvent
from lagwatch.shared.protocol.types import Status

Event = StatusEvent | LagThresholdEvent  # what an incident state keeps: its group's latest event of either kind

QUIET = frozenset({"OK", "NOTFOUND"})


class Kind(StrEnum):
    OPEN = "open"
    UPDATE = "update"
    REPEAT = "repeat"
    CLOSE = "close"
    STATUS = "status"
    LAG_OPEN = "lag-open"  # lag-seconds threshold (lag_policy.py): the group's lag went over it
    LAG_REPEAT = "lag-repeat"
    LAG_CLOSE = "lag-close"


# a close's reason when it is not the group's own (notifier/scope.py): the subscription no longer covers the group,
# or the group's cluster was forgotten (`lagwatch forget-cluster`)
UNSUBSCRIBED = "unsubscribed"
CLUSTER_FORGOTTEN = "cluster_forgotten"


@dataclass(frozen=True)
class Policy:
    """The part of a subscription that decides when to notify."""

    threshold: Status = Status.WARN
    send_close: bool = True
    send_once: bool = False
    send_interval_ms: int = 0
    lag_threshold_s: float = 0.0  # lagwatch's own rule (lag_policy.py); 0 = off
    retention_risk_s: float = 0.0  # data-loss-risk and messages-skipped alerts (lag_policy.py); 0 = off
    hold_for_ms: int = 0  # an open waits until the incident held this long (holds.py); 0 = at once

    @property
    def repeats(self) -> bool:
        return self.send_interval_ms > 0 and not self.send_once


@dataclass(frozen=True)
class IncidentState:
    """What a subscription was told about one group's current incident."""

    incident_id: str | None  # the incident announced (open sent)
    status: str  # the group's latest status
    notified_at: int  # epoch ms of the last notification (open, update or repeat)
    event: Event  # the group's latest event
    held: str | None = None  # a notification held back (holds.py: a silence, `hold-for`): its kind
    held_since: int | None = None  # epoch ms since when the open is held (what `hold-for` counts from)

    def to_json(self) -> dict[str, Any]:
        doc = {
            "incident_id": self.incident_id,
            "status": self.status,
            "notified_at": self.notified_at,
            "event": self.event.as_dict(),
        }
        if self.held:
            doc.update(held=self.held, held_since=self.held_since)
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> IncidentState:
        return cls(
            doc.get("incident_id"),
            doc["status"],
            int(doc["notified_at"]),
            event_from_json(doc["event"]),
            doc.get("held"),
            doc.get("held_since"),
        )


# what the rules, holds and silences read of a kept event (and what the notifier checked when it took it)
READ_FIELDS = frozenset(
    {"event_id", "cluster", "group", "status", "incident_id", "kind", "alert", "threshold_seconds", "above"}
)


def event_from_json(doc: dict[str, Any]) -> Event:
    """A kept event, read partially: states written by earlier versions kept whatever event the notifier took,
    and one whose other fields no longer decode is kept by what the rules read (else the timer would stall)."""
    cls: type[Event] = LagThresholdEvent if is_lag_threshold_event(doc) else StatusEvent
    try:
        return from_document(cls, doc, partial=True)
    except EventDecodeError:
        return from_document(cls, {k: v for k, v in doc.items() if k in READ_FIELDS}, partial=True)


@dataclass(frozen=True)
class Decision:
    kind: Kind | None  # what to send, None = nothing
    state: IncidentState | None  # the state afterwards (None = forget the group)
    repeat_at: int | None  # when the next repeat is due (None = no repeats scheduled)


def at_or_above(status: str, threshold: Status) -> bool:
    return Status[status] >= threshold


def decide(policy: Policy, event: StatusEvent, state: IncidentState | None, now_ms: int) -> Decision:
    """What a status-change event means for one subscription, given what it was told so far."""
    status = event.status
    if status in QUIET:
        if policy.send_close and state is not None and state.incident_id is not None:
            return Decision(Kind.CLOSE, None, None)
        return Decision(Kind.STATUS if at_or_above(status, policy.threshold) else None, None, None)

    announced = state is not None and state.incident_id is not None and state.incident_id == event.incident_id
    if not at_or_above(status, policy.threshold):
        if announced:  # still in the announced incident, below the threshold: keep it (for the close), no repeats
            assert state is not None
            return Decision(None, replace(state, status=status, event=event), None)
        return Decision(None, None, None)
    if announced:
        assert state is not None
        if policy.send_once:
            return Decision(None, replace(state, status=status, event=event), None)
        updated = IncidentState(state.incident_id, status, now_ms, event)
        return Decision(Kind.UPDATE, updated, next_repeat(policy, now_ms))
    opened = IncidentState(event.incident_id, status, now_ms, event)
    return Decision(Kind.OPEN, opened, next_repeat(policy, now_ms))


def repeat_due(policy: Policy, state: IncidentState | None, now_ms: int) -> Decision:
    """The timer's question for an announced incident whose repeat time has come: repeat it now (`kind` REPEAT,
    with the time of the next one), or stop repeating (`kind` None, `repeat_at` None)."""
    if state is None or state.incident_id is None or not policy.repeats:
        return Decision(None, state, None)
    if not at_or_above(state.status, policy.threshold):
        return Decision(None, state, None)
    return Decision(Kind.REPEAT, state, now_ms + policy.send_interval_ms)


def next_repeat(policy: Policy, now_ms: int) -> int | None:
    return now_ms + policy.send_interval_ms if policy.repeats else None
