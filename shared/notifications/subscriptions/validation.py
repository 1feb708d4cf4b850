"""Whether a subscription may be served: what the configuration model cannot check alone — URL safety (the address
guard), the destination type's options, the group regexes (RE2), the templates (compiled in a budgeted worker), the
CAs of `extra-ca` — for the configuration file's subscriptions (the notifier, at start) and for the api's documents
(`validate_document`, every problem at once).

`url-close` must keep `url`'s scheme, host and port; credentials stay with their destination (`moves`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator, Mapping
from typing import Any

from lagwatch.shared.notifications.delivery import address_guard, tls
from lagwatch.shared.notifications.subscriptions import destinations
from lagwatch.shared.notifications.subscriptions.documents import READ_ONLY, SubscriptionInvalid, kebab, to_document
from lagwatch.shared.notifications.subscriptions.masking import masked_values, unmask_unchanged
from lagwatch.shared.notifications.templating import template_worker
from lagwatch.shared.notifications.templating.templates import TemplateProblem
from lagwatch.shared.protocol.group_filter import linear_regex_error
from lagwatch.shared.runtime.config import Config, ConfigError, SubscriptionConfig, build_section, field_problems

# framing and connection headers: the HTTP client writes them for the body it sends and the connection it holds
CLIENT_SET_HEADERS = frozenset(
    {
        "content-length",
        "transfer-encoding",
        "content-encoding",
        "host",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
    }
)
CONTROL_CHARACTER = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # all but the tab


def destination_of(config: SubscriptionConfig) -> str:
    """Where a subscription's requests go, as its per-destination queue: scheme://host:port (smtp://host:port)."""
    endpoint = destinations.endpoint(config)
    return endpoint if endpoint.startswith("smtp://") else address_guard.destination(endpoint)


def file_problems(config: Config) -> Iterator[ConfigError]:
    """The configuration file's subscriptions' problems, in order (a duplicate id, then `deep_problems`), each naming
    its key as the file spells it: the notifier refuses to start on the first, `lagwatch config check` lists all."""
    seen: set[str] = set()
    for i, sub in enumerate(config.subscriptions):
        where = f"subscriptions[{i}]"
        if sub.id in seen:
            yield ConfigError(f"{where}.id", f"duplicate subscription id {sub.id!r}")
        seen.add(sub.id)
        for key, problem in deep_problems(sub, allow_private=config.notifier.allow_private_targets).items():
            field_name, dot, rest = key.partition(".")  # `headers.X_Token`: a header's own name kept as it is
            yield ConfigError(f"{where}.{field_name.replace('_', '-')}{dot}{rest}", problem)


def deep_problems(config: SubscriptionConfig, *, allow_private: bool, read_files: bool = True) -> dict[str, str]:
    """What the configuration model cannot check alone: URL safety (without a DNS lookup), the group regexes in
    RE2's syntax, and the templates (in a template worker: this blocks the calling thread, for at most the
    workers' time budget per template)."""
    problems = destinations.problems(config)
    target, field_name = guarded_target(config)
    if field_name not in problems:
        try:
            address_guard.check_url_static(target, allow_private=allow_private)
        except address_guard.TargetError as exc:
            problems[field_name] = str(exc)
    problems.update(_close_url_problems(config, allow_private=allow_private))
    problems.update(_http_options_problems(config, read_files=read_files))
    for name in ("group_allowlist", "group_denylist"):  # matched with RE2, in linear time (group_filter.py)
        reason = linear_regex_error(getattr(config, name))
        if reason is not None:
            problems[name] = f"not a valid regular expression (RE2 syntax, as Burrow's): {reason}"
    for name in ("body_template", "url_template"):
        source = getattr(config, name)
        if source:
            try:
                template_worker.WORKERS.check(source)
            except TemplateProblem as exc:
                problems[name] = str(exc)
    problems.update(_header_problems(config.headers))
    return problems


def _header_problems(headers: dict[str, str]) -> dict[str, str]:
    """Extra headers the notifier can send as given: a token name, not one the HTTP client sets from the body and
    the connection (a Content-Length of 5 sent every event cut to 5 bytes, and the receiver answered 200), and a
    value without control characters (RFC 9110 field values: visible characters, spaces and tabs)."""
    problems = {}
    for header, value in headers.items():
        if not re.match(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", header):
            problems[f"headers.{header}"] = "not a valid header name"
        elif header.lower().startswith("x-lagwatch-"):
            problems[f"headers.{header}"] = "X-Lagwatch-* headers are set by the notifier"
        elif header.lower() in CLIENT_SET_HEADERS:
            problems[f"headers.{header}"] = "set by the HTTP client from the body and the connection"
        elif "\r" in value or "\n" in value:
            problems[f"headers.{header}"] = "header values cannot contain line breaks"
        elif CONTROL_CHARACTER.search(value):
            problems[f"headers.{header}"] = "header values cannot contain control characters"
    return problems


def _close_url_problems(config: SubscriptionConfig, *, allow_private: bool) -> dict[str, str]:
    """Burrow's `url-close`: guarded as `url` is, and on url's destination (its credentials are for that host)."""
    if not config.url_close:
        return {}
    try:
        address_guard.check_url_static(config.url_close, allow_private=allow_private)
        same = address_guard.destination(config.url_close) == address_guard.destination(config.url)
    except (address_guard.TargetError, ValueError) as exc:
        return {"url_close": str(exc)}
    return {} if same else {"url_close": "must keep url's scheme, host and port (credentials stay with their host)"}


def _http_options_problems(config: SubscriptionConfig, *, read_files: bool) -> dict[str, str]:
    """Burrow's HTTP notifier options: basic auth, and the CAs trusted for https requests (an extra-ca path is
    read only with `read_files`: the configuration file's, never the api's)."""
    problems: dict[str, str] = {}
    if config.type != "email" and config.username:
        if ":" in config.username:
            problems["username"] = "cannot contain ':' (basic auth joins username and password with it)"
        elif any(h.lower() == "authorization" for h in config.headers):
            problems["username"] = "give either username/password (basic auth) or an Authorization header"
    if config.extra_ca and (read_files or tls.is_pem(config.extra_ca)):
        try:
            tls.client_context(config.extra_ca, False)
        except tls.TlsProblem as exc:
            problems["extra_ca"] = str(exc)
    return problems


def guarded_target(config: SubscriptionConfig) -> tuple[str, str]:
    """(the URL the address guard judges, the option it comes from): the HTTP endpoint, or the SMTP host."""
    if config.type == "email":
        return destinations.guard_url(config), "smtp_host"
    return destinations.endpoint(config), "url"


async def validate_document(
    doc: Any, *, allow_private: bool, existing: SubscriptionConfig | None = None
) -> SubscriptionConfig:
    """A subscription from api JSON (a whole document); SubscriptionInvalid with every problem found.

    Values equal to the masked form of `existing`'s (a client sending back what it was shown) keep the secret."""
    if not isinstance(doc, Mapping):
        raise SubscriptionInvalid({"body": "expected a JSON object"})
    doc = {k: v for k, v in doc.items() if k not in READ_ONLY}  # what GET shows may be sent back as it is
    if existing is not None:
        doc = unmask_unchanged(doc, existing)
    raw = kebab(doc)
    problems = {k.replace("-", "_"): v for k, v in field_problems(SubscriptionConfig, raw).items()}
    if problems:
        if "url" not in raw and str(raw.get("type", "webhook")) not in destinations.URL_OPTIONAL:  # with the rest
            problems["url"] = "required"
        raise SubscriptionInvalid(problems)
    config: SubscriptionConfig = build_section(SubscriptionConfig, raw)
    problems = masked_values(config)
    if config.extra_ca and not tls.is_pem(config.extra_ca):  # a path would have the notifier open its host's files
        problems["extra_ca"] = "give the CA certificates' PEM text (file paths are for the configuration file only)"
    problems.update(await asyncio.to_thread(deep_problems, config, allow_private=allow_private, read_files=False))
    target, field_name = guarded_target(config)
    if field_name not in problems:
        try:
            await address_guard.check_url(target, allow_private=allow_private)
        except address_guard.TargetError as exc:
            problems[field_name] = str(exc)
    if problems:
        raise SubscriptionInvalid(problems)
    return config


def moves(doc: Mapping[str, Any], existing: SubscriptionConfig, *, merge: bool) -> bool:
    """Whether a change (api JSON, masked values restored) sends the subscription elsewhere — another type, or
    another destination (`destination_of`) — so the credentials it holds must not follow unless given again."""
    given = {k: v for k, v in doc.items() if k not in READ_ONLY}
    raw = kebab({**(to_document(existing) if merge else {}), **given, "id": existing.id})
    try:
        candidate = build_section(SubscriptionConfig, raw)
    except ConfigError:
        return True
    return candidate.type != existing.type or destination_of(candidate) != destination_of(existing)
