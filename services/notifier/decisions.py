"""What the notifier decides for one subscription and one event, after holds and silences, and the delivery that
carries it: the step every path that records a notification shares (the agents, the repeat timer, the scope
checks, reconciliation after skipped events)."""

from __future__ import annotations

import json

from lagwatch.services.notifier import holds, metrics
from lagwatch.services.notifier.events import AnyKind
from lagwatch.services.notifier.outbox import Delivery, delivery_id
from lagwatch.services.notifier.subscriptions import Subscription
from lagwatch.shared.notifications.subscriptions.notification_policy import Decision, Event, IncidentState, Kind


def parse_state(raw: str) -> IncidentState | None:
    """A kept incident state ('' for none); raises on one that is unreadable."""
    return IncidentState.from_json(json.loads(raw)) if raw else None


def state_json(decision: Decision) -> str:
    """The state a decision leaves, as kept ('' to forget the group)."""
    return json.dumps(decision.state.to_json(), sort_keys=True) if decision.state else ""


def decide(
    subscription: Subscription,
    event: Event,
    state: IncidentState | None,
    kind: AnyKind,
    now: int,
    silenced_until: int | None,
) -> Decision | None:
    """The subscription's decision for the event, after holds and silences; None: the event does not concern it."""
    decision = kind.decide(subscription.policy, event, state, now)
    if decision is None:
        if not holds.ends_unannounced(state, event):
            return None
        decision = Decision(None, None, None)
    wanted = decision.kind
    decision = holds.hold(subscription.policy, decision, state, event, now, silenced_until)
    if wanted is not None and decision.kind is None:
        held_by = "silence" if silenced_until is not None and silenced_until > now else "hold_for"
        metrics.HELD.labels(subscription.type, held_by).inc()
    return decision


def notification(
    subscription_id: str, kind: Kind | None, event: Event, notification_id: str, now: int, reason: str | None = None
) -> Delivery | None:
    """The delivery of a notification of `kind` carrying `event`, or None when `kind` is None (nothing is sent)."""
    if kind is None:
        return None
    return Delivery(
        id=delivery_id(notification_id, subscription_id),
        subscription_id=subscription_id,
        kind=kind.value,
        event=event,
        notification_id=notification_id,
        created_at=now,
        reason=reason,
    )
