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

import json

from lagwatch.services.notifier.channels import Channel, summary
from lagwatch.shared.events.lag_threshold_event import is_lag_threshold_event
from lagwatch.shared.notifications.subscriptions.destinations import PAGERDUTY
from lagwatch.shared.runtime.config import SubscriptionConfig

SUMMARY_MAX = 1024  # the Events API's limit
SEVERITY = {"ERR": "critical", "WARN": "warning"}


def event_body(config: SubscriptionConfig, event: dict, kind: str, ctx: dict, dashboard_url: str) -> dict:
    doc: dict = {
        "routing_key": config.routing_key,
        "dedup_key": ctx["notification"]["receiver"]["key"],
        "event_action": "resolve" if summary.is_close(kind) else "trigger",
    }
    if summary.is_close(kind):
        return doc
    lag = is_lag_threshold_event(event)
    doc["payload"] = {
        "summary": summary.title(event, kind, summary.reason(ctx))[:SUMMARY_MAX],
        "source": event["cluster"],
        "severity": "warning" if lag else SEVERITY.get(event["status"], "info"),
        "component": event["group"],
        "group": event["cluster"],
        "class": f"consumer-{event.get('alert', 'lag-seconds')}" if lag else "consumer-group-status",
        "custom_details": {
            **dict(summary.facts(event, kind, ctx)),
            "worst_partitions": summary.worst_lines(event, kind),
            "notification": kind,
        },
    }
    doc["client"] = "lagwatch"
    if dashboard_url:
        link = summary.link(dashboard_url, event)
        doc["client_url"] = link
        doc["links"] = [{"href": link, "text": "Open in lagwatch"}]
    return doc


def body(config: SubscriptionConfig, event: dict, kind: str, ctx: dict, dashboard_url: str) -> bytes:
    return json.dumps(event_body(config, event, kind, ctx, dashboard_url)).encode()


CHANNEL = Channel(PAGERDUTY, body)
