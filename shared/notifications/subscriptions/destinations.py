"""What each destination type asks of a subscription: its options' problems, where its requests go, which of its
options are credentials. The api refuses a subscription with these as the notifier does; how each type's requests
are built and sent is the notifier's (services/notifier/channels/, one module per type, each naming its
`Destination` here).

Slack and webhooks need only a `url`, and their requests go there: `destination(type)` is None for them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from lagwatch.shared.notifications.delivery import address_guard
from lagwatch.shared.runtime.config import SubscriptionConfig

URL_OPTIONAL = frozenset({"email", "pagerduty"})  # the types that need no `url`


@dataclass(frozen=True)
class Destination:
    type: str
    check: Callable[[SubscriptionConfig], dict[str, str]]  # problems of its options, {field: problem}
    endpoint: Callable[[SubscriptionConfig], str]  # where requests go: an http(s) URL, or smtp://host:port
    options: tuple[str, ...] = ()  # its own options (fields of SubscriptionConfig no other type uses)
    secrets: tuple[str, ...] = ()  # options masked in api answers


def require_post(config: SubscriptionConfig) -> dict[str, str]:
    """The API types take one request shape: POST to their endpoint, closes included."""
    problems = {} if config.method == "POST" else {"method": f"{config.type} takes POST only"}
    if config.url_close or config.method_close:
        problems["url_close" if config.url_close else "method_close"] = f"{config.type} sends closes as the others"
    return problems


def _url_required(what: str) -> Callable[[SubscriptionConfig], dict[str, str]]:
    def check(config: SubscriptionConfig) -> dict[str, str]:
        return {**({} if config.url.strip() else {"url": f"required ({what})"}), **require_post(config)}

    return check


# --- alertmanager: alerts POSTed to /api/v2/alerts ---------------------------------------------------------------

ALERTS_PATH = "/api/v2/alerts"


def alertmanager_endpoint(config: SubscriptionConfig) -> str:
    base = config.url.rstrip("/")
    return base if base.endswith(ALERTS_PATH) else base + ALERTS_PATH


ALERTMANAGER = Destination("alertmanager", _url_required("the Alertmanager, http://host:9093"), alertmanager_endpoint)

# --- msteams: a Workflows webhook ---------------------------------------------------------------------------------

MSTEAMS = Destination("msteams", _url_required("the workflow's HTTP POST URL"), lambda config: config.url)

# --- pagerduty: the Events API v2 --------------------------------------------------------------------------------

EVENTS_API = "https://events.pagerduty.com/v2/enqueue"
ROUTING_KEY = re.compile(r"^[A-Za-z0-9+/=_-]{8,64}\Z")


def pagerduty_check(config: SubscriptionConfig) -> dict[str, str]:
    problems = require_post(config)
    if not config.routing_key:
        problems["routing_key"] = "required (the integration's routing key)"
    elif not ROUTING_KEY.match(config.routing_key):
        problems["routing_key"] = "8-64 letters, digits, '+', '/', '=', '_' or '-'"
    return problems


PAGERDUTY = Destination(
    "pagerduty",
    pagerduty_check,
    lambda config: config.url or EVENTS_API,
    options=("routing_key",),
    secrets=("routing_key",),
)

# --- email: SMTP ---------------------------------------------------------------------------------------------------

ADDRESS = re.compile(r"^[^@\s<>,;\"]+@[^@\s<>,;\"]+\Z")
IMPLICIT_TLS_PORT = 465
MAX_RECIPIENTS = 100


def smtp_destination(host: str, port: int) -> str:
    return f"smtp://{f'[{host}]' if ':' in host else host}:{port}"


def guard_url(config: SubscriptionConfig) -> str:
    """The SMTP host as a URL, so the address guard parses and judges it exactly as it does a webhook's."""
    host = config.smtp_host.strip()
    return f"http://{f'[{host}]' if ':' in host and not host.startswith('[') else host}:{config.smtp_port}/"


def email_endpoint(config: SubscriptionConfig) -> str:
    try:
        host = address_guard.parse_target(guard_url(config)).host
    except address_guard.TargetError:
        host = config.smtp_host
    return smtp_destination(host, config.smtp_port)


def _recipient_problem(to: list[str]) -> str | None:
    if not to:
        return "required: a list of addresses"
    if len(to) > MAX_RECIPIENTS:
        return f"at most {MAX_RECIPIENTS} addresses"
    bad = [a for a in to if not ADDRESS.match(a)]
    return f"not an address: {bad[0]!r}" if bad else None


def email_check(config: SubscriptionConfig) -> dict[str, str]:
    problems: dict[str, str] = {}
    if config.url:
        problems["url"] = "email subscriptions have no url (smtp-host, smtp-port)"
    if config.url_template or config.url_close:
        problems["url_template" if config.url_template else "url_close"] = "email subscriptions have no url"
    if not config.smtp_host.strip():
        problems["smtp_host"] = "required"
    if not ADDRESS.match(config.from_):
        problems["from"] = "required: one address (ops@example.com)"
    recipients = _recipient_problem(config.to)
    if recipients:
        problems["to"] = recipients
    if config.password and not config.username:
        problems["username"] = "required with a password"
    if config.username and not config.starttls and config.smtp_port != IMPLICIT_TLS_PORT:
        problems["starttls"] = "a password is never sent in clear: keep starttls (or use port 465)"
    if config.headers:
        problems["headers"] = "email subscriptions send no HTTP headers"
    return problems


EMAIL = Destination(
    "email",
    email_check,
    email_endpoint,
    options=("smtp_host", "smtp_port", "from_", "to", "starttls"),  # username, password: HTTP basic auth too
    secrets=("password",),
)

DESTINATIONS = {d.type: d for d in (ALERTMANAGER, PAGERDUTY, MSTEAMS, EMAIL)}


def destination(type_: str) -> Destination | None:
    """The destination of a subscription type; None for `slack` and `webhook` (their requests go to `url`)."""
    return DESTINATIONS.get(type_)


def secret_options() -> tuple[str, ...]:
    """Every type's credential options (masked in api answers whatever the type)."""
    return tuple(name for d in DESTINATIONS.values() for name in d.secrets)


def endpoint(config: SubscriptionConfig) -> str:
    """Where a subscription's requests go (for Slack and webhooks: `url`)."""
    found = destination(config.type)
    return found.endpoint(config) if found else config.url


def problems(config: SubscriptionConfig) -> dict[str, str]:
    """What a subscription's type asks of its options (Slack and webhooks: a `url`); options of other types left
    set are problems too, so a typo does not pass silently."""
    found = destination(config.type)
    out = found.check(config) if found else ({} if config.url.strip() else {"url": "required"})
    own = found.options if found else ()
    defaults = SubscriptionConfig()
    for other in DESTINATIONS.values():
        for name in other.options:
            if name not in own and getattr(config, name) != getattr(defaults, name):
                out.setdefault(name, f"an option of {other.type} subscriptions, not {config.type}")
    return out
