"""`slack`: an incoming-webhook POST of a Block Kit message (docs/webhooks.md#slack): the facts as section fields and,
in an attachment coloured by status, the worst partitions, the incident and a button to `notifier.dashboard-url`.
The webhook's URL is a credential: masked in api answers, never logged."""

from __future__ import annotations

from typing import Any

from lagwatch.services.notifier.channels import Channel, Notification, json_body, summary
from lagwatch.shared.events.event_codec import present
from lagwatch.shared.events.lag_threshold_event import Alert, LagPartition, LagThresholdEvent, Reason
from lagwatch.shared.events.status_event import (
    EventPartition,
    ExplanationFields,
    RetentionFields,
    StatusEvent,
    VelocityFields,
)
from lagwatch.shared.notifications.subscriptions.notification_policy import CLUSTER_FORGOTTEN, UNSUBSCRIBED
from lagwatch.shared.notifications.templating import templates

STATUS_EMOJI = {"ERR": ":red_circle:", "WARN": ":large_yellow_circle:", "OK": ":large_green_circle:"}
STATUS_COLOUR = {"ERR": "#E01E5A", "WARN": "#ECB22E", "OK": "#2EB67D", "NOTFOUND": "#9E9E9E"}
LAG_COLOUR = "#E8912D"  # a lag-threshold alert: neither Burrow's WARN nor its ERR
# Slack's Block Kit limits: a message over one is refused with a 400, which dead-letters it
HEADER_MAX = 150  # a header block's text
FIELD_MAX = 2000  # a section field's text
FIELDS_MAX = 10  # fields in a section
SECTION_MAX = 3000  # a section's text
URL_MAX = 3000  # a button's url
WORST_SHOWN = 5
LINE_MAX = (SECTION_MAX - 100) // WORST_SHOWN  # a worst partition's line: all of them, and "…and N more", fit


def escape(text: object) -> str:
    """Text for a mrkdwn field, shown as written: Slack's three escapes, so a name's `<!channel>`, `<@U123>` or
    `<https://…|label>` is no mention or link."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _short(text: str) -> str:
    return text if len(text) <= HEADER_MAX else text[: HEADER_MAX - 1] + "…"


def _clip(text: str, limit: int) -> str:
    """Escaped mrkdwn cut to `limit` characters, ellipsis included, never inside an entity (`&amp;`: escaping
    makes a name up to five times longer, so names are only cut once escaped)."""
    if len(text) <= limit:
        return text
    cut = limit - 1
    entity = text.rfind("&", max(0, cut - 4), cut)  # one starting there would not end before the cut
    if entity != -1 and ";" not in text[entity:cut]:
        cut = entity
    return text[:cut] + "…"


def message(note: Notification) -> dict[str, Any]:
    """The default Slack message: Block Kit blocks, with an attachment coloured by status."""
    event = note.event
    if isinstance(event, LagThresholdEvent):
        return _lag_message(note, event)
    not_ok = event.not_ok_count  # (not the list's length: a large group's event lists only the worst)
    fields = [
        *_where(note),
        f"*Status*\n{event.previous_status} → *{event.status}*",
        f"*Total lag*\n{event.totallag:,}",
        f"*Partitions not OK*\n{summary.partitions_not_ok(event)}",
    ]
    closing = note.kind == "close"
    if present(event.max_lag_seconds) is not None and not closing:  # lag in seconds (lagwatch's own measure)
        fields.append(f"*Behind by*\n{summary.behind(event)}")
    fields += _lasted(note, closing)
    if not closing:
        fields += _insight_fields(event.velocity, event.retention, event.explanation)
    worst = summary.worst(event, WORST_SHOWN) if not closing else []
    lines = "\n".join(_clip(_partition_line(p), LINE_MAX) for p in worst)
    if worst and not_ok > len(worst):
        lines += f"\n…and {not_ok - len(worst):,} more"
    colour = STATUS_COLOUR["OK"] if closing else STATUS_COLOUR.get(event.status, STATUS_COLOUR["NOTFOUND"])
    return _blocks(note, _status_title(note, event), fields, lines, colour)


def _lag_message(note: Notification, event: LagThresholdEvent) -> dict[str, Any]:
    """A lag-threshold event's: the same layout, with the lag, the threshold and the partitions over it."""
    closing = note.kind == "lag-close"
    fields = [
        *_where(note),
        *_alert_fields(event),
        f"*Status (Burrow's rules)*\n{event.status}",
        f"*Total lag*\n{event.totallag:,}",
        *_lasted(note, closing),
    ]
    if not closing:
        fields += _insight_fields(None, None, event.explanation)
    over = event.partitions
    worst = over[:WORST_SHOWN] if not closing else ()
    lines = "\n".join(_clip(_lag_partition_line(p, event.which), LINE_MAX) for p in worst)
    if worst and len(over) > len(worst):
        lines += f"\n…and {len(over) - len(worst)} more"
    title = _lag_title(note.kind, event)
    if note.reason in (UNSUBSCRIBED, CLUSTER_FORGOTTEN) and closing:
        title = _status_title(note, event)
    return _blocks(note, title, fields, lines, STATUS_COLOUR["OK"] if closing else LAG_COLOUR)


def _where(note: Notification) -> list[str]:
    return [f"*Group*\n{escape(note.event.group)}", f"*Cluster*\n{escape(note.event.cluster)}"]


def _lasted(note: Notification, closing: bool) -> list[str]:
    duration = templates.duration(note.duration_s)
    return [f"*Incident {'lasted' if closing else 'open for'}*\n{duration}"] if duration else []


def _status_title(note: Notification, event: StatusEvent | LagThresholdEvent) -> str:
    """The other destinations' title (summary.py) behind an emoji, but for a close that is not the group's own."""
    where = f"{event.group} on {event.cluster}"
    if note.reason == UNSUBSCRIBED and note.closing:
        return _short(f":no_bell: No longer watched here: {where} (this subscription no longer covers it)")
    if note.reason == CLUSTER_FORGOTTEN and note.closing:
        return _short(f":no_bell: No longer watched: {where} (lagwatch no longer watches the cluster)")
    emoji = ":white_check_mark:" if note.kind == "close" else STATUS_EMOJI.get(event.status, ":white_circle:")
    return _short(f"{emoji} {summary.title(event, note.kind)}")


def _partition_line(p: EventPartition) -> str:
    where = f"`{escape(p.topic)}` / {p.partition}"
    owner = f" — {escape(p.owner)}" if p.owner else ""
    client = f" ({escape(p.client_id)})" if p.client_id else ""
    return f"• {where}: *{p.status}*, lag {p.current_lag:,}{owner}{client}"


def _insight_fields(
    velocity: VelocityFields | None, retention: RetentionFields | None, explanation: ExplanationFields | None
) -> list[str]:
    """What lagwatch adds when the event carries it: when the group catches up, when retention deletes, and why."""
    fields = []
    if velocity is not None:
        growth = velocity.lag_growth_per_second
        trend = f" (lag {'+' if growth > 0 else ''}{growth:,.1f} msg/s)" if growth is not None else ""
        if velocity.catchup == "catching_up" and velocity.catchup_seconds is not None:
            fields.append(f"*Catches up in*\n~{templates.duration(velocity.catchup_seconds) or '0s'}{trend}")
        elif velocity.catchup == "never":
            fields.append(f"*Catches up in*\nnever at this rate{trend}")
    if retention is not None and retention.skipped_messages:
        fields.append(f"*Messages lost*\n{retention.skipped_messages:,} deleted by retention before consumed")
    elif retention is not None and retention.retention_risk_seconds is not None:
        left = templates.duration(retention.retention_risk_seconds) or "0s"
        fields.append(f"*Retention deletes unread messages in*\n~{left}")
    if explanation is not None and explanation.text:
        fields.append(f"*Why*\n{escape(explanation.text)}")
    return fields


def _alert_fields(event: LagThresholdEvent) -> list[str]:
    """What the alert measures: the lag and its threshold, or the retention risk and the messages deleted unread."""
    threshold = f"*Threshold*\n{summary.threshold_seconds(event)}"
    if event.which == Alert.LAG_SECONDS:
        return [f"*Behind by*\n{summary.behind(event)}", threshold]
    deleted = f"*Deleted unread in*\n{summary.deleted_unread_in(event)}"
    if event.which == Alert.DATA_LOSS_RISK:
        return [deleted, threshold]
    return [f"*Messages lost*\n{summary.skipped(event)} deleted by retention before consumed", deleted]


def _retention_title(kind: str, event: LagThresholdEvent, where: str) -> str:
    risk = event.which == Alert.DATA_LOSS_RISK
    if kind == "lag-close":
        ended = "No longer at risk of data loss" if risk else "No longer behind deleted messages"
        return f":white_check_mark: {ended}: {where}"
    if risk:
        still = "Still at risk" if kind == "lag-repeat" else "At risk"
        threshold = summary.threshold_seconds(event)
        return f":warning: {still}: retention deletes unread messages within {threshold}: {where}"
    still = "Still lost" if kind == "lag-repeat" else "Lost"
    return f":x: {still}: {summary.skipped(event)} messages deleted before consumed: {where}"


def _lag_title(kind: str, event: LagThresholdEvent) -> str:
    where, threshold = f"{event.group} on {event.cluster}", summary.threshold_seconds(event)
    if event.which != Alert.LAG_SECONDS and event.reason == Reason.RETENTION:
        return _short(_retention_title(kind, event, where))
    if kind != "lag-close":
        still = "Still above" if kind == "lag-repeat" else "Lag above"
        return _short(f":hourglass_flowing_sand: {still} {threshold}: {where}")
    ending = {
        Reason.GROUP_GONE: f"{where} is gone (NOTFOUND)",
        Reason.THRESHOLD_REMOVED: f"{where}: the {threshold} threshold is no longer used",
    }.get(event.reason)
    return _short(
        f":white_check_mark: Lag alert over: {ending}"
        if ending
        else f":white_check_mark: Back under {threshold}: {where}"
    )


def _lag_partition_line(p: LagPartition, alert: Alert) -> str:
    bad = summary.how_bad(alert, p)
    if alert == Alert.LAG_SECONDS:
        bad = f"{'at least ' if p.lag_seconds_lower_bound else ''}{templates.duration(p.lag_seconds)} behind"
    owner = f" — {escape(p.owner)}" if p.owner else ""
    return f"• `{escape(p.topic)}` / {p.partition}: {bad}, lag {p.current_lag:,}{owner}"


def _blocks(note: Notification, title: str, fields: list[str], worst_lines: str, colour: str) -> dict[str, Any]:
    """Header and fields, then an attachment coloured `colour`: the worst partitions, the incident, a button
    (left out when its URL is too long for Slack: a long group name, URL-quoted)."""
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title, "emoji": True}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": _clip(f, FIELD_MAX)} for f in fields[:FIELDS_MAX]]},
    ]
    details: list[dict[str, Any]] = []
    if worst_lines:
        worst = _clip(f"*Worst partitions*\n{worst_lines}", SECTION_MAX)
        details.append({"type": "section", "text": {"type": "mrkdwn", "text": worst}})
    context_bits = [f"evaluated {templates.format_ts(note.event.evaluated_at)}"]
    if note.event.incident_id:
        context_bits.insert(0, f"incident `{note.event.incident_id}`")
    details.append({"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(context_bits)}]})
    link = note.link
    if link and len(link) <= URL_MAX:
        button = {"type": "button", "text": {"type": "plain_text", "text": "Open in lagwatch"}, "url": link}
        details.append({"type": "actions", "elements": [button]})
    # the header is plain text, shown as written; `text` (what notifications show) is mrkdwn, where a name's
    # `<!channel>` would notify everyone and its `<https://…|label>` hide a link
    return {"text": escape(title), "blocks": blocks, "attachments": [{"color": colour, "blocks": details}]}


CHANNEL = Channel("slack", json_body(message))
