"""What a receiver that keeps alerts open (Alertmanager, PagerDuty) knows one of lagwatch's incidents by.

An incident is named per subscription: PagerDuty's `dedup_key` is `<incident id>/<subscription id>` and an
Alertmanager alert carries the label `subscription`. Two subscriptions sending to the same receiver (a group
moved from one to the other, or two thresholds or holds on the same service) then keep two alerts, and one's
close resolves only its own: named by the incident alone, the first close resolved what the other still had open.

Names in use stay: incidents that began before the first start of a notifier naming them so, or in the ROLLOUT_MS
after it (`identity-since`, set once in Redis), keep the shared name, the incident id and no `subscription` label,
until they close — so an upgrade leaves no alert open under a name no notification uses any more, even while
instances of the previous version still send during a rolling upgrade.
"""

from __future__ import annotations

from dataclasses import dataclass

from lagwatch.shared.notifications.subscriptions.notification_policy import Event

ROLLOUT_MS = 600_000  # how long after the first notifier of this version others may still run the previous one


@dataclass(frozen=True)
class ReceiverIdentity:
    key: str  # PagerDuty's dedup_key
    subscription: str | None  # the `subscription` label; None: an incident named before (shared by subscriptions)


def receiver_identity(event: Event, subscription_id: str, since_ms: int) -> ReceiverIdentity:
    incident = event.incident_id or f"{event.cluster}/{event.group}"
    began = event.incident_started_at or event.evaluated_at
    if began < since_ms:
        return ReceiverIdentity(incident, None)
    return ReceiverIdentity(f"{incident}/{subscription_id}", subscription_id)
