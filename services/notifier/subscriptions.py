"""Subscriptions: who is notified, when and how. From the configuration file (`subscriptions:`) and from the api
(`/api/v1/subscriptions`, stored in Redis). One model, `SubscriptionConfig` (shared/config.py); here it is
validated further (URL safety, templates), compiled (regexes, templates, policy) and masked for display.

Field names: the configuration file uses its usual kebab-case (`send-close`); the api's JSON uses snake_case
(`send_close`) and accepts kebab-case too.

Everything that may carry a credential — the URLs past scheme://host:port, `secret`, the basic-auth `password`,
every header value, every extra, and the templates (but for token holders) — is masked in every api answer
(`****` + the last 4 characters of long values) and never logged: log lines name a subscription by id and its
destination (scheme://host:port) only. Credentials stay with their destination: when a change moves a
subscription to another scheme, host or port, its stored secret, basic-auth username and password, headers and
extras are dropped unless the change gives them again; `url-close` must keep `url`'s scheme, host and port, and a
url-template may change the path and query only (and never sees extras with credential-like names: they would
travel in clear).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import secrets as random_secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from redis.asyncio import Redis
from redis.exceptions import WatchError

from lagwatch.services.notifier import channels, template_worker, tls
from lagwatch.services.notifier.channels import email as email_channel
from lagwatch.services.notifier.templates import TemplateProblem
from lagwatch.shared import address_guard
from lagwatch.shared.config import (
    Config,
    ConfigError,
    SubscriptionConfig,
    build_section,
    field_problems,
    option_name,
)
from lagwatch.shared.group_filter import GroupFilter, linear_regex_problem
from lagwatch.shared.lag_threshold_index import index_entry
from lagwatch.shared.notification_policy import Policy
from lagwatch.shared.protocol import Status
from lagwatch.shared.store import keys

log = logging.getLogger(__name__)
CREDENTIAL_NAME = re.compile(r"authorization|api[-_]?key|token|secret|passw|cookie|signature|credential|auth|key", re.I)
MASK = "****"
SOURCE_CONFIG, SOURCE_API = "config", "api"
READ_ONLY = frozenset({"source"})  # api output only
TEMPLATES = ("body_template", "url_template")


class SubscriptionInvalid(ValueError):
    """Validation failed; `errors` maps field names to problems."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = dict(errors)


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


def _kebab(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k).replace("_", "-"): v for k, v in doc.items()}


def _option_keys(doc: dict[str, Any]) -> dict[str, Any]:
    """Fields named after Python keywords (`from_`) under their option's name (`from`)."""
    return {
        option_name(f) if f.name.endswith("_") else f.name: doc[f.name] for f in dataclasses.fields(SubscriptionConfig)
    }


def _snake(key: str) -> str:
    return key.replace("-", "_")


def to_document(config: SubscriptionConfig) -> dict[str, Any]:
    """The stored (and unmasked) JSON form, snake_case."""
    return _option_keys(dataclasses.asdict(config))


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
    raw = _kebab(doc)
    problems = {_snake(k): v for k, v in field_problems(SubscriptionConfig, raw).items()}
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


def new_id() -> str:
    return "sub-" + random_secrets.token_hex(6)


# --- masking ----------------------------------------------------------------------------------------------------


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
    doc["url"] = mask_url(config.url) if config.url else ""
    doc["url_close"] = mask_url(config.url_close) if config.url_close else ""
    for name in ("secret", *channels.secret_options()):
        doc[name] = mask(doc[name]) if doc[name] else ""
    doc["headers"] = {k: mask(v) for k, v in config.headers.items()}
    doc["extras"] = {k: mask(v) for k, v in config.extras.items()}
    if not show_templates:
        for name in TEMPLATES:
            doc[name] = mask(doc[name]) if doc[name] else ""
    doc["source"] = source
    return doc


def unmask_unchanged(doc: Mapping[str, Any], existing: SubscriptionConfig) -> dict[str, Any]:
    """Replace values that equal what the api showed for `existing` by `existing`'s real values."""
    shown = masked_document(existing, SOURCE_API)
    out = dict(doc)
    for name in ("url", "url_close", "secret", *channels.secret_options(), *TEMPLATES):
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


def moves(doc: Mapping[str, Any], existing: SubscriptionConfig, *, merge: bool) -> bool:
    """Whether a change (api JSON, masked values restored) sends the subscription elsewhere — another type, or
    another destination (`destination_of`) — so the credentials it holds must not follow unless given again."""
    given = {k: v for k, v in doc.items() if k not in READ_ONLY}
    raw = _kebab({**(to_document(existing) if merge else {}), **given, "id": existing.id})
    try:
        candidate = build_section(SubscriptionConfig, raw)
    except ConfigError:
        return True
    return candidate.type != existing.type or destination_of(candidate) != destination_of(existing)


def without_credentials(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A stored document without what was meant for its destination only: secret, headers, extras and the
    channels' credentials (routing-key, password)."""
    cleared = dict.fromkeys(("secret", "username", *channels.secret_options()), "")
    return {**doc, **cleared, "headers": {}, "extras": {}}


def masked_values(config: SubscriptionConfig) -> dict[str, str]:
    """Credentials that are still masked values (sent back for a subscription they do not belong to, or moved to
    another destination): problems, for they would be sent as they are."""
    found = {
        name: getattr(config, name)
        for name in ("secret", *channels.secret_options())
        if getattr(config, name).startswith(MASK)
    }
    for name in ("headers", "extras"):
        found.update({f"{name}.{k}": v for k, v in getattr(config, name).items() if v.startswith(MASK)})
    return {key: "a masked value: send the real one (credentials stay with their destination)" for key in found}


# --- storage (api-created subscriptions) -------------------------------------------------------------------------


def _parse_stored(sub_id: str, text: bytes | str) -> SubscriptionConfig | None:
    try:
        return build_section(SubscriptionConfig, _kebab(json.loads(text)), f"subscription {sub_id}")
    except Exception as exc:  # unreadable (stored by an older, laxer version, say): the others still count
        log.error("subscription %s in Redis is invalid and ignored: %s", sub_id, exc)
        return None


class SubscriptionStore:
    """API-created subscriptions in Redis; every change bumps a version the notifiers watch, and keeps the index of
    lag-seconds thresholds the evaluators read (`lw:n:{notify}:lag-thresholds`) in step, in the same transaction."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def version(self) -> int:
        return int(await self.redis.get(keys.SUBSCRIPTIONS_VERSION) or 0)

    async def all(self) -> dict[str, SubscriptionConfig]:
        raw = await self.redis.hgetall(keys.SUBSCRIPTIONS)
        out = {}
        for sub_id, text in raw.items():
            sub_id = sub_id.decode() if isinstance(sub_id, bytes) else sub_id
            config = _parse_stored(sub_id, text)
            if config is not None:
                out[sub_id] = config
        return out

    async def count(self) -> int:
        return int(await self.redis.hlen(keys.SUBSCRIPTIONS))

    async def get(self, sub_id: str) -> SubscriptionConfig | None:
        """The subscription, or None when there is none or it cannot be read (it can still be deleted)."""
        text = await self.redis.hget(keys.SUBSCRIPTIONS, sub_id)
        return None if text is None else _parse_stored(sub_id, text)

    async def put(self, config: SubscriptionConfig, *, create: bool) -> bool:
        """Store a subscription; with `create`, only if the id is free (False otherwise)."""
        text = json.dumps(to_document(config), sort_keys=True)
        lag_entry = index_entry(config)
        while True:
            async with self.redis.pipeline(transaction=True) as pipe:
                if create:  # only if the id is free; watched, so nothing is written for a refused create
                    await pipe.watch(keys.SUBSCRIPTIONS)
                    if await pipe.hexists(keys.SUBSCRIPTIONS, config.id):
                        return False
                    pipe.multi()
                pipe.hset(keys.SUBSCRIPTIONS, config.id, text)
                if lag_entry is None:
                    pipe.hdel(keys.LAG_THRESHOLDS, config.id)
                else:
                    pipe.hset(keys.LAG_THRESHOLDS, config.id, lag_entry)
                pipe.incr(keys.SUBSCRIPTIONS_VERSION)
                try:
                    await pipe.execute()
                    return True
                except WatchError:  # another subscription was written meanwhile: look again
                    continue

    async def delete(self, sub_id: str) -> bool:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hdel(keys.SUBSCRIPTIONS, sub_id)
            pipe.hdel(keys.LAG_THRESHOLDS, sub_id)
            pipe.delete(keys.notify_state(sub_id))  # its announced incidents; repeats are dropped by the timer
            pipe.incr(keys.SUBSCRIPTIONS_VERSION)
            removed, *_ = await pipe.execute()
        return bool(removed)


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
