"""What the notifier decides for one subscription and one event, after holds and silences, the delivery that
carries it and its record: the steps every path that records a notification shares (the agents, the repeat timer,
the scope checks, reconciliation after skipped events)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from redis.asyncio import Redis

from lagwatch.services.notifier import holds, metrics
from lagwatch.services.notifier.events import AnyKind
from lagwatch.services.notifier.outbox import APPLIED, Delivery, Outbox, RecordRequest, delivery_id
from lagwatch.services.notifier.subscriptions import Registry, Subscription
from lagwatch.shared.notifications.subscriptions.notification_policy import Decision, Event, IncidentState, Kind
from lagwatch.shared.notifications.subscriptions.silences import SilenceCache

UNREADABLE = (ValueError, KeyError, TypeError)  # what `parse_state` raises for a state it cannot read


@dataclass(eq=False)
class Recorder:
    """What every path that records notifications works with: the outbox (and its Redis), the subscriptions, the
    silences, and the delivery loop's wake-up for what it enqueued."""

    outbox: Outbox
    registry: Registry
    silences: SilenceCache
    wake: Callable[[], None]

    @property
    def redis(self) -> Redis:
        return self.outbox.redis


def parse_state(raw: str) -> IncidentState | None:
    """A kept incident state ('' for none); raises UNREADABLE on one that is unreadable."""
    return IncidentState.from_json(json.loads(raw)) if raw else None


def readable_state(raw: str) -> IncidentState | None:
    """`parse_state`, None for an unreadable state too (the event path skips it alike)."""
    try:
        return parse_state(raw)
    except UNREADABLE:
        return None


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


def record_request(
    subscription: Subscription,
    decision: Decision,
    event: Event,
    state_field: str,
    current: str,
    now: int,
    *,
    notification_id: str | None = None,
    seen_id: str | None = None,
    reason: str | None = None,
) -> RecordRequest:
    """The record of a decision: the state it leaves in place of `current` and the delivery of its notification
    (`notification_id`, by default the event's id), made once per `seen_id` (by default the notification's id)."""
    notification_id = notification_id or event.event_id
    delivery = notification(subscription.id, decision.kind, event, notification_id, now, reason)
    seen = seen_id or notification_id
    return RecordRequest(
        subscription.id, seen, state_field, current, state_json(decision), delivery, decision.repeat_at
    )


async def record(
    outbox: Outbox, subscription: Subscription, request: RecordRequest, active: tuple[str, str] | None = None
) -> tuple[int, bool]:
    """Make one record (`Outbox.record`): its outcome, and whether it enqueued a delivery (counted)."""
    outcome = await outbox.record(request, active)
    return outcome, counted(subscription, request, outcome)


def counted(subscription: Subscription, request: RecordRequest, outcome: int) -> bool:
    """Count the delivery a record enqueued (metrics); whether there was one."""
    if outcome != APPLIED or request.delivery is None:
        return False
    metrics.NOTIFICATIONS.labels(subscription.type, request.delivery.kind).inc()
    return True
