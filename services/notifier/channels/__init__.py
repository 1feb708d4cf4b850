"""Every destination type is one module here, behind one small interface: a `Channel` says what it sends by default
for a `Notification` (`body`; a `body-template` replaces it for every type), and whether that goes out as a mail
(`mail`). A type's options, endpoint and credentials are its `Destination` (shared/notifications/subscriptions/
destinations.py; None for Slack and webhooks: `url`). What each sends: docs/webhooks.md#what-is-sent."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from lagwatch.services.notifier.receiver_identity import ReceiverIdentity, receiver_identity
from lagwatch.shared.notifications.subscriptions.destinations import Destination
from lagwatch.shared.notifications.subscriptions.notification_policy import Event
from lagwatch.shared.notifications.templating import templates
from lagwatch.shared.runtime import clock
from lagwatch.shared.runtime.config import SubscriptionConfig

if TYPE_CHECKING:
    from lagwatch.services.notifier.channels.email import Mail

CLOSE_KINDS = frozenset({"close", "lag-close"})  # sent to url-close with method-close, when set


class SendFailure(Exception):
    """A non-HTTP channel's attempt failed; delivery.py retries it (`retryable`) or dead-letters it."""

    def __init__(self, message: str, *, retryable: bool, host_failure: bool = False, code: int | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.host_failure = host_failure  # counts against the destination's circuit breaker
        self.code = code  # the server's reply code (SMTP), when it gave one


@dataclass(frozen=True)
class Notification:
    """One notification as a channel renders it: the event, what it tells (`kind`: open, close, lag-open, ...) and,
    for a close that is not the group's own, why (`reason`), to one subscription at one attempt."""

    event: Event
    kind: str
    config: SubscriptionConfig = field(default_factory=SubscriptionConfig)
    notification_id: str = ""
    attempt: int = 1
    reason: str | None = None
    dashboard_url: str = ""
    now_ms: int = field(default_factory=clock.now_ms)
    identity_since: int = 0  # receiver_identity.py

    @property
    def closing(self) -> bool:
        return self.kind in CLOSE_KINDS

    @property
    def duration_s(self) -> float | None:
        """How long the incident has lasted (a close: how long it lasted)."""
        event = self.event
        return templates.incident_duration_s(
            event.incident_started_at, event.evaluated_at, self.kind, self.reason, self.now_ms
        )

    @property
    def receiver(self) -> ReceiverIdentity:
        return receiver_identity(self.event, self.config.id, self.identity_since)

    @property
    def link(self) -> str:
        """`notifier.dashboard-url` for the event's group (`{cluster}`, `{group}` replaced, URL-quoted); '' if unset."""
        cluster, group = quote(self.event.cluster, safe=""), quote(self.event.group, safe="")
        return self.dashboard_url.replace("{cluster}", cluster).replace("{group}", group)

    def context(self) -> dict[str, Any]:
        """What a template sees (templates.py): the event as the JSON document on its topic."""
        return templates.context(
            self.event.as_dict(),
            kind=self.kind,
            subscription_id=self.config.id,
            notification_id=self.notification_id,
            attempt=self.attempt,
            extras=self.config.extras,
            dashboard_url=self.dashboard_url,
            now_ms=self.now_ms,
            reason=self.reason,
            receiver=dataclasses.asdict(self.receiver),
        )


@dataclass(frozen=True)
class Channel:
    type: str
    body: Callable[[Notification], bytes]  # what it sends when no body-template replaces it
    destination: Destination | None = None  # its options, endpoint and credentials (None: a `url` and no more)
    mail: Callable[[Notification, str], Mail] | None = None  # a channel sending mail: the mail of a text


def json_body(document: Callable[[Notification], Any]) -> Callable[[Notification], bytes]:
    """A channel's `body` sending `document` as JSON."""
    return lambda note: json.dumps(document(note)).encode()


@cache
def _all() -> dict[str, Channel]:
    from lagwatch.services.notifier.channels import alertmanager, email, msteams, pagerduty, slack, webhook

    modules = (slack, webhook, alertmanager, pagerduty, msteams, email)
    return {module.CHANNEL.type: module.CHANNEL for module in modules}


def channel(type_: str) -> Channel:
    """The channel of a subscription type (one the configuration accepts)."""
    return _all()[type_]
