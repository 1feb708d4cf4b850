"""When what a subscription covers changes: the incidents it no longer covers are closed, those it newly covers
are announced. Pure functions; the notifier's repeat timer applies them whenever the subscriptions change (and at
start-up, for the configuration file's).

**Announced:** an incident going on when a subscription is created or widened to take its group (or its alert's
threshold) would be told only at its next change, which for a stopped consumer may never come (Burrow's notifier,
which looks at every group on each evaluation, tells it). The notifier keeps the latest event of each incident
going on (`keys.NOTIFY_ACTIVE`, from the events it reads) and decides it for each covering subscription with no
state for it, as if it had just arrived: Burrow's rules, thresholds, `hold-for` and silences apply. Its
notification has an id of its own (`announcement_id`).

**Closed:** an incident state kept for a group once the subscription's filters (`clusters`, `group-allowlist`,
`group-denylist`) no longer take the group, or — for a lag or retention alert — once the subscription no longer
asks for the alert's threshold. The group's later events are not the subscription's any more, so nothing else
would ever end it: the receiver (a PagerDuty incident, an Alertmanager alert) would keep it open for good, and
`send-interval` would repeat it. So it is closed: a `close` (or `lag-close`) with `send-close`, with the reason
`unsubscribed` when the filters left the group out; a held open is dropped unsent, as an incident over before it
was announced is. Likewise every incident of a cluster forgotten (`lagwatch forget-cluster`,
shared/runtime/cluster_forgetting.py) whose latest event is from before the forgetting, with the reason
`cluster_forgotten`: the cluster's evaluator, which would have ended it, runs no more.

* status incidents: the close carries the group's latest event, as a repeat does (its status is not OK: the
  reason says why it closes).
* lag and retention incidents: the close carries the event the evaluator would publish for it
  (`lag_policy.closing_event`, reason `threshold_removed`: this subscription no longer uses the threshold).
* either has a notification id of its own, made from the state as kept: the same for every notifier that finds it
  (it is recorded once), another for the same incident announced anew (narrowed, widened, narrowed again). Not
  the evaluator's close's id: that close, once the incident is announced again, must not be a duplicate of this
  one (to the `seen` keys, and to a receiver deduplicating on `X-Lagwatch-Event-Id`).
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
