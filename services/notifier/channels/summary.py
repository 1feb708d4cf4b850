"""Plain-text words for a notification, shared by the channels that are not Slack (Teams cards, PagerDuty
summaries, Alertmanager annotations, e-mail), and the figures Slack shows too: a title, and the facts worth showing
as name/value pairs."""

from __future__ import annotations

from lagwatch.services.notifier.channels import CLOSE_KINDS
from lagwatch.shared.events.event_codec import present
from lagwatch.shared.events.lag_threshold_event import Alert, LagPartition, LagThresholdEvent, threshold_key
from lagwatch.shared.events.status_event import EventPartition, StatusEvent
from lagwatch.shared.notifications.subscriptions.notification_policy import CLUSTER_FORGOTTEN, UNSUBSCRIBED, Event
from lagwatch.shared.notifications.templating import templates

WORST_SHOWN = 5


def title(event: Event, kind: str, reason: str | None = None) -> str:
    """ "ERR: billing on prod", "Still WARN: ...", "Resolved: billing on prod is OK again", "Lag above 300 s: ..."."""
    where = f"{event.group} on {event.cluster}"
    if reason == UNSUBSCRIBED and kind in CLOSE_KINDS:
        return f"Closed: {where} is no longer covered by this subscription"
    if reason == CLUSTER_FORGOTTEN and kind in CLOSE_KINDS:
        return f"Closed: {where} is no longer watched (lagwatch no longer watches the cluster)"
    if isinstance(event, LagThresholdEvent):
        return _alert_title(event, kind, where)
    if kind == "close":
        return f"Resolved: {where} is {'OK again' if event.status == 'OK' else 'gone (NOTFOUND)'}"
    return f"{'Still ' if kind == 'repeat' else ''}{event.status}: {where}"


def _alert_title(event: LagThresholdEvent, kind: str, where: str) -> str:
    threshold = threshold_seconds(event)
    if event.which == Alert.DATA_LOSS_RISK:
        if kind == "lag-close":
            return f"Resolved: {where} is no longer at risk of data loss"
        return f"{'Still at' if kind == 'lag-repeat' else 'At'} risk of data loss within {threshold}: {where}"
    if event.which == Alert.MESSAGES_SKIPPED:
        if kind == "lag-close":
            return f"Resolved: {where} is no longer behind deleted messages"
        return f"{skipped(event)} messages deleted before consumed: {where}"
    if kind == "lag-close":
        return f"Resolved: {where} is back under {threshold}"
    return f"{'Still above' if kind == 'lag-repeat' else 'Lag above'} {threshold}: {where}"


def threshold_seconds(event: LagThresholdEvent) -> str:
    """A lag-threshold event's threshold, as every destination says it ("300 s")."""
    return f"{threshold_key(event.threshold_seconds)} s"


def skipped(event: LagThresholdEvent | LagPartition) -> str:
    """The messages retention deleted unread ("1,234")."""
    return f"{event.skipped_messages or 0:,}"


def behind(event: Event) -> str:
    seconds = present(event.max_lag_seconds)
    if seconds is None:
        return "unknown"
    return f"{'at least ' if event.max_lag_seconds_lower_bound else ''}{templates.duration(seconds) or '0s'}"


def partitions_not_ok(event: StatusEvent) -> str:
    """The partitions not OK, of all ("5,000 of 5,000"): from the event's count, as its list may hold only the worst
    (an event cut to fit Kafka's record size)."""
    return f"{event.not_ok_count:,} of {event.partition_count:,}"


def facts(event: Event, kind: str, duration_s: float | None) -> list[tuple[str, str]]:
    """Name/value pairs: group, cluster, status, lag, partitions not OK, how long the incident lasts."""
    out = [("Group", event.group), ("Cluster", event.cluster)]
    if isinstance(event, LagThresholdEvent):
        out += [("Behind by", behind(event)), ("Threshold", threshold_seconds(event))]
        out += [("Status (Burrow's rules)", event.status), *_retention_facts(event)]
        out.append(("Total lag", f"{event.totallag:,}"))
    else:
        out += [("Status", f"{event.previous_status} -> {event.status}"), ("Total lag", f"{event.totallag:,}")]
        out.append(("Partitions not OK", partitions_not_ok(event)))
        if present(event.max_lag_seconds) is not None and kind not in CLOSE_KINDS:
            out.append(("Behind by", behind(event)))
    duration = templates.duration(duration_s)
    if duration:
        out.append((f"Incident {'lasted' if kind in CLOSE_KINDS else 'open for'}", duration))
    if event.incident_id:
        out.append(("Incident", event.incident_id))
    return out


def _retention_facts(event: LagThresholdEvent) -> list[tuple[str, str]]:
    """A retention alert's: when retention deletes what the group has not read, and what it deleted unread."""
    if event.which == Alert.LAG_SECONDS:
        return []
    return [("Deleted unread in", deleted_unread_in(event)), ("Messages lost", skipped(event))]


def deleted_unread_in(event: LagThresholdEvent) -> str:
    """When retention deletes the group's oldest unread message. Without an estimate: nothing unread (no lag), or
    no deletion seen coming toward it (a close said "unknown", as if something were wrong)."""
    left = present(event.retention_risk_seconds)
    if left is not None:
        return f"~{templates.duration(left) or '0s'}"
    return "nothing unread" if event.totallag == 0 else "not in sight"


def how_bad(alert: Alert, p: LagPartition) -> str:
    """How far a partition is in its alert: lost messages, time until deleted unread, or time behind."""
    if alert == Alert.MESSAGES_SKIPPED:
        return f"{skipped(p)} messages lost"
    if alert == Alert.DATA_LOSS_RISK:
        return f"deleted unread in ~{templates.duration(present(p.retention_risk_seconds) or 0) or '0s'}"
    return f"{templates.duration(p.lag_seconds) or '?'} behind"


def worst(event: StatusEvent, n: int = WORST_SHOWN) -> list[EventPartition]:
    """The partitions worse than OK with the most lag first."""
    return sorted(event.partitions, key=lambda p: (-p.current_lag, p.topic, p.partition))[:n]


def worst_lines(event: Event, kind: str) -> list[str]:
    """The worst partitions, one line each (none for a close)."""
    if kind in CLOSE_KINDS:
        return []
    if isinstance(event, LagThresholdEvent):
        over = event.partitions[:WORST_SHOWN]
        return [f"{p.topic} / {p.partition}: {how_bad(event.which, p)}, lag {p.current_lag:,}" for p in over]
    return [
        f"{p.topic} / {p.partition}: {p.status}, lag {p.current_lag:,}" + (f" ({p.owner})" if p.owner else "")
        for p in worst(event)
    ]
