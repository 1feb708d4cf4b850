"""What the api shows of a subscription: every credential-bearing part masked (`****` + the last 4 characters of
long values), and what a client sends back masked restored from the stored values.

Credential-bearing: the URLs past scheme://host:port, `secret`, the destination types' credentials (pagerduty's
routing key, the password: `destinations.secret_options()`), every header value, every extra, and the templates
(but for token holders). Credentials stay with their destination: a change that moves a subscription elsewhere
drops them unless it gives them again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from lagwatch.shared.notifications.subscriptions.destinations import secret_options
from lagwatch.shared.notifications.subscriptions.documents import SOURCE_API, TEMPLATES, to_document
from lagwatch.shared.runtime.config import SubscriptionConfig

CREDENTIAL_NAME = re.compile(r"authorization|api[-_]?key|token|secret|passw|cookie|signature|credential|auth|key", re.I)
MASK = "****"


def mask(value: str) -> str:
    """`****` and, for values long enough that 4 characters give little away, their last 4."""
    return MASK + value[-4:] if len(value) >= 12 else MASK


def is_credential_name(name: str) -> bool:
    return bool(CREDENTIAL_NAME.search(name))


def mask_url(url: str) -> str:
    """Only the destination (scheme://host:port) is shown: past it anything may be a credential — Slack's and many
    webhooks' paths, `sig=` or `code=` query values, `user:password@` — so the rest shows its last 4 characters."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return mask(url)
    host = f"[{host}]" if ":" in host else host
    user = f"{MASK}@" if parts.username is not None or parts.password is not None else ""
    rest = (
        parts.path.lstrip("/")
        + (f"?{parts.query}" if parts.query else "")
        + (f"#{parts.fragment}" if parts.fragment else "")
    )
    return f"{parts.scheme}://{user}{host}{port}/{mask(rest) if rest else ''}"


def masked_document(config: SubscriptionConfig, source: str, *, show_templates: bool = False) -> dict[str, Any]:
    """The api's view of a subscription: every credential-bearing part masked — the URL past its destination, the
    secret, every header value and every extra (a credential need not have a telling name), and the templates
    (they may hold any of these) unless `show_templates` (for token holders, who write them)."""
    doc = to_document(config)
    for name in ("url", "url_close"):
        doc[name] = mask_url(doc[name]) if doc[name] else ""
    for name in ("secret", *secret_options(), *(() if show_templates else TEMPLATES)):
        doc[name] = mask(doc[name]) if doc[name] else ""
    doc["headers"] = {k: mask(v) for k, v in config.headers.items()}
    doc["extras"] = {k: mask(v) for k, v in config.extras.items()}
    doc["source"] = source
    return doc


def unmask_unchanged(doc: Mapping[str, Any], existing: SubscriptionConfig) -> dict[str, Any]:
    """Replace values that equal what the api showed for `existing` by `existing`'s real values."""
    shown = masked_document(existing, SOURCE_API)
    out = dict(doc)
    for name in ("url", "url_close", "secret", *secret_options(), *TEMPLATES):
        if out.get(name) == shown[name] and shown[name] != getattr(existing, name):
            out[name] = getattr(existing, name)
    for name in ("headers", "extras"):
        given = out.get(name)
        if isinstance(given, Mapping):
            real = getattr(existing, name)
            out[name] = {
                k: real[k] if k in real and v == shown[name].get(k) != real[k] else v for k, v in given.items()
            }
    return out


def without_credentials(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A stored document without what was meant for its destination only: secret, headers, extras and the
    channels' credentials (routing-key, password)."""
    cleared = dict.fromkeys(("secret", "username", *secret_options()), "")
    return {**doc, **cleared, "headers": {}, "extras": {}}


def masked_values(config: SubscriptionConfig) -> dict[str, str]:
    """Credentials that are still masked values (sent back for a subscription they do not belong to, or moved to
    another destination): problems, for they would be sent as they are."""
    found = {
        name: getattr(config, name) for name in ("secret", *secret_options()) if getattr(config, name).startswith(MASK)
    }
    for name in ("headers", "extras"):
        found.update({f"{name}.{k}": v for k, v in getattr(config, name).items() if v.startswith(MASK)})
    return {key: "a masked value: send the real one (credentials stay with their destination)" for key in found}
