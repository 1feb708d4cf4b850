"""`alertmanager`: alerts POSTed to an Alertmanager's `/api/v2/alerts` (docs/webhooks.md#other-destinations).

Alertmanager names an alert by its labels: a WARN -> ERR update fires the ERR alert and resolves the WARN one in the
same request, a close resolves both, and the `subscription` label keeps two subscriptions' alerts apart
(receiver_identity.py). A firing alert's `endsAt` lies ahead, as Prometheus sets it, so that Alertmanager resolves
it by itself should lagwatch stop sending repeats.
"""

from __future__ import annotations

from typing import Any

from lagwatch.services.notifier.channels import Channel, Notification, json_body, summary
from lagwatch.shared.events.lag_threshold_event import LagThresholdEvent, threshold_key
from lagwatch.shared.notifications.subscriptions.destinations import ALERTMANAGER
from lagwatch.shared.notifications.subscriptions.notification_policy import Event
from lagwatch.shared.notifications.templating import templates

BAD = ("WARN", "ERR")
SEVERITY = {"ERR": "critical", "WARN": "warning"}
ALERT_NAMES = {"data-loss-risk": "KafkaConsumerDataLossRisk", "messages-skipped": "KafkaConsumerMessagesSkipped"}
FIRING_FOR_S = 86_400.0  # without repeats: how long a firing alert holds in Alertmanager unless closed
REPEATS_HELD = 3  # with repeats: send-intervals a firing alert holds


def _iso(ms: int | None) -> str:
    return templates.format_ts(ms, "%Y-%m-%dT%H:%M:%S.") + f"{int(ms or 0) % 1000:03d}Z"


def labels(event: Event, status: str, subscription: str | None = None) -> dict[str, str]:
    """An alert's labels: its name in Alertmanager. `subscription` (receiver_identity.py) tells apart the alerts of
    two subscriptions sending to one Alertmanager, so one's close resolves only its own."""
    named = {"subscription": subscription} if subscription else {}
    where = {"cluster": event.cluster, "group": event.group}
    if isinstance(event, LagThresholdEvent):
        threshold = threshold_key(event.threshold_seconds)
        name = ALERT_NAMES.get(event.which, "KafkaConsumerLagSeconds")
        return {"alertname": name, **where, "status": "ABOVE", "severity": "warning", "threshold": threshold, **named}
    severity = SEVERITY.get(status, "info")
    return {"alertname": "KafkaConsumerGroupStatus", **where, "status": status, "severity": severity, **named}


def alerts(note: Notification) -> list[dict[str, Any]]:
    """The alerts one notification posts: the firing one (unless it closes) and the resolved ones."""
    event, now, closing = note.event, note.now_ms, note.closing
    started = min(event.incident_started_at or event.evaluated_at, now)  # (clocks apart: never ahead)
    lines = [f"{name}: {value}" for name, value in summary.facts(event, note.kind, note.duration_s)]
    worst = summary.worst_lines(event, note.kind)
    if worst:
        lines += ["Worst partitions:", *worst]
    annotations = {"summary": summary.title(event, note.kind, note.reason), "description": "\n".join(lines)}
    if event.incident_id:
        annotations["incident_id"] = event.incident_id
    link = note.link
    if link:
        annotations["dashboard"] = link
    ended = min(event.evaluated_at, now)  # an end still ahead would keep it firing
    repeats = note.config.send_interval if not note.config.send_once else 0.0
    holds_ms = int(1000 * (REPEATS_HELD * repeats if repeats > 0 else FIRING_FOR_S))

    def alert(status: str, resolved: bool) -> dict[str, Any]:
        doc: dict[str, Any] = {"labels": labels(event, status, note.receiver.subscription), "annotations": annotations}
        doc |= {"startsAt": _iso(started), "endsAt": _iso(ended if resolved else now + holds_ms)}
        return doc | ({"generatorURL": link} if link else {})

    if isinstance(event, LagThresholdEvent):
        return [alert("ABOVE", closing)]
    if closing:
        return [alert(status, True) for status in BAD]
    firing, before = event.status, event.previous_status
    moved = note.kind == "update" and before in BAD and before != firing  # WARN -> ERR: a new alert, the old over
    return [alert(firing, False), *([alert(before, True)] if moved else [])]


CHANNEL = Channel(ALERTMANAGER.type, json_body(alerts), ALERTMANAGER)
