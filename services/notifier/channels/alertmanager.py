"""`alertmanager`: alerts POSTed to an Alertmanager's `/api/v2/alerts`, so its receivers, routing, grouping,
inhibition and silences serve lagwatch's incidents.

* open, update and repeat send the alert firing (`startsAt` = when the incident began) with an `endsAt` ahead, as
  Prometheus does: three `send-interval`s ahead with repeats (if lagwatch stops sending, Alertmanager resolves the
  alert by itself), a day ahead without (no `resolve_timeout` resolves an incident still open); close sends it
  resolved (`endsAt` = when the group was OK or gone again).
* labels: `alertname` (`KafkaConsumerGroupStatus`, or `KafkaConsumerLagSeconds` for a lag-seconds threshold),
  `cluster`, `group`, `status` (WARN or ERR; ABOVE for a lag threshold), `severity` (warning, or critical for ERR),
  `subscription` (the subscription's id: another subscription sending to the same Alertmanager keeps its own
  alert; receiver_identity.py) and, for a lag threshold, `threshold`. Alertmanager names an alert by its labels,
  so a WARN -> ERR update fires the ERR alert and resolves the WARN one in the same request, and a close resolves
  both (the receiver's resolved notification may list the one never fired as resolved too).
* annotations: `summary`, `description` (the facts and worst partitions), `incident_id` and, with
  `notifier.dashboard-url`, `dashboard`; `generatorURL` links the dashboard too.

Option: `url`, the Alertmanager's base URL (`http://alertmanager:9093`; a URL already ending in `/api/v2/alerts`
is used as it is).
"""

from __future__ import annotations

import json

from lagwatch.services.notifier.channels import Channel, summary
from lagwatch.shared.events.lag_threshold_event import is_lag_threshold_event, threshold_key
from lagwatch.shared.notifications.subscriptions.destinations import ALERTMANAGER
from lagwatch.shared.notifications.templating import templates
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.config import SubscriptionConfig

BAD = ("WARN", "ERR")
SEVERITY = {"ERR": "critical", "WARN": "warning"}


def _iso(ms: int | None) -> str:
    return templates.format_ts(ms, "%Y-%m-%dT%H:%M:%S.") + f"{int(ms or 0) % 1000:03d}Z"


ALERT_NAMES = {"data-loss-risk": "KafkaConsumerDataLossRisk", "messages-skipped": "KafkaConsumerMessagesSkipped"}


def labels(event: dict, status: str, subscription: str | None = None) -> dict[str, str]:
    """An alert's labels: its name in Alertmanager. `subscription` (receiver_identity.py) tells apart the alerts of
    two subscriptions sending to one Alertmanager, so one's close resolves only its own."""
    named = {"subscription": subscription} if subscription else {}
    if is_lag_threshold_event(event):
        return {
            "alertname": ALERT_NAMES.get(event.get("alert", ""), "KafkaConsumerLagSeconds"),
            "cluster": event["cluster"],
            "group": event["group"],
            "status": "ABOVE",
            "severity": "warning",
            "threshold": threshold_key(event["threshold_seconds"]),
            **named,
        }
    return {
        "alertname": "KafkaConsumerGroupStatus",
        "cluster": event["cluster"],
        "group": event["group"],
        "status": status,
        "severity": SEVERITY.get(status, "info"),
        **named,
    }


FIRING_FOR_S = 86_400.0  # without repeats: how long a firing alert holds in Alertmanager unless closed
REPEATS_HELD = 3  # with repeats: send-intervals a firing alert holds


def alerts(event: dict, kind: str, ctx: dict, dashboard_url: str = "", send_interval_s: float = 0.0) -> list[dict]:
    """The alerts one notification posts: the firing one (unless it closes) and the resolved ones."""
    now = now_ms()
    started = min(event.get("incident_started_at") or event["evaluated_at"], now)  # (clocks apart: never ahead)
    lines = [f"{name}: {value}" for name, value in summary.facts(event, kind, ctx)]
    worst = summary.worst_lines(event, kind)
    if worst:
        lines += ["Worst partitions:", *worst]
    annotations = {"summary": summary.title(event, kind, summary.reason(ctx)), "description": "\n".join(lines)}
    subscription = ctx["notification"]["receiver"]["subscription"]
    if event.get("incident_id"):
        annotations["incident_id"] = event["incident_id"]
    link = ""
    if dashboard_url:
        link = summary.link(dashboard_url, event)
        annotations["dashboard"] = link

    ended = min(event["evaluated_at"], now)  # an end still ahead would keep it firing

    holds_ms = int(1000 * (REPEATS_HELD * send_interval_s if send_interval_s > 0 else FIRING_FOR_S))

    def alert(status: str, resolved: bool) -> dict:
        doc = {"labels": labels(event, status, subscription), "annotations": annotations, "startsAt": _iso(started)}
        doc["endsAt"] = _iso(ended if resolved else now + holds_ms)
        if link:
            doc["generatorURL"] = link
        return doc

    if is_lag_threshold_event(event):
        return [alert("ABOVE", summary.is_close(kind))]
    if summary.is_close(kind):
        return [alert(status, True) for status in BAD]
    firing, before = event["status"], event.get("previous_status")
    moved = kind == "update" and before in BAD and before != firing  # WARN -> ERR: a new alert, the old one over
    return [alert(firing, False), *([alert(before, True)] if moved and before is not None else [])]


def body(config: SubscriptionConfig, event: dict, kind: str, ctx: dict, dashboard_url: str) -> bytes:
    repeats = config.send_interval if not config.send_once else 0.0
    return json.dumps(alerts(event, kind, ctx, dashboard_url, repeats)).encode()


CHANNEL = Channel(ALERTMANAGER, body)
