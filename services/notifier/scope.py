"""When what a subscription covers changes (docs/webhooks.md#the-api-apiv1subscriptions), as pure functions the repeat
timer applies (scope_watch.py).

* **Announced:** an incident going on when a subscription is created or widened to take it would be told only at its
  next change, which may never come: its latest event (`keys.NOTIFY_ACTIVE`) is decided for each covering
  subscription with no state for it, as if it had just arrived, under an id of its own (`announcement_id`).
* **Closed:** an incident whose group the filters no longer take (reason `unsubscribed`), whose alert threshold the
  subscription no longer asks for, or whose cluster was forgotten (`cluster_forgotten`): nothing else would ever end
  it at the receiver. A status incident's close carries its latest event; a lag incident's the evaluator's close
  (`lag_policy.closing_event`). Its id is made from the state as kept: the same for every notifier, another for the
  incident announced anew, never the evaluator's close's (which must not be a duplicate of it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import NamedTuple

from lagwatch.services.notifier.lag_policy import asks_for, closing_event
from lagwatch.services.notifier.outbox import digest
from lagwatch.services.notifier.subscriptions import Subscription
from lagwatch.shared.events.lag_threshold_event import LagThresholdEvent, Reason
from lagwatch.shared.notifications.subscriptions.documents import to_document
from lagwatch.shared.notifications.subscriptions.notification_policy import (
    CLUSTER_FORGOTTEN,
    UNSUBSCRIBED,
    Event,
    IncidentState,
    Kind,
)
from lagwatch.shared.runtime.config import SubscriptionConfig


def covers(subscription: Subscription, state: IncidentState, forgotten: Mapping[str, int] | None = None) -> bool:
    """Whether the subscription still takes the events of the incident kept in `state`; `forgotten`: cluster ->
    when it was forgotten (ms)."""
    event = state.event
    if not subscription.matches(event.cluster, event.group) or is_forgotten(event, forgotten):
        return False
    return not isinstance(event, LagThresholdEvent) or asks_for(subscription.policy, event)


def is_forgotten(event: Event, forgotten: Mapping[str, int] | None) -> bool:
    """An event of a cluster forgotten since it was evaluated (a cluster configured again after its forgetting
    makes incidents of its own)."""
    at = (forgotten or {}).get(event.cluster)
    return at is not None and event.evaluated_at <= at


class ScopeClose(NamedTuple):
    """What ends an incident the subscription no longer covers (the state is then forgotten)."""

    kind: Kind | None  # the notification to send; None for nothing (a held open, or no `send-close`)
    event: Event  # the event it carries
    notification_id: str
    reason: str | None  # UNSUBSCRIBED when the filters no longer take the group, CLUSTER_FORGOTTEN, else None


def scope_close(
    subscription: Subscription, state: IncidentState, raw: str, forgotten: Mapping[str, int] | None = None
) -> ScopeClose:
    """The close of an incident the subscription no longer covers (`covers` is False); `raw`: the state as kept."""
    event: Event = state.event
    gone = is_forgotten(event, forgotten)
    reason = CLUSTER_FORGOTTEN if gone else None if subscription.matches(event.cluster, event.group) else UNSUBSCRIBED
    notification_id = _notification_id(raw, subscription.id)
    if state.incident_id is None:  # held, never announced: nothing to close
        return ScopeClose(None, event, notification_id, reason)
    kind = Kind.CLOSE
    if isinstance(event, LagThresholdEvent):  # threshold_removed: this subscription no longer uses it
        event = closing_event(event, state.incident_id, Reason.GROUP_GONE if gone else Reason.THRESHOLD_REMOVED)
        kind = Kind.LAG_CLOSE
    return ScopeClose(kind if subscription.policy.send_close else None, event, notification_id, reason)


def config_digest(config: SubscriptionConfig) -> str:
    """A subscription's configuration as a short digest: what a look at the scopes saw (`keys.NOTIFY_SCOPE_LOOKED`),
    so that a notifier starting with the same subscriptions need not look at every incident again."""
    return digest(json.dumps(to_document(config), sort_keys=True, default=str))


def announcement_id(event_id: str, subscription_id: str, version: int | None) -> str:
    """The id of an incident's announcement to a subscription created or widened since it began: the same for every
    notifier at one subscriptions' version (it is recorded once), another after the next change (a subscription
    narrowed and widened again is told anew: a receiver deduplicating on the event's id would drop it)."""
    return digest("announce", event_id, subscription_id, version)


def _notification_id(raw: str, subscription_id: str) -> str:
    """The close's own id: the same for every notifier that reads the state (it is recorded once); another once
    the incident is announced anew (the state then has another `notified_at` or `held_since`)."""
    return digest(UNSUBSCRIBED, subscription_id, raw)
