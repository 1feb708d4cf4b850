"""`pagerduty`: PagerDuty's Events API v2 (docs/webhooks.md#other-destinations): open, update and repeat `trigger`,
close `resolve`s, with one `dedup_key` per incident and subscription (receiver_identity.py)."""

from __future__ import annotations

from typing import Any

from lagwatch.services.notifier.channels import Channel, Notification, json_body, summary
from lagwatch.shared.events.lag_threshold_event import LagThresholdEvent
from lagwatch.shared.notifications.subscriptions.destinations import PAGERDUTY

SUMMARY_MAX = 1024  # the Events API's limit
SEVERITY = {"ERR": "critical", "WARN": "warning"}


def event_body(note: Notification) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "routing_key": note.config.routing_key,
        "dedup_key": note.receiver.key,
        "event_action": "resolve" if note.closing else "trigger",
    }
    if note.closing:
        return doc
    event = note.event
    if isinstance(event, LagThresholdEvent):
        severity, class_ = "warning", f"consumer-{event.which}"
    else:
        severity, class_ = SEVERITY.get(event.status, "info"), "consumer-group-status"
    doc["payload"] = {
        "summary": summary.title(event, note.kind, note.reason)[:SUMMARY_MAX],
        "source": event.cluster,
        "severity": severity,
        "component": event.group,
        "group": event.cluster,
        "class": class_,
        "custom_details": {
            **dict(summary.facts(event, note.kind, note.duration_s)),
            "worst_partitions": summary.worst_lines(event, note.kind),
            "notification": note.kind,
        },
    }
    doc["client"] = "lagwatch"
    if note.dashboard_url:
        doc["client_url"] = note.link
        doc["links"] = [{"href": note.link, "text": "Open in lagwatch"}]
    return doc


CHANNEL = Channel(PAGERDUTY.type, json_body(event_body), PAGERDUTY)
