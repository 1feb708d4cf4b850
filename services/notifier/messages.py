"""What a delivery sends: the HTTP request for a (subscription, notification), built fresh for every attempt.

* `slack`: an incoming-webhook POST of a Block Kit message (`slack_message`): a header with the status emoji, the
  group, cluster, status change, total lag, partitions not OK and the incident's age as section fields, and — in
  an attachment coloured by status — the worst partitions, the incident id and a button to `notifier.dashboard-url`.
  A close says the group is OK (or gone) again and how long the incident lasted. Events that carry lagwatch's
  velocity and explanation add "Catches up in" (or "never at this rate", with the lag's growth) and
  "Why". A lag-threshold event gets the
  same layout (`lag_slack_message`): "Lag above 300 s" / "Still above" / "Back under", how far behind, the
  threshold, Burrow's status of the group and the partitions over the threshold.
* `webhook`: the event JSON exactly as on its topic (`status_event.encode`: a status-change or lag-threshold
  event), or the subscription's `body_template`.

Either can be replaced by a sandboxed Jinja2 `body_template` (and `url_template`); see templates.py.
Burrow's HTTP notifier options: closes (close, lag-close) go to `url_close` with `method_close` when set; with a
`username`, the request carries basic auth (UTF-8, as Go's SetBasicAuth); `timeout`, `extra_ca` and `noverify`
travel with the request to the sender (delivery.py, tls.py).
Every request carries X-Lagwatch-Event-Id, X-Lagwatch-Timestamp, X-Lagwatch-Notification (open, update, repeat,
close, status, lag-open, lag-repeat, lag-close), X-Lagwatch-Subscription, X-Lagwatch-Attempt and, when the
subscription has a secret, X-Lagwatch-Signature (shared/notifications/delivery/signing.py).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import time
from dataclasses import dataclass
from urllib.parse import quote

from multidict import CIMultiDict

from lagwatch.services.notifier import channels
from lagwatch.services.notifier.channels import email as email_channel
from lagwatch.services.notifier.channels import summary
from lagwatch.services.notifier.channels.email import Mail
from lagwatch.services.notifier.outbox import Delivery
from lagwatch.services.notifier.receiver_identity import receiver_identity
from lagwatch.services.notifier.subscriptions import Subscription
from lagwatch.shared.events.lag_threshold_event import is_lag_threshold_event
from lagwatch.shared.events.status_event import encode, not_ok_count
from lagwatch.shared.notifications.delivery import address_guard, signing
from lagwatch.shared.notifications.subscriptions import destinations
from lagwatch.shared.notifications.subscriptions.masking import is_credential_name
from lagwatch.shared.notifications.subscriptions.notification_policy import CLUSTER_FORGOTTEN, UNSUBSCRIBED
from lagwatch.shared.notifications.templating import template_worker, templates
from lagwatch.shared.runtime.config import SubscriptionConfig

USER_AGENT = "lagwatch-notifier/1"
STATUS_EMOJI = {"ERR": ":red_circle:", "WARN": ":large_yellow_circle:", "OK": ":large_green_circle:"}
STATUS_COLOUR = {"ERR": "#E01E5A", "WARN": "#ECB22E", "OK": "#2EB67D", "NOTFOUND": "#9E9E9E"}
LAG_COLOUR = "#E8912D"  # a lag-threshold alert: neither Burrow's WARN nor its ERR
# Slack's Block Kit limits: a message over one is refused with a 400, which dead-letters it
HEADER_MAX = 150  # a header block's text
FIELD_MAX = 2000  # a section field's text
FIELDS_MAX = 10  # fields in a section
SECTION_MAX = 3000  # a section's text
URL_MAX = 3000  # a button's url
CLOSE_KINDS = frozenset({"close", "lag-close"})  # sent to url-close with method-close, when set
WORST_SHOWN = 5
LINE_MAX = (SECTION_MAX - 100) // WORST_SHOWN  # a worst partition's line: all of them, and "…and N more", fit


class PermanentError(ValueError):
    """The request cannot be built (a template fails, a URL is not allowed): retrying cannot help."""


@dataclass(frozen=True)
class Request:
    method: str
    url: str
    headers: dict[str, str]
    body: bytes
    timeout_s: float = 0.0  # 0: the notifier's request-timeout
    extra_ca: str = ""  # CAs trusted besides the system's (tls.py)
    noverify: bool = False


def _slack_escape(text: object) -> str:
    """Text for a mrkdwn field, shown as written: Slack's three escapes, so a name's `<!channel>`, `<@U123>` or
    `<https://…|label>` is no mention or link."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def dashboard_link(dashboard_url: str, cluster: str, group: str) -> str:
    """`notifier.dashboard-url`, with `{cluster}` and `{group}` replaced (URL-quoted) when it has them."""
    return dashboard_url.replace("{cluster}", quote(cluster, safe="")).replace("{group}", quote(group, safe=""))


def _title(kind: str, event: dict, reason: str | None = None) -> str:
    status, group, cluster = event["status"], event["group"], event["cluster"]
    if reason == UNSUBSCRIBED and kind in CLOSE_KINDS:
        text = f":no_bell: No longer watched here: {group} on {cluster} (this subscription no longer covers it)"
    elif reason == CLUSTER_FORGOTTEN and kind in CLOSE_KINDS:
        text = f":no_bell: No longer watched: {group} on {cluster} (lagwatch no longer watches the cluster)"
    elif kind == "close":
        back = "is OK again" if status == "OK" else "is gone (NOTFOUND)"
        text = f":white_check_mark: Resolved: {group} on {cluster} {back}"
    elif kind == "repeat":
        text = f"{STATUS_EMOJI.get(status, ':white_circle:')} Still {status}: {group} on {cluster}"
    else:
        text = f"{STATUS_EMOJI.get(status, ':white_circle:')} {status}: {group} on {cluster}"
    return _short(text)


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


def _partition_line(p: dict) -> str:
    where = f"`{_slack_escape(p['topic'])}` / {p['partition']}"
    owner = f" — {_slack_escape(p['owner'])}" if p.get("owner") else ""
    client = f" ({_slack_escape(p['client_id'])})" if p.get("client_id") else ""
    return f"• {where}: *{p['status']}*, lag {p['current_lag']:,}{owner}{client}"


def slack_message(event: dict, kind: str, context: dict, dashboard_url: str = "") -> dict:
    """The default Slack message: Block Kit blocks, with a status-coloured attachment."""
    status = event["status"]
    duration = templates.duration(context["incident"]["duration_s"])
    not_ok = not_ok_count(event)  # (not the list's length: a large group's event lists only the worst)
    fields = [
        f"*Group*\n{_slack_escape(event['group'])}",
        f"*Cluster*\n{_slack_escape(event['cluster'])}",
        f"*Status*\n{event['previous_status']} → *{status}*",
        f"*Total lag*\n{event['totallag']:,}",
        f"*Partitions not OK*\n{summary.partitions_not_ok(event)}",
    ]
    if event.get("max_lag_seconds") is not None and kind != "close":  # lag in seconds (lagwatch's own measure)
        fields.append(f"*Behind by*\n{summary.behind(event)}")
    if duration:
        fields.append(f"*Incident {'lasted' if kind == 'close' else 'open for'}*\n{duration}")
    if kind != "close":
        fields.extend(_insight_fields(event))
    worst = templates.worst_partitions(event, WORST_SHOWN) if kind != "close" else []
    lines = "\n".join(_clip(_partition_line(p), LINE_MAX) for p in worst)
    if worst and not_ok > len(worst):
        lines += f"\n…and {not_ok - len(worst):,} more"
    colour = STATUS_COLOUR["OK"] if kind == "close" else STATUS_COLOUR.get(status, STATUS_COLOUR["NOTFOUND"])
    return _blocks(_title(kind, event, summary.reason(context)), fields, lines, event, colour, dashboard_url)


def lag_slack_message(event: dict, kind: str, context: dict, dashboard_url: str = "") -> dict:
    """The default Slack message for a lag-threshold event ("lag above N s" / "back under N s"): the same layout,
    with the lag in seconds, the threshold and Burrow's status of the group, and the partitions over it."""
    closing = kind == "lag-close"
    duration = templates.duration(context["incident"]["duration_s"])
    over = event.get("partitions") or []
    fields = [
        f"*Group*\n{_slack_escape(event['group'])}",
        f"*Cluster*\n{_slack_escape(event['cluster'])}",
        *_alert_fields(event),
        f"*Status (Burrow's rules)*\n{event['status']}",
        f"*Total lag*\n{event['totallag']:,}",
    ]
    if duration:
        fields.append(f"*Incident {'lasted' if closing else 'open for'}*\n{duration}")
    if not closing:
        fields.extend(_insight_fields(event))
    worst = over[:WORST_SHOWN] if not closing else []
    lines = "\n".join(_clip(_lag_partition_line(p, event.get("alert", "lag-seconds")), LINE_MAX) for p in worst)
    if worst and len(over) > len(worst):
        lines += f"\n…and {len(over) - len(worst)} more"
    colour = STATUS_COLOUR["OK"] if closing else LAG_COLOUR
    title = _lag_title(kind, event)
    if summary.reason(context) in (UNSUBSCRIBED, CLUSTER_FORGOTTEN) and closing:
        title = _title(kind, event, summary.reason(context))
    return _blocks(title, fields, lines, event, colour, dashboard_url)


def _insight_fields(event: dict) -> list[str]:
    """lagwatch's velocity, retention risk and explanation, when the event carries them: when the group
    catches up (or that it will not at this rate), when retention deletes what it has not read (or what it lost)
    and why it is where it is."""
    fields = []
    velocity = event.get("velocity") or {}
    growth = velocity.get("lag_growth_per_second")
    trend = f" (lag {'+' if growth > 0 else ''}{growth:,.1f} msg/s)" if growth is not None else ""
    if velocity.get("catchup") == "catching_up" and velocity.get("catchup_seconds") is not None:
        fields.append(f"*Catches up in*\n~{templates.duration(velocity['catchup_seconds']) or '0s'}{trend}")
    elif velocity.get("catchup") == "never":
        fields.append(f"*Catches up in*\nnever at this rate{trend}")
    retention = event.get("retention") or {}
    if retention.get("skipped_messages"):
        fields.append(f"*Messages lost*\n{retention['skipped_messages']:,} deleted by retention before consumed")
    elif retention.get("retention_risk_seconds") is not None:
        left = templates.duration(retention["retention_risk_seconds"]) or "0s"
        fields.append(f"*Retention deletes unread messages in*\n~{left}")
    explanation = event.get("explanation")
    if explanation and explanation.get("text"):
        fields.append(f"*Why*\n{_slack_escape(explanation['text'])}")
    return fields


def _alert_fields(event: dict) -> list[str]:
    """What the alert measures: the lag in seconds and its threshold, or the retention risk (data-loss-risk) and
    the messages retention deleted unread (messages-skipped)."""
    alert = event.get("alert", "lag-seconds")
    if alert == "lag-seconds":
        return [f"*Behind by*\n{summary.behind(event)}", f"*Threshold*\n{summary.threshold_seconds(event)}"]
    fields = [f"*Deleted unread in*\n{summary.deleted_unread_in(event)}"]
    if alert == "data-loss-risk":
        return [*fields, f"*Threshold*\n{summary.threshold_seconds(event)}"]
    return [f"*Messages lost*\n{event.get('skipped_messages', 0):,} deleted by retention before consumed", *fields]


def _retention_title(kind: str, event: dict, where: str) -> str:
    risk = event.get("alert") == "data-loss-risk"
    if kind == "lag-close":
        ended = "No longer at risk of data loss" if risk else "No longer behind deleted messages"
        return f":white_check_mark: {ended}: {where}"
    if risk:
        still = "Still at risk" if kind == "lag-repeat" else "At risk"
        return (
            f":warning: {still}: retention deletes unread messages within {summary.threshold_seconds(event)}: {where}"
        )
    still = "Still lost" if kind == "lag-repeat" else "Lost"
    return f":x: {still}: {event.get('skipped_messages', 0):,} messages deleted before consumed: {where}"


def _lag_title(kind: str, event: dict) -> str:
    where = f"{event['group']} on {event['cluster']}"
    if event.get("alert", "lag-seconds") != "lag-seconds" and event.get("reason") in (None, "retention"):
        return _short(_retention_title(kind, event, where))
    if kind != "lag-close":
        still = "Still above" if kind == "lag-repeat" else "Lag above"
        return _short(f":hourglass_flowing_sand: {still} {summary.threshold_seconds(event)}: {where}")
    ending = {
        "group_gone": f"{where} is gone (NOTFOUND)",
        "threshold_removed": f"{where}: the {summary.threshold_seconds(event)} threshold is no longer used",
    }.get(event.get("reason", "lag"))
    return _short(
        f":white_check_mark: Lag alert over: {ending}"
        if ending
        else f":white_check_mark: Back under {summary.threshold_seconds(event)}: {where}"
    )


def _lag_partition_line(p: dict, alert: str = "lag-seconds") -> str:
    where = f"`{_slack_escape(p['topic'])}` / {p['partition']}"
    owner = f" — {_slack_escape(p['owner'])}" if p.get("owner") else ""
    if alert == "messages-skipped":
        return f"• {where}: {p.get('skipped_messages', 0):,} messages lost, lag {p['current_lag']:,}{owner}"
    if alert == "data-loss-risk":
        left = templates.duration(p.get("retention_risk_seconds") or 0) or "0s"
        return f"• {where}: deleted unread in ~{left}, lag {p['current_lag']:,}{owner}"
    at_least = "at least " if p.get("lag_seconds_lower_bound") else ""
    return f"• {where}: {at_least}{templates.duration(p['lag_seconds'])} behind, lag {p['current_lag']:,}{owner}"


def _blocks(title: str, fields: list[str], worst_lines: str, event: dict, colour: str, dashboard_url: str) -> dict:
    """Header and fields, then an attachment coloured `colour`: the worst partitions, the incident, a button
    (left out when its URL is too long for Slack: a long group name, URL-quoted)."""
    blocks: list[dict] = [
        {"type": "header", "text": {"type": "plain_text", "text": title, "emoji": True}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": _clip(f, FIELD_MAX)} for f in fields[:FIELDS_MAX]]},
    ]
    details: list[dict] = []
    if worst_lines:
        worst = _clip(f"*Worst partitions*\n{worst_lines}", SECTION_MAX)
        details.append({"type": "section", "text": {"type": "mrkdwn", "text": worst}})
    context_bits = [f"evaluated {templates.format_ts(event['evaluated_at'])}"]
    if event.get("incident_id"):
        context_bits.insert(0, f"incident `{event['incident_id']}`")
    details.append({"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(context_bits)}]})
    link = dashboard_link(dashboard_url, event["cluster"], event["group"]) if dashboard_url else ""
    if link and len(link) <= URL_MAX:
        details.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Open in lagwatch"},
                        "url": link,
                    }
                ],
            }
        )
    # the header is plain text, shown as written; `text` (what notifications show) is mrkdwn, where a name's
    # `<!channel>` would notify everyone and its `<https://…|label>` hide a link
    text = _slack_escape(title)
    return {"text": text, "blocks": blocks, "attachments": [{"color": colour, "blocks": details}]}


def _templated_url(source: str, ctx: dict) -> str:
    """A url-template's URL; credential-like extras are not offered (in a URL they would travel in clear)."""
    extras = {k: v for k, v in ctx["extras"].items() if not is_credential_name(k)}
    return template_worker.WORKERS.render(source, {**ctx, "extras": extras}).strip()


def has_templates(subscription: Subscription) -> bool:
    return bool(subscription.config.body_template or subscription.config.url_template)


def build_request(
    subscription: Subscription,
    delivery: Delivery,
    *,
    dashboard_url: str = "",
    allow_private: bool = False,
    now: float | None = None,
    identity_since: int = 0,
) -> Request | Mail:
    """The request for this attempt (`delivery.attempts` already counts it); PermanentError when impossible.
    With templates, this blocks the calling thread while a template worker renders them (`has_templates`)."""
    now = time.time() if now is None else now
    sub = subscription.config
    ctx = templates.context(
        delivery.event,
        kind=delivery.kind,
        subscription_id=sub.id,
        notification_id=delivery.notification_id,
        attempt=delivery.attempts,
        extras=sub.extras,
        dashboard_url=dashboard_url,
        now_ms=int(now * 1000),
        reason=delivery.reason,
        receiver=dataclasses.asdict(receiver_identity(delivery.event, sub.id, identity_since)),
    )
    channel = channels.channel(sub.type)
    endpoint = destinations.endpoint(sub)
    closing = delivery.kind in CLOSE_KINDS
    try:
        if channel is not None and not channel.http:  # email: a mail, sent over SMTP by the same delivery loop
            return _mail(sub, delivery, ctx, dashboard_url, now)
        url = _url(sub, ctx, endpoint, closing)
        body = _body(sub, channel, delivery, ctx, dashboard_url)
    except templates.TemplateProblem as exc:
        raise PermanentError(str(exc)) from None
    _check_target(url, endpoint, allow_private)
    headers = _headers(sub, delivery, int(now), body)
    method = sub.method_close or sub.method if closing else sub.method
    return Request(method, url, headers, body, sub.timeout, sub.extra_ca, sub.noverify)


def _mail(sub: SubscriptionConfig, delivery: Delivery, ctx: dict, dashboard_url: str, now: float) -> Mail:
    text = template_worker.WORKERS.render(sub.body_template, ctx) if sub.body_template else None
    return email_channel.build(
        sub,
        delivery.event,
        delivery.kind,
        ctx,
        text,
        dashboard_url,
        notification_id=delivery.notification_id,
        attempt=delivery.attempts,
        timestamp=int(now),
    )


def _url(sub: SubscriptionConfig, ctx: dict, endpoint: str, closing: bool) -> str:
    url = _templated_url(sub.url_template, ctx) if sub.url_template else endpoint
    if closing and sub.url_close and not sub.url_template:
        url = sub.url_close
    return url


def _body(
    sub: SubscriptionConfig, channel: channels.Channel | None, delivery: Delivery, ctx: dict, dashboard_url: str
) -> bytes:
    if sub.body_template:
        return template_worker.WORKERS.render(sub.body_template, ctx).encode()
    if channel is not None and channel.body is not None:  # alertmanager, pagerduty, msteams
        return channel.body(sub, delivery.event, delivery.kind, ctx, dashboard_url)
    if sub.type == "slack":
        message = lag_slack_message if is_lag_threshold_event(delivery.event) else slack_message
        return json.dumps(message(delivery.event, delivery.kind, ctx, dashboard_url)).encode()
    return encode(delivery.event)


def _check_target(url: str, endpoint: str, allow_private: bool) -> None:
    """PermanentError unless `url` may be called: a public address (or private ones allowed), the endpoint's host."""
    try:
        address_guard.check_url_static(url, allow_private=allow_private)
    except address_guard.TargetError as exc:
        raise PermanentError(f"target refused: {exc}") from None
    if address_guard.destination(url) != address_guard.destination(endpoint):  # its headers are for `url`'s host
        raise PermanentError("target refused: url-template must keep the scheme, host and port of url")


def _headers(sub: SubscriptionConfig, delivery: Delivery, timestamp: int, body: bytes) -> dict[str, str]:
    headers = CIMultiDict({"Content-Type": "application/json", "User-Agent": USER_AGENT})
    for name, value in sub.headers.items():  # the subscription's replace ours, whatever their case...
        headers[name] = value
    if sub.username:  # (never with an Authorization header: subscriptions.py refuses both)
        credentials = f"{sub.username}:{sub.password}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(credentials).decode("ascii")
    headers.update(  # ...except the notifier's own
        {
            signing.EVENT_ID_HEADER: delivery.notification_id,
            signing.TIMESTAMP_HEADER: str(timestamp),
            signing.KIND_HEADER: delivery.kind,
            "X-Lagwatch-Subscription": sub.id,
            "X-Lagwatch-Attempt": str(delivery.attempts),
            **({signing.REASON_HEADER: delivery.reason} if delivery.reason else {}),
        }
    )
    if sub.secret:
        headers[signing.SIGNATURE_HEADER] = signing.sign(
            sub.secret, timestamp, delivery.notification_id, delivery.kind, body
        )
    return dict(headers)
