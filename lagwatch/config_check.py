"""`lagwatch config check`: the configuration every service would load here (defaults, the file, then the environment:
`LAGWATCH__...`, `REDIS_URL`, `KAFKA_BOOTSTRAP_SERVERS`), checked at once, without connecting to anything, as the
services check it only as they start: each cluster's Kafka client settings and group regexes, the api's TLS
certificate and key, and each subscription of the file as the notifier validates it (every problem listed, where the
notifier stops at the first); what loads but is likely a mistake is a warning. For a change reviewed before it is
rolled out; `lagwatch check-kafka` then tries a cluster itself. `--show` prints the effective configuration, every
credential masked, to see what the environment changed."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lagwatch.shared.notifications.subscriptions.documents import SOURCE_CONFIG, kebab
from lagwatch.shared.notifications.subscriptions.masking import mask, masked_document
from lagwatch.shared.notifications.subscriptions.validation import destination_of, file_problems
from lagwatch.shared.runtime.config import ENV_PREFIX, Config, ConfigError, option_name
from lagwatch.shared.runtime.kafka_client import client_kwargs, librdkafka_config

SHORTCUTS = ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS")


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)  # a service would refuse to start (or to serve it)
    warnings: list[str] = field(default_factory=list)  # loads, but likely not what was meant


def check(config: Config) -> Findings:
    found = Findings()
    _check_clusters(config, found)
    _check_subscriptions(config, found)
    _check_api(config, found)
    return found


def _check_api(config: Config, found: Findings) -> None:
    """The api's certificate and key, loaded as the api loads them at its start."""
    from lagwatch.services.api.listener_tls import server_context

    try:
        server_context(config.api)
    except ConfigError as exc:
        found.problems.append(str(exc))


def _check_clusters(config: Config, found: Findings) -> None:
    if not config.clusters:
        found.warnings.append(
            "config clusters: none is defined: every service but the api needs one (or KAFKA_BOOTSTRAP_SERVERS)"
        )
    for name, cluster in config.clusters.items():
        try:
            config.group_filter(name)
            client_kwargs(cluster, name)  # the Kafka clients' own checks, as the services build them
            librdkafka_config(cluster, name)
        except ConfigError as exc:
            found.problems.append(str(exc))


def _check_subscriptions(config: Config, found: Findings) -> None:
    found.problems += [str(problem) for problem in file_problems(config)]  # the notifier's own, all of them
    for i, sub in enumerate(config.subscriptions):
        unknown = [c for c in sub.clusters if c not in config.clusters]
        if unknown and config.clusters:
            found.warnings.append(
                f"config subscriptions[{i}].clusters: {', '.join(unknown)} not defined here: its alerts come only "
                "from a notifier whose configuration defines it"
            )


def sources(path: str | None, env: Mapping[str, str]) -> str:
    """Where the configuration came from, as read: the file and the environment variables that changed it."""
    path = path or env.get("LAGWATCH_CONFIG") or None
    names = sorted(n for n in env if n.startswith(ENV_PREFIX)) + [n for n in SHORTCUTS if env.get(n)]
    file_part = f"file {path}" if path else "no file (defaults)"
    return file_part + (f", then from the environment {', '.join(names)}" if names else "")


def summary(config: Config) -> list[str]:
    """A few lines saying what the configuration sets up."""
    shown = _section(config)  # URLs with their password hidden
    lines = [f"redis: {shown['redis']['url']}" + (" (Redis Cluster)" if config.redis.cluster_mode else "")]
    for name, c in config.clusters.items():
        login = f", SASL {c.sasl.mechanism}" if c.sasl.mechanism else ""
        tls = ", TLS" if c.tls.enabled else ""
        lines.append(
            f"cluster {name}: {', '.join(c.bootstrap_servers)}{tls}{login}; commits from "
            f"{'the admin API' if c.offsets_source == 'admin' else c.offsets_topic}"
            + (" (or the admin API)" if c.offsets_source == "auto" else "")
        )
    for sub in config.subscriptions:
        lines.append(f"subscription {sub.id}: {sub.type} to {destination_of(sub)}, threshold {sub.threshold}")
    if not config.subscriptions:
        lines.append("subscriptions: none in the configuration (the api may add some)")
    history = config.history
    lines.append(
        f"history: to {history.topic}, archived under {shown['history']['path']}" if history.enabled else "history: off"
    )
    token = "set" if config.api.token else "not set: the api refuses deletions and subscription changes"
    scheme = "https" if config.api.tls_cert_file else "http"
    lines.append(f"api: {scheme}://{config.api.host}:{config.api.port}, token {token}")
    return lines


def verdict(config: Config, found: Findings) -> str:
    warned = f", {_count(len(found.warnings), 'warning')} (above)" if found.warnings else ""
    return f"ok: {_count(len(config.clusters), 'cluster')}, {_count(len(config.subscriptions), 'subscription')}{warned}"


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def effective(config: Config) -> dict[str, Any]:
    """The whole configuration, defaults included, as the file spells it; credentials masked (`secret` fields as
    the api masks a value, `shown` fields through their own function, subscriptions as the api shows them)."""
    shown = _section(config)
    shown["subscriptions"] = [_subscription(sub) for sub in config.subscriptions]
    return shown


def _section(value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        item = getattr(value, f.name)
        if f.metadata.get("secret"):
            out[option_name(f)] = _masked(item)
        elif "shown" in f.metadata:
            out[option_name(f)] = f.metadata["shown"](item)
        elif dataclasses.is_dataclass(item):
            out[option_name(f)] = _section(item)
        elif isinstance(item, dict):
            out[option_name(f)] = {k: _section(v) if dataclasses.is_dataclass(v) else v for k, v in item.items()}
        else:
            out[option_name(f)] = list(item) if isinstance(item, list | tuple) else item
    return out


def _masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: mask(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v) for v in value]
    return mask(value) if value else value


def _subscription(sub: Any) -> dict[str, Any]:
    doc = masked_document(sub, SOURCE_CONFIG)
    doc.pop("source", None)
    return kebab(doc)
