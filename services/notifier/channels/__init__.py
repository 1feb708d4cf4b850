"""Destination types beyond Slack and webhooks (`alertmanager`, `pagerduty`, `msteams`, `email`): one module each,
behind one small interface, `Channel`.

A channel says what its options must be (`check`), where a subscription's requests go (`endpoint`, also the
per-destination queue and circuit breaker of delivery.py), and what it sends by default (`body`: HTTP types) — a
`body-template` replaces that body as for webhooks. HTTP channels go through the notifier's one HTTP client (the
address guard at connect time, retries, Retry-After, circuit breakers, dead letters, X-Lagwatch-* headers and
signing); `email` builds a `Mail` that the same delivery loop sends over SMTP (email.py).

Slack and webhooks stay in messages.py; `channel(type)` is None for them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lagwatch.shared.config import SubscriptionConfig

URL_OPTIONAL = frozenset({"email", "pagerduty"})  # the types that need no `url`
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
    type: str
    check: Callable[[SubscriptionConfig], dict[str, str]]  # problems of its options, {field: problem}
    endpoint: Callable[[SubscriptionConfig], str]  # where requests go: an http(s) URL, or smtp://host:port
    body: BodyBuilder | None = None  # the default body of an HTTP channel (None: not HTTP)
    options: tuple[str, ...] = ()  # its own options (fields of SubscriptionConfig no other type uses)
    secrets: tuple[str, ...] = ()  # options masked in api answers
    http: bool = True


def _all() -> dict[str, Channel]:
    from lagwatch.services.notifier.channels import alertmanager, email, msteams, pagerduty

    return {c.type: c for c in (alertmanager.CHANNEL, pagerduty.CHANNEL, msteams.CHANNEL, email.CHANNEL)}


def channel(type_: str) -> Channel | None:
    """The channel of a subscription type; None for `slack` and `webhook` (messages.py)."""
    return _all().get(type_)


def secret_options() -> tuple[str, ...]:
    """Every channel's credential options (masked in api answers whatever the type)."""
    return tuple(name for c in _all().values() for name in c.secrets)


def endpoint(config: SubscriptionConfig) -> str:
    """Where a subscription's requests go (for Slack and webhooks: `url`)."""
    found = channel(config.type)
    return found.endpoint(config) if found else config.url


def problems(config: SubscriptionConfig) -> dict[str, str]:
    """What a subscription's type asks of its options (Slack and webhooks: a `url`); options of other types left
    set are problems too, so a typo does not pass silently."""
    found = channel(config.type)
    out = found.check(config) if found else ({} if config.url.strip() else {"url": "required"})
    own = found.options if found else ()
    defaults = SubscriptionConfig()
    for other in _all().values():
        for name in other.options:
            if name not in own and getattr(config, name) != getattr(defaults, name):
                out.setdefault(name, f"an option of {other.type} subscriptions, not {config.type}")
    return out


def require_post(config: SubscriptionConfig) -> dict[str, str]:
    """The API channels take one request shape: POST to their endpoint, closes included."""
    problems = {} if config.method == "POST" else {"method": f"{config.type} takes POST only"}
    if config.url_close or config.method_close:
        problems["url_close" if config.url_close else "method_close"] = f"{config.type} sends closes as the others"
    return problems
