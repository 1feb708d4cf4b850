"""Destination types beyond Slack and webhooks (`alertmanager`, `pagerduty`, `msteams`, `email`): one module each,
behind one small interface, `Channel`.

What a type asks of a subscription's options, where its requests go and which options are credentials is its
`Destination` (shared/notifications/subscriptions/destinations.py: the api checks subscriptions with it too); a channel
adds what it sends by default (`body`: HTTP types) — a `body-template` replaces that body as for webhooks. HTTP channels
go through the notifier's one HTTP client (the address guard at connect time, retries, Retry-After, circuit breakers,
dead letters, X-Lagwatch-* headers and signing); `email` builds a `Mail` that the same delivery loop sends over
SMTP (email.py).

Slack and webhooks stay in messages.py; `channel(type)` is None for them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lagwatch.shared.notifications.subscriptions.destinations import Destination
from lagwatch.shared.runtime.config import SubscriptionConfig

# (subscription, event, kind, template context, dashboard url) -> the request body
BodyBuilder = Callable[[SubscriptionConfig, dict, str, dict, str], bytes]


class SendFailure(Exception):
    """A non-HTTP channel's attempt failed; delivery.py retries it (`retryable`) or dead-letters it."""

    def __init__(self, message: str, *, retryable: bool, host_failure: bool = False, code: int | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.host_failure = host_failure  # counts against the destination's circuit breaker
        self.code = code  # the server's reply code (SMTP), when it gave one


@dataclass(frozen=True)
class Channel:
    destination: Destination  # its options, endpoint and credentials
    body: BodyBuilder | None = None  # the default body of an HTTP channel (None: not HTTP)
    http: bool = True

    @property
    def type(self) -> str:
        return self.destination.type


def _all() -> dict[str, Channel]:
    from lagwatch.services.notifier.channels import alertmanager, email, msteams, pagerduty

    return {c.type: c for c in (alertmanager.CHANNEL, pagerduty.CHANNEL, msteams.CHANNEL, email.CHANNEL)}


def channel(type_: str) -> Channel | None:
    """The channel of a subscription type; None for `slack` and `webhook` (messages.py)."""
    return _all().get(type_)
