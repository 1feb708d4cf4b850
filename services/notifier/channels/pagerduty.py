"""`pagerduty`: PagerDuty's Events API v2 — open, update and repeat `trigger` an alert, close `resolve`s it; the
`dedup_key` is lagwatch's incident id and the subscription's (`<incident id>/<subscription id>`;
receiver_identity.py), so repeats and updates land on the same PagerDuty incident, the close resolves it, and
another subscription sending to the same service resolves only its own.

Options: `routing-key` (the integration key; masked in api answers), `url` (default: the Events API,
https://events.pagerduty.com/v2/enqueue — a PagerDuty-compatible endpoint, or a test server, otherwise).
Severity: critical for ERR, warning for WARN and lag-seconds thresholds; `source` is the cluster, `component` the
group, and `custom_details` the facts and the worst partitions.
"""

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
