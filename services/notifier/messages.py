"""What a delivery sends: the request for a (subscription, notification), built fresh for every attempt, with the body
of its type's channel (channels/) or of the subscription's sandboxed `body_template` and `url_template`
(templates.py), Burrow's HTTP notifier options and the X-Lagwatch-* headers (docs/webhooks.md#webhooks)."""

from __future__ import annotations

import asyncio
import base64
import functools
import time
from dataclasses import dataclass
from typing import Any

from multidict import CIMultiDict

from lagwatch.services.notifier import channels
from lagwatch.services.notifier.channels import CLOSE_KINDS as CLOSE_KINDS  # (re-exported)
from lagwatch.services.notifier.channels import Notification
from lagwatch.services.notifier.channels.email import Mail
from lagwatch.services.notifier.outbox import Delivery
from lagwatch.services.notifier.subscriptions import Subscription
from lagwatch.shared.notifications.delivery import address_guard, signing
from lagwatch.shared.notifications.subscriptions import destinations
from lagwatch.shared.notifications.subscriptions.masking import is_credential_name
from lagwatch.shared.notifications.templating import template_worker, templates
from lagwatch.shared.runtime.config import SubscriptionConfig

USER_AGENT = "lagwatch-notifier/1"


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


def has_templates(subscription: Subscription) -> bool:
    return bool(subscription.config.body_template or subscription.config.url_template)


async def build_off_the_loop(subscription: Subscription, delivery: Delivery, **options: Any) -> Request | Mail:
    """`build_request`, in a thread when it renders templates: they render in a worker process, which is waited for
    there, never on the event loop."""
    build = functools.partial(build_request, subscription, delivery, **options)
    return await asyncio.to_thread(build) if has_templates(subscription) else build()


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
    note = Notification(
        delivery.event,
        delivery.kind,
        sub,
        notification_id=delivery.notification_id,
        attempt=delivery.attempts,
        reason=delivery.reason,
        dashboard_url=dashboard_url,
        now_ms=int(now * 1000),
        identity_since=identity_since,
    )
    channel = channels.channel(sub.type)
    endpoint = destinations.endpoint(sub)
    ctx = note.context() if has_templates(subscription) else {}
    try:
        url = _url(sub, ctx, endpoint, note.closing)
        body = template_worker.WORKERS.render(sub.body_template, ctx).encode() if sub.body_template else None
    except templates.TemplateProblem as exc:
        raise PermanentError(str(exc)) from None
    body = channel.body(note) if body is None else body
    if channel.mail is not None:  # email: a mail, sent over SMTP by the same delivery loop
        return channel.mail(note, body.decode())
    _check_target(url, endpoint, allow_private)
    headers = _headers(note, int(now), body)
    method = sub.method_close or sub.method if note.closing else sub.method
    return Request(method, url, headers, body, sub.timeout, sub.extra_ca, sub.noverify)


def _url(sub: SubscriptionConfig, ctx: dict[str, Any], endpoint: str, closing: bool) -> str:
    if sub.url_template:  # credential-like extras are not offered (in a URL they would travel in clear)
        extras = {k: v for k, v in ctx["extras"].items() if not is_credential_name(k)}
        return template_worker.WORKERS.render(sub.url_template, {**ctx, "extras": extras}).strip()
    return sub.url_close if closing and sub.url_close else endpoint


def _check_target(url: str, endpoint: str, allow_private: bool) -> None:
    """PermanentError unless `url` may be called: a public address (or private ones allowed), the endpoint's host."""
    try:
        address_guard.check_url_static(url, allow_private=allow_private)
    except address_guard.TargetError as exc:
        raise PermanentError(f"target refused: {exc}") from None
    if address_guard.destination(url) != address_guard.destination(endpoint):  # its headers are for `url`'s host
        raise PermanentError("target refused: url-template must keep the scheme, host and port of url")


def _headers(note: Notification, timestamp: int, body: bytes) -> dict[str, str]:
    sub = note.config
    headers = CIMultiDict({"Content-Type": "application/json", "User-Agent": USER_AGENT})
    for name, value in sub.headers.items():  # the subscription's replace ours, whatever their case...
        headers[name] = value
    if sub.username:  # (never with an Authorization header: subscriptions.py refuses both)
        credentials = f"{sub.username}:{sub.password}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(credentials).decode("ascii")
    headers.update(  # ...except the notifier's own
        {
            signing.EVENT_ID_HEADER: note.notification_id,
            signing.TIMESTAMP_HEADER: str(timestamp),
            signing.KIND_HEADER: note.kind,
            "X-Lagwatch-Subscription": sub.id,
            "X-Lagwatch-Attempt": str(note.attempt),
            **({signing.REASON_HEADER: note.reason} if note.reason else {}),
        }
    )
    if sub.secret:
        headers[signing.SIGNATURE_HEADER] = signing.sign(sub.secret, timestamp, note.notification_id, note.kind, body)
    return dict(headers)
