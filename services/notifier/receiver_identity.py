"""What a receiver that keeps alerts open (Alertmanager, PagerDuty) knows an incident by: the incident and the
subscription, so one subscription's close resolves only its own alert (docs/webhooks.md#other-destinations,
"One receiver, several subscriptions"). Incidents begun before `identity-since` (the first start of a notifier of
this version, plus ROLLOUT_MS; kept in Redis) keep the name they had, the incident alone, until they close."""

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
