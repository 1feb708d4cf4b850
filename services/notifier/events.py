"""The two kinds of event the notifier turns into notifications — status changes (Burrow's rules,
notification_policy.py) and lag-threshold events (lag_policy.py) — and what differs between them: how a record is
read, where a subscription's incident is kept, and the rules that decide. A record must carry the event's
`KEY_FIELDS` (the others are filled in: `read_partial`); one that is not the event is skipped."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from lagwatch.services.notifier.lag_policy import decide_lag, lag_repeat_due, superseded_close
from lagwatch.services.notifier.missed import RECONCILED
from lagwatch.services.notifier.missed import superseded_close as missed_status_close
from lagwatch.services.notifier.outbox import FIELD_SEPARATOR, group_field, is_lag_field, lag_field
from lagwatch.shared.events.event_codec import EventDecodeError, read_partial
from lagwatch.shared.events.lag_threshold_event import LagThresholdEvent, threshold_key
from lagwatch.shared.events.status_event import StatusEvent
from lagwatch.shared.notifications.subscriptions.notification_policy import (
    QUIET,
    Decision,
    IncidentState,
    Policy,
    decide,
    repeat_due,
)

E = TypeVar("E", StatusEvent, LagThresholdEvent)


@dataclass(frozen=True)
class EventKind(Generic[E]):
    """A kind of event the notifier handles: how its records are read, where its incident is kept, which
    notification rules decide (Burrow's for status changes, the thresholds' for lag-threshold events)."""

    name: str
    parse: Callable[[bytes | str | None], E | None]
    state_field: Callable[[E], str]  # event -> the field of its incident
    decide: Callable[[Policy, E, IncidentState | None, int], Decision | None]  # None: not this subscription's
    repeat_due: Callable[[Policy, IncidentState | None, int], Decision]
    # the event that ends the announced incident before this event is decided, if this one replaces it
    superseded: Callable[[Policy, E, IncidentState | None], E | None]
    going_on: Callable[[E], bool]  # the event leaves its incident going on (not over)
    active_field: Callable[[E], str]  # where the latest event of an incident going on is kept (keys.NOTIFY_ACTIVE)
    superseded_reason: str | None = None  # the reason its close carries (a status incident's: its close was missed)


def _reader(cls: type[E]) -> Callable[[bytes | str | None], E | None]:
    def parse(raw: bytes | str | None) -> E | None:
        """The event in the record, or None when the record is not one."""
        try:
            return read_partial(cls, raw) if raw is not None else None
        except EventDecodeError:
            return None

    return parse


parse_status_event = _reader(StatusEvent)
parse_lag_event = _reader(LagThresholdEvent)


def _status_field(event: StatusEvent) -> str:
    return group_field(event.cluster, event.group)


def _lag_field(event: LagThresholdEvent) -> str:
    return lag_field(event.cluster, event.group, event.which.value)


def _lag_active_field(event: LagThresholdEvent) -> str:
    """One field per threshold: subscriptions with different thresholds have different incidents of one alert."""
    return f"{threshold_key(event.threshold_seconds)}{FIELD_SEPARATOR}{_lag_field(event)}"


STATUS_EVENTS: EventKind[StatusEvent] = EventKind(
    "status-change",
    parse_status_event,
    _status_field,
    decide,
    repeat_due,
    missed_status_close,  # (missed.py: an event of another incident than the one announced)
    lambda event: event.status not in QUIET,
    _status_field,
    RECONCILED,
)
LAG_EVENTS: EventKind[LagThresholdEvent] = EventKind(
    "lag-threshold",
    parse_lag_event,
    _lag_field,
    decide_lag,
    lag_repeat_due,
    superseded_close,
    lambda event: event.above,
    _lag_active_field,
)
AnyKind = EventKind[Any]  # either kind (the agents and the timer handle both alike)


def kind_for_field(state_field: str) -> AnyKind:
    """The kind of the incident kept under a state field (what the repeat timer and reconciliation know)."""
    return LAG_EVENTS if is_lag_field(state_field) else STATUS_EVENTS


def parse_either(raw: bytes | str) -> tuple[AnyKind, Any] | None:
    """(its kind, the event) for a record of either kind, or None when it is neither."""
    for kind in (LAG_EVENTS, STATUS_EVENTS):  # (their key fields tell them apart: KEY_FIELDS)
        event = kind.parse(raw)
        if event is not None:
            return kind, event
    return None
