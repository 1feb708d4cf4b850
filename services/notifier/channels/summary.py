"""Plain-text words for a notification, shared by the channels that are not Slack (Teams cards, PagerDuty
summaries, Alertmanager annotations, e-mail): a title, and the facts worth showing as name/value pairs."""

from __future__ import annotations

from urllib.parse import quote

from lagwatch.shared.events.lag_threshold_event import is_lag_threshold_event, threshold_key
from lagwatch.shared.events.status_event import not_ok_count
from lagwatch.shared.notifications.subscriptions.notification_policy import CLUSTER_FORGOTTEN, UNSUBSCRIBED
from lagwatch.shared.notifications.templating import templates

CLOSING = frozenset({"close", "lag-close"})
WORST_SHOWN = 5


def link(dashboard_url: str, event: dict) -> str:
    """`notifier.dashboard-url` for the event's group (`{cluster}`, `{group}` replaced, URL-quoted); '' if unset."""
    return dashboard_url.replace("{cluster}", quote(event["cluster"], safe="")).replace(
        "{group}", quote(event["group"], safe="")
    )


def is_close(kind: str) -> bool:
    return kind in CLOSING


def reason(ctx: dict) -> str | None:
    """Why a close is sent when it is not the group's own (notifier/scope.py: "unsubscribed", "cluster_forgotten"),
    else None."""
    return ctx["notification"].get("reason")


def title(event: dict, kind: str, reason: str | None = None) -> str:
    """ "ERR: billing on prod", "Still WARN: ...", "Resolved: billing on prod is OK again", "Lag above 300 s: ..."."""
    where = f"{event['group']} on {event['cluster']}"
    if reason == UNSUBSCRIBED and is_close(kind):
        return f"Closed: {where} is no longer covered by this subscription"
    if reason == CLUSTER_FORGOTTEN and is_close(kind):
        return f"Closed: {where} is no longer watched (lagwatch no longer watches the cluster)"
    if is_lag_threshold_event(event):
        threshold = threshold_seconds(event)
        if event.get("alert") == "data-loss-risk":
            if kind == "lag-close":
                return f"Resolved: {where} is no longer at risk of data loss"
            return f"{'Still at' if kind == 'lag-repeat' else 'At'} risk of data loss within {threshold}: {where}"
        if event.get("alert") == "messages-skipped":
            if kind == "lag-close":
                return f"Resolved: {where} is no longer behind deleted messages"
            return f"{event.get('skipped_messages', 0):,} messages deleted before consumed: {where}"
        if kind == "lag-close":
            return f"Resolved: {where} is back under {threshold}"
        return f"{'Still above' if kind == 'lag-repeat' else 'Lag above'} {threshold}: {where}"
    if kind == "close":
        return f"Resolved: {where} is {'OK again' if event['status'] == 'OK' else 'gone (NOTFOUND)'}"
    return f"{'Still ' if kind == 'repeat' else ''}{event['status']}: {where}"


def threshold_seconds(event: dict) -> str:
    """A lag-threshold event's threshold, as every destination says it ("300 s")."""
    return f"{threshold_key(event['threshold_seconds'])} s"


def behind(event: dict) -> str:
    if event.get("max_lag_seconds") is None:
        return "unknown"
    at_least = "at least " if event.get("max_lag_seconds_lower_bound") else ""
    return f"{at_least}{templates.duration(event['max_lag_seconds']) or '0s'}"


def partitions_not_ok(event: dict) -> str:
    """The partitions not OK, of all ("5,000 of 5,000"): from the event's count, as its list may hold only the worst
    (an event cut to fit Kafka's record size)."""
    return f"{not_ok_count(event):,} of {event['partition_count']:,}"


def facts(event: dict, kind: str, ctx: dict) -> list[tuple[str, str]]:
    """Name/value pairs: group, cluster, status, lag, partitions not OK, how long the incident lasts."""
    out = [("Group", event["group"]), ("Cluster", event["cluster"])]
    if is_lag_threshold_event(event):
        out += [
            ("Behind by", behind(event)),
            ("Threshold", threshold_seconds(event)),
            ("Status (Burrow's rules)", event["status"]),
            *_retention_facts(event),
        ]
    else:
        out.append(("Status", f"{event['previous_status']} -> {event['status']}"))
    out.append(("Total lag", f"{event['totallag']:,}"))
    if not is_lag_threshold_event(event):
        out.append(("Partitions not OK", partitions_not_ok(event)))
        if event.get("max_lag_seconds") is not None and not is_close(kind):
            out.append(("Behind by", behind(event)))
    duration = templates.duration(ctx["incident"]["duration_s"])
    if duration:
        out.append((f"Incident {'lasted' if is_close(kind) else 'open for'}", duration))
    if event.get("incident_id"):
        out.append(("Incident", event["incident_id"]))
    return out


def _retention_facts(event: dict) -> list[tuple[str, str]]:
    """A retention alert's: when retention deletes what the group has not read, and what it deleted unread."""
    if event.get("alert", "lag-seconds") == "lag-seconds":
        return []
    return [("Deleted unread in", deleted_unread_in(event)), ("Messages lost", f"{event.get('skipped_messages', 0):,}")]


def deleted_unread_in(event: dict) -> str:
    """When retention deletes the group's oldest unread message. Without an estimate: nothing unread (no lag), or
    no deletion seen coming toward it (a close said "unknown", as if something were wrong)."""
    left = event.get("retention_risk_seconds")
    if left is not None:
        return f"~{templates.duration(left) or '0s'}"
    return "nothing unread" if event.get("totallag") == 0 else "not in sight"


def _how_bad(event: dict, p: dict) -> str:
    alert = event.get("alert", "lag-seconds")
    if alert == "messages-skipped":
        return f"{p.get('skipped_messages', 0):,} messages lost"
    if alert == "data-loss-risk":
        return f"deleted unread in ~{templates.duration(p.get('retention_risk_seconds') or 0) or '0s'}"
    return f"{templates.duration(p.get('lag_seconds')) or '?'} behind"


def worst_lines(event: dict, kind: str) -> list[str]:
    """The worst partitions, one line each (none for a close)."""
    if is_close(kind):
        return []
    if is_lag_threshold_event(event):
        over = (event.get("partitions") or [])[:WORST_SHOWN]
        return [f"{p['topic']} / {p['partition']}: {_how_bad(event, p)}, lag {p['current_lag']:,}" for p in over]
    return [
        f"{p['topic']} / {p['partition']}: {p['status']}, lag {p['current_lag']:,}"
        + (f" ({p['owner']})" if p.get("owner") else "")
        for p in templates.worst_partitions(event, WORST_SHOWN)
    ]
