"""The two kinds of event the notifier turns into notifications, and what differs between them: how a record is
read, where the incident announced to a subscription is kept (its field in the subscription's state hash), and
the rules that decide.

* status-change events (`evaluator.status-topic`): Burrow's rules, shared/subscriptions/notification_policy.py;
* lag-threshold events (`evaluator.lag-threshold-topic`): lagwatch's alert thresholds (lag-seconds, data-loss-risk,
  messages-skipped: each alert's incident under a field of its own), lag_policy.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from lagwatch.services.notifier.lag_policy import decide_lag, lag_repeat_due
from lagwatch.services.notifier.outbox import group_field, is_lag_field, lag_field
from lagwatch.shared.domain.lag_threshold_event import KIND as LAG_THRESHOLD_KIND
from lagwatch.shared.domain.lag_threshold_event import Alert
from lagwatch.shared.subscriptions.notification_policy import Decision, IncidentState, Policy, decide, repeat_due

STATUSES = ("NOTFOUND", "OK", "WARN", "ERR")
LAG_SECONDS = Alert.LAG_SECONDS.value  # events without `alert` were written before there were others
ALERTS = frozenset(a.value for a in Alert)
STATUS_FIELDS = ("event_id", "cluster", "group", "status", "previous_status", "incident_id", "evaluated_at")
LAG_FIELDS = ("event_id", "cluster", "group", "threshold_seconds", "above", "incident_id", "evaluated_at")


@dataclass(frozen=True)
class EventRules:
    name: str
    parse: Callable[[bytes | str | None], dict | None]
    state_field: Callable[[dict], str]  # event -> the field of its incident
    decide: Callable[[Policy, dict, IncidentState | None, int], Decision | None]  # None: not this subscription's
    repeat_due: Callable[[Policy, IncidentState | None, int], Decision]


def _json_object(raw: bytes | str | None, required: tuple[str, ...]) -> dict | None:
    try:
        event = json.loads(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None
    if not isinstance(event, dict) or any(f not in event for f in required) or not isinstance(event["event_id"], str):
        return None
    return event


def parse_status_event(raw: bytes | str | None) -> dict | None:
    """A status-change event, or None when the record is not one."""
    event = _json_object(raw, STATUS_FIELDS)
    return event if event is not None and event["status"] in STATUSES else None


def parse_lag_event(raw: bytes | str | None) -> dict | None:
    """A lag-threshold event, or None when the record is not one."""
    event = _json_object(raw, LAG_FIELDS)
    if event is None or event.get("kind") != LAG_THRESHOLD_KIND or not isinstance(event["above"], bool):
        return None
    if event.get("alert", LAG_SECONDS) not in ALERTS:
        return None
    threshold = event["threshold_seconds"]
    number = isinstance(threshold, int | float) and not isinstance(threshold, bool)
    return event if number and isinstance(event["incident_id"], str) else None


def _status_field(event: dict) -> str:
    return group_field(event["cluster"], event["group"])


def _lag_field(event: dict) -> str:
    return lag_field(event["cluster"], event["group"], event.get("alert", LAG_SECONDS))


STATUS_EVENTS = EventRules("status-change", parse_status_event, _status_field, decide, repeat_due)
LAG_EVENTS = EventRules("lag-threshold", parse_lag_event, _lag_field, decide_lag, lag_repeat_due)


def rules_for_field(state_field: str) -> EventRules:
    """The rules of the incident kept under a state field (the repeat timer only knows the field)."""
    return LAG_EVENTS if is_lag_field(state_field) else STATUS_EVENTS
