"""Subscriptions as the notifier runs them: validated further than the model (URL safety, the destination types'
options, templates), compiled (policy, group regexes) and served from a `Registry` of the configuration file's and
the api's. The stored document, its masking and the Redis store are shared with the api: shared/subscriptions/.

One model, `SubscriptionConfig` (shared/config.py), from the configuration file (`subscriptions:`) and from the api
(`/api/v1/subscriptions`). Log lines name a subscription by id and its destination (scheme://host:port) only.
`url-close` must keep `url`'s scheme, host and port, and a url-template may change the path and query only (and
never sees extras with credential-like names: they would travel in clear).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lagwatch.services.notifier import channels
from lagwatch.services.notifier.channels import email as email_channel
from lagwatch.shared import address_guard, tls
from lagwatch.shared.config import (
    Config,
    ConfigError,
    SubscriptionConfig,
    build_section,
    field_problems,
)
from lagwatch.shared.group_filter import GroupFilter, linear_regex_problem
from lagwatch.shared.notification_policy import Policy
from lagwatch.shared.protocol import Status
from lagwatch.shared.subscriptions.documents import (
    READ_ONLY,
    SOURCE_API,
    SOURCE_CONFIG,
    SubscriptionInvalid,
    kebab,
    snake,
    to_document,
)
from lagwatch.shared.subscriptions.masking import masked_values, unmask_unchanged
from lagwatch.shared.subscriptions.store import SubscriptionStore
from lagwatch.shared.templating import template_worker
from lagwatch.shared.templating.templates import TemplateProblem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Subscription:
    """A validated subscription, ready to decide and render."""

    config: SubscriptionConfig
    source: str
    policy: Policy
    groups: GroupFilter

    @property
    def id(self) -> str:
        return self.config.id

    @property
    def type(self) -> str:
        return self.config.type

    def matches(self, cluster: str, group: str) -> bool:
        if self.config.clusters and cluster not in self.config.clusters:
            return False
        return self.groups.accepts(group)

    @property
    def destination(self) -> str:
        return destination_of(self.config)


def destination_of(config: SubscriptionConfig) -> str:
    """Where a subscription's requests go, as its per-destination queue: scheme://host:port (smtp://host:port)."""
    endpoint = channels.endpoint(config)
    return endpoint if endpoint.startswith("smtp://") else address_guard.destination(endpoint)


def compile_subscription(config: SubscriptionConfig, source: str) -> Subscription:
    """Compile the rules (templates are compiled where they are rendered: template_worker.py)."""
    return Subscription(
        config=config,
        source=source,
        policy=Policy(
            threshold=Status[config.threshold],
            send_close=config.send_close,
            send_once=config.send_once,
            send_interval_ms=int(config.send_interval * 1000),
            lag_threshold_s=config.lag_seconds_threshold,
            retention_risk_s=config.retention_risk_threshold,
            hold_for_ms=int(config.hold_for * 1000),
        ),
        groups=GroupFilter(config.group_allowlist, config.group_denylist, linear=True),
    )


def _deep_problems(config: SubscriptionConfig, *, allow_private: bool, read_files: bool = True) -> dict[str, str]:
    """What the configuration model cannot check alone: URL safety (without a DNS lookup), the group regexes in
    RE2's syntax, and the templates (in a template worker: this blocks the calling thread, for at most the
    workers' time budget per template)."""
    problems = channels.problems(config)
    target, field_name = guarded_target(config)
    if field_name not in problems:
        try:
            address_guard.check_url_static(target, allow_private=allow_private)
        except address_guard.TargetError as exc:
            problems[field_name] = str(exc)
    problems.update(_close_url_problems(config, allow_private=allow_private))
    problems.update(_http_options_problems(config, read_files=read_files))
    for name in ("group_allowlist", "group_denylist"):  # matched with RE2, in linear time (group_filter.py)
        problem = linear_regex_problem(getattr(config, name))
        if problem:
            problems[name] = problem
    for name in ("body_template", "url_template"):
        source = getattr(config, name)
        if source:
            try:
                template_worker.WORKERS.check(source)
            except TemplateProblem as exc:
                problems[name] = str(exc)
    for header, value in config.headers.items():
        if not re.match(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", header):
            problems[f"headers.{header}"] = "not a valid header name"
        elif header.lower().startswith("x-lagwatch-"):
            problems[f"headers.{header}"] = "X-Lagwatch-* headers are set by the notifier"
        elif "\r" in value or "\n" in value:
            problems[f"headers.{header}"] = "header values cannot contain line breaks"
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
        return email_channel.guard_url(config), "smtp_host"
    return channels.endpoint(config), "url"


def from_config(config: Config) -> list[Subscription]:
    """The configuration file's subscriptions, validated: ConfigError names the first bad key."""
    out: list[Subscription] = []
    seen: set[str] = set()
    for i, sub in enumerate(config.subscriptions):
        where = f"subscriptions[{i}]"
        if sub.id in seen:
            raise ConfigError(f"{where}.id", f"duplicate subscription id {sub.id!r}")
        seen.add(sub.id)
        problems = _deep_problems(sub, allow_private=config.notifier.allow_private_targets)
        if problems:
            key, problem = next(iter(problems.items()))
            field_name, dot, rest = key.partition(".")
            raise ConfigError(f"{where}.{field_name.replace('_', '-')}{dot}{rest}", problem)
        out.append(compile_subscription(sub, SOURCE_CONFIG))
    return out


# --- api documents ----------------------------------------------------------------------------------------------


async def validate_document(
    doc: Any, *, allow_private: bool, resolve: bool = True, existing: SubscriptionConfig | None = None
) -> SubscriptionConfig:
    """A subscription from api JSON (a whole document); SubscriptionInvalid with every problem found.

    Values equal to the masked form of `existing`'s (a client sending back what it was shown) keep the secret."""
    if not isinstance(doc, Mapping):
        raise SubscriptionInvalid({"body": "expected a JSON object"})
    doc = {k: v for k, v in doc.items() if k not in READ_ONLY}  # what GET shows may be sent back as it is
    if existing is not None:
        doc = unmask_unchanged(doc, existing)
    raw = kebab(doc)
    problems = {snake(k): v for k, v in field_problems(SubscriptionConfig, raw).items()}
    if problems:
        if "url" not in raw and str(raw.get("type", "webhook")) not in channels.URL_OPTIONAL:  # with the rest
            problems["url"] = "required"
        raise SubscriptionInvalid(problems)
    config = build_section(SubscriptionConfig, raw)
    problems = masked_values(config)
    if config.extra_ca and not tls.is_pem(config.extra_ca):  # a path would have the notifier open its host's files
        problems["extra_ca"] = "give the CA certificates' PEM text (file paths are for the configuration file only)"
    problems.update(await asyncio.to_thread(_deep_problems, config, allow_private=allow_private, read_files=False))
    target, field_name = guarded_target(config)
    if field_name not in problems and resolve:
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


class Registry:
    """Every subscription a notifier serves: the file's, plus the api's (reloaded when their version moves)."""

    def __init__(self, config: Config, store: SubscriptionStore) -> None:
        self.store = store
        self.from_file = {s.id: s for s in from_config(config)}
        self._api: dict[str, Subscription] = {}
        self._version: int | None = None

    @property
    def version(self) -> int | None:
        """The version of the api's subscriptions loaded (None before the first load)."""
        return self._version

    async def refresh(self, *, force: bool = False, version: int | None = None) -> None:
        """Reload the api's subscriptions when their version moved (`version`: already read by the caller)."""
        version = await self.store.version() if version is None else version
        if version == self._version and not force:
            return
        loaded: dict[str, Subscription] = {}
        for sub_id, config in (await self.store.all()).items():
            if sub_id in self.from_file:
                log.error("subscription %s from the api is shadowed by the configuration file's", sub_id)
                continue
            try:
                loaded[sub_id] = compile_subscription(config, SOURCE_API)
            except Exception as exc:  # one bad document (from an older version, say) must not stop the others
                log.error("subscription %s cannot be used: %s: %s", sub_id, type(exc).__name__, exc)
        self._api = loaded
        self._version = version

    def get(self, sub_id: str) -> Subscription | None:
        return self.from_file.get(sub_id) or self._api.get(sub_id)

    def all(self) -> list[Subscription]:
        return [*self.from_file.values(), *self._api.values()]

    def matching(self, cluster: str, group: str) -> list[Subscription]:
        return [s for s in self.all() if s.matches(cluster, group)]
