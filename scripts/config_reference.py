"""Writes the option table of docs/configuration.md from the configuration model (lagwatch.shared.runtime.config).

    python scripts/config_reference.py            # rewrite the table between the markers
    python scripts/config_reference.py --check    # exit 1 when the table is out of date

Every option of every section dataclass becomes a row: its key as the file spells it, its environment variable,
its default and what it means. Meanings come from `MEANINGS` below or, for an option added since, from the comment
on its line in shared/runtime/config.py; an option with neither stops the script (tests/repository/test_docs.py runs
it).
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import re
import sys
import tokenize
import typing
from collections.abc import Iterator
from pathlib import Path

from lagwatch.shared.runtime.config import Config, option_name

DOC = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
START, END = "<!-- options:start (scripts/config_reference.py) -->", "<!-- options:end -->"
CLUSTER, SUBSCRIPTION = "<name>", "[]"  # placeholders in keys: a cluster's name; an item of the list

MEANINGS = {
    "redis.url": "the Redis (or one node of a Redis Cluster) that holds windows, statuses and the notifier's outbox",
    "redis.cluster-mode": "connect with the Redis Cluster client",
    "storage.intervals": "commits kept per partition window (Burrow's `intervals`)",
    "storage.min-distance": "seconds; a commit closer than this to the newest entry replaces it, keeping its timestamp",
    "storage.expire-group": "seconds without a commit before a group is forgotten (NOTFOUND)",
    "storage.group-allowlist": "regex (unanchored search): only matching groups are stored; empty = all",
    "storage.group-denylist": "regex (unanchored search): matching groups are not stored; empty = none",
    "storage.lag-history": "seconds of log-end samples kept per partition, for lag in seconds",
    "storage.lag-history-samples": "log-end samples kept per partition at most (flat stretches collapsed)",
    "evaluator.allowed-lag": "a partition whose lag is at or below this is OK whatever its window shows",
    "evaluator.minimum-complete": "windows less full than this fraction are not judged (OK)",
    "evaluator.minimum-entries": "entries a window needs (unless its ring is full) before STOP, STALL or WARN are "
    "judged: a new group's first commits raise no alarm ([rules.md §3](rules.md#3-evaluation-rules)); `1` is "
    "Burrow's behaviour",
    "evaluator.max-groups": "groups a cluster may have: new groups past it are counted and skipped, never a known "
    "one evicted (`lagwatch_evaluator_groups_over_cap_total`); 0: no cap",
    "evaluator.new-groups-wait": "seconds, at most, new groups' first evaluations wait while an ingest worker reads "
    "a backlog of commits (its start, a takeover of offsets-topic partitions): evaluated before their later commits "
    "are read they would be evaluated twice, on the CPU the read needs; a first status never pages, known groups do "
    "not wait (`lagwatch_evaluator_new_groups_waiting_for_ingest`); 0: never",
    "evaluator.sweep-interval": "seconds between sweeps of every owned group: a safety net (each evaluation schedules "
    "the group's next STOP, expiry or lag-threshold instant)",
    "evaluator.status-topic": "where status-change events are published (and the notifier reads them)",
    "evaluator.changes-topic": "the ingest's and api's change notices, which the evaluator reads",
    "evaluator.lag-threshold-topic": "where lag-threshold events are published (`lag-seconds-threshold`)",
    "evaluator.http-host": "address of the evaluator's `/healthz`, `/readyz`, `/metrics`",
    "evaluator.http-port": "port of the evaluator's `/healthz`, `/readyz`, `/metrics`",
    "ingest.batch-size": "records of the offsets topic per batch (one round of Redis writes, then one offset commit)",
    "ingest.workers": "worker processes of `lagwatch run ingest` (one consumer group); 0: one per CPU but one (at "
    "least one: a core is left for Redis and the Kafka client's threads), counting the CPUs the process may use, a "
    "container's CPU limit (cgroup quota) included",
    "ingest.session-timeout": "seconds: consumer-group session of the ingest (also the evaluator's and notifier's)",
    "ingest.http-host": "address of the ingest's `/healthz`, `/readyz`, `/metrics`",
    "ingest.http-port": "port of the ingest's `/healthz`, `/readyz`, `/metrics`",
    "ingest.log-probe": "read the log where a group's commit is a little below the log end, to tell transaction "
    "markers and aborted records (which no `read_committed` consumer receives) from unread records: a consumer with "
    "nothing left to read reads lag 0 ([rules.md §2](rules.md#2-the-window))",
    "ingest.log-probe-rate": "log probes a second at most, per cluster (each reads a few records of a partition): "
    "each ingest worker takes its share, as it holds the offsets topic's partitions; partitions left over are asked "
    "first at the next offset-refresh",
    "api.host": "address the api listens on",
    "api.port": "port the api listens on",
    "history.path": "the archiver's Parquet root: a local path or a URI (s3://bucket/prefix, hdfs://...)",
    "clusters.<name>.sasl.oauth.client-secret": "its secret (sent with HTTP basic auth, as librdkafka and Kafka's Java "
    "client do)",
    "api.token": "bearer token for DELETE and subscription changes; empty = those are refused",
    "api.previous-tokens": "tokens still accepted beside `api.token` during a rotation (comma-separated in the "
    'environment); `lagwatch_api_token_uses_total{token="previous"}` flat = no client uses them: drop them',
    "api.request-timeout": "seconds a request may take before the api answers 503",
    "api.tls-cert-file": "HTTPS on the api's listener: a PEM certificate chain, the server's certificate first "
    "(empty: plain HTTP); read at start (a missing, unreadable or mismatched file stops the api with one line) "
    "and again when it changes on disk (checked every 30 s: a renewed certificate is served from the next "
    "connection, a half-written one never)",
    "api.tls-key-file": "its private key, PEM (empty: in the certificate's file)",
    "api.access-control-allow-origin": "Burrow's general.access-control-allow-origin: the Access-Control-Allow-Origin "
    "header on every answer (* or https://host[:port]), so that a dashboard of another origin may read the api from "
    "a browser; mutations stay out of its reach (no preflight is allowed); empty = none",
    "api.metrics-partition-series": "/metrics: partition-level series (partition lag, offset, status, lag seconds, "
    "topic offsets) on or off",
    "api.metrics-group-allowlist": "/metrics: only groups matching this regex (empty = all)",
    "api.metrics-group-denylist": "/metrics: leave out groups matching this regex",
    "api.metrics-topic-allowlist": "/metrics: partition-level series only for topics matching this regex",
    "api.metrics-topic-denylist": "/metrics: no partition-level series for topics matching this regex",
    "notifier.http-host": "address of the notifier's `/healthz`, `/readyz`, `/metrics`",
    "notifier.http-port": "port of the notifier's `/healthz`, `/readyz`, `/metrics`",
    "notifier.dashboard-url": "linked from Slack messages; `{cluster}` and `{group}` are replaced",
    "notifier.dlq-topic": "dead letters: deliveries that failed for good",
    "notifier.start-latest": "a brand-new notifier group starts at the end of the status topic, not its beginning",
    "notifier.allow-private-targets": "allow webhooks to private addresses (10/8, 172.16/12, 192.168/16, 127/8, …)",
    "notifier.max-attempts": "attempts before a delivery is dead-lettered",
    "notifier.backoff-base": "seconds: first retry ceiling, doubling per attempt (full jitter)",
    "notifier.backoff-cap": "seconds: the largest retry ceiling",
    "notifier.request-timeout": "seconds per HTTP request, connect included",
    "notifier.per-host-concurrency": "requests in flight per destination",
    "notifier.per-host-queue": "deliveries held in memory per destination (the rest wait in Redis)",
    "notifier.breaker-failures": "consecutive failures that open a destination's circuit",
    "notifier.breaker-cooldown": "seconds an open circuit waits before one probe",
    "notifier.lease": "seconds a claimed delivery stays invisible to other workers (renewed; > request-timeout)",
    "notifier.poll-interval": "seconds between outbox polls when idle",
    "notifier.repeat-check-interval": "seconds between checks for due `send-interval` repeats",
    "notifier.dedupe-ttl": "seconds an (event id, subscription) pair is remembered",
    "clusters.<name>.bootstrap-servers": "Kafka brokers (a list, or comma-separated in the environment)",
    "clusters.<name>.offsets-topic": "the group coordinator's topic the ingest reads",
    "clusters.<name>.offsets-source": (
        "where commits come from: `topic` (the offsets topic), `admin` (the admin API every `offset-refresh`, for "
        "clusters whose offsets topic is closed; docs/managed-kafka.md), `auto` (the topic, else the admin API)"
    ),
    "clusters.<name>.admin-groups": "admin mode: groups to watch besides those ListGroups returns (a list)",
    "clusters.<name>.offset-refresh": (
        "seconds between log-end-offset polls (Burrow's `offset-refresh`), and between commit polls in admin mode"
    ),
    "clusters.<name>.topic-refresh": "seconds between topic-metadata polls (Burrow's `topic-refresh`)",
    "clusters.<name>.start-latest": "a brand-new ingest group starts at the offsets topic's end instead of rebuilding",
    "clusters.<name>.client-id": "Kafka client id (services append `-evaluator`, `-notifier`, ...)",
    "clusters.<name>.group-allowlist": "this cluster's own allowlist regex; overrides storage's when set",
    "clusters.<name>.group-denylist": "this cluster's own denylist regex; overrides storage's when set",
    "clusters.<name>.tls.enabled": "connect to Kafka with TLS",
    "clusters.<name>.tls.ca-file": "CA bundle to verify the brokers (empty = the system's)",
    "clusters.<name>.tls.cert-file": "client certificate (mutual TLS)",
    "clusters.<name>.tls.key-file": "the client certificate's key",
    "clusters.<name>.tls.verify-hostname": "check the brokers' names against their certificates",
    "clusters.<name>.sasl.mechanism": "`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`, `OAUTHBEARER` (OIDC), `AWS_MSK_IAM` "
    "or `GSSAPI` (Kerberos); empty = no SASL (docs/managed-kafka.md)",
    "clusters.<name>.sasl.username": "SASL user (`PLAIN`, `SCRAM-*`)",
    "clusters.<name>.sasl.password": "SASL password",
    "clusters.<name>.sasl.oauth.extensions": "SASL extensions sent with the token (Confluent Cloud: `logicalCluster`, "
    "`identityPoolId`); set them in the file, as the environment folds names to lower case",
    "history.enabled": "the ingest publishes what it reads for the Spark replay (off: it doubles its Kafka writes)",
    "history.topic": "where the ingest publishes the history of commits and log-end samples (Spark replay)",
    "history.http-host": "address of the archiver's `/healthz`, `/readyz`, `/metrics`",
    "history.http-port": "port of the archiver's `/healthz`, `/readyz`, `/metrics`",
    "subscriptions[].id": "1-64 letters, digits, `.`, `_`, `-`",
    "subscriptions[].type": "`slack` (incoming webhook, Block Kit), `webhook`, `alertmanager`, `pagerduty`, "
    "`msteams` (Workflows, Adaptive Card) or `email` (SMTP)",
    "subscriptions[].url": "http(s) target (private addresses only with `notifier.allow-private-targets`); "
    "required but for `email` and `pagerduty` (default: the Events API)",
    "subscriptions[].hold-for": "seconds an incident must hold before its open is sent (flap suppression, "
    "Prometheus's `for:`); 0 = at once",
    "subscriptions[].routing-key": "`pagerduty`: the integration's routing key (masked in api answers)",
    "subscriptions[].smtp-host": "`email`: the SMTP server (judged by the address guard, as webhook URLs are)",
    "subscriptions[].smtp-port": "`email`: the SMTP port (465: implicit TLS)",
    "subscriptions[].from": "`email`: the From address",
    "subscriptions[].to": "`email`: the recipients (a list)",
    "subscriptions[].starttls": "`email`: STARTTLS before anything else (never falls back to clear text)",
    "subscriptions[].secret": "HMAC-SHA256 key for `X-Lagwatch-Signature`; empty = unsigned",
    "subscriptions[].method": "`POST`, `PUT`, `PATCH` or `DELETE`",
    "subscriptions[].headers": "extra request headers",
    "subscriptions[].body-template": "sandboxed Jinja2 body; empty = the default (Block Kit / the event JSON)",
    "subscriptions[].url-template": "sandboxed Jinja2 URL; empty = `url`",
    "subscriptions[].threshold": "notify when the group status is at or above it: `OK`, `WARN` or `ERR`",
    "subscriptions[].send-close": "tell when the incident is over",
    "subscriptions[].send-once": "one notification per incident: no updates, no repeats",
    "subscriptions[].send-interval": (
        "seconds; repeat while the incident lasts (0 = never); no repeat is queued while an earlier notification of "
        "the incident is still undelivered (a receiver back from an outage gets one message, not one per interval "
        "missed); a change applies to the incidents going on from then"
    ),
    "subscriptions[].lag-seconds-threshold": "seconds; also alert while the lag in seconds is over it (0 = off)",
    "subscriptions[].retention-risk-threshold": "seconds; also alert while retention would delete unconsumed "
    "messages sooner, and when it deleted some (0 = off)",
    "subscriptions[].group-allowlist": "regex: only matching groups notify",
    "subscriptions[].group-denylist": "regex: matching groups never notify",
    "subscriptions[].clusters": "only these clusters (empty = all)",
    "subscriptions[].extras": "free strings for templates (Burrow's `extras`)",
}


@dataclasses.dataclass(frozen=True)
class Option:
    key: str  # as the file spells it: "storage.min-distance", "clusters.<name>.tls.ca-file"
    section: str
    env: str  # the environment variable, or "" when the option is file-only
    default: str
    meaning: str


def options() -> list[Option]:
    return list(_walk(Config, "", env_ok=True))


def _walk(cls: type, prefix: str, *, env_ok: bool) -> Iterator[Option]:
    hints = typing.get_type_hints(cls)
    comments = _line_comments(cls)
    for f in dataclasses.fields(cls):
        kind, name = hints[f.name], option_name(f)
        key = f"{prefix}{name}"
        args = typing.get_args(kind)
        if dataclasses.is_dataclass(kind):
            yield from _walk(kind, f"{key}.", env_ok=env_ok)
        elif typing.get_origin(kind) is dict and args and dataclasses.is_dataclass(args[1]):  # clusters
            yield from _walk(args[1], f"{key}.{CLUSTER}.", env_ok=env_ok)
        elif typing.get_origin(kind) is list and args and dataclasses.is_dataclass(args[0]):  # subscriptions
            yield from _walk(args[0], f"{key}{SUBSCRIPTION}.", env_ok=False)
        else:
            meaning = MEANINGS.get(key) or comments.get(f.name)
            if not meaning:
                raise SystemExit(f"{key}: no meaning; add it to MEANINGS in {Path(__file__).name}")
            yield Option(
                key, key.split(".")[0].removesuffix(SUBSCRIPTION), _env(key) if env_ok else "", _default(f), meaning
            )


def _env(key: str) -> str:
    parts = key.split(".")
    return "LAGWATCH__" + "__".join(p.upper().replace("-", "_") if p != CLUSTER else "<NAME>" for p in parts)


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:  # pragma: no cover - every option has a default
        return ""
    if f.metadata.get("required"):
        return "required"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, list):
        return f"`{', '.join(value)}`" if value else "`[]`"
    if isinstance(value, dict):
        return "`{}`"
    return f'`"{value}"`' if value == "" else f"`{value}`"


def _line_comments(cls: type) -> dict[str, str]:
    """The comment at the end of each field's line in the class's source (`name: type = ...  # comment`)."""
    out: dict[str, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(inspect.getsource(cls)).readline):
        field_line = re.match(r"    (\w+)\s*:", tok.line)
        if tok.type == tokenize.COMMENT and field_line:
            out[field_line.group(1)] = tok.string.lstrip("# ").strip()
    return out


SECTIONS = {
    "redis": "Redis",
    "storage": "Windows (`storage`)",
    "evaluator": "Evaluation and lagwatch's topics (`evaluator`)",
    "ingest": "The ingest service (`ingest`)",
    "api": "The HTTP api (`api`)",
    "notifier": "Notifications: delivery (`notifier`)",
    "history": "History for the Spark replay (`history`)",
    "clusters": "Kafka clusters (`clusters.<name>`)",
    "subscriptions": "Subscriptions (`subscriptions`, a list; more through the api)",
}


def table() -> str:
    """One Markdown table per section, each under a heading."""
    out: list[str] = []
    section = None
    for o in options():
        if o.section != section:
            section = o.section
            out += ["", f"### {SECTIONS.get(section, section)}", ""]
            out += ["| key | environment variable | default | meaning |", "| --- | --- | --- | --- |"]
        env = f"`{o.env}`" if o.env else "— (file or api)"
        out.append(f"| `{o.key}` | {env} | {o.default} | {o.meaning} |")
    return "\n".join(out[1:])


def rewritten(doc: str) -> str:
    head, _, rest = doc.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{table()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    doc = DOC.read_text()
    new = rewritten(doc)
    if "--check" in argv:
        if new != doc:
            print(f"{DOC} is out of date: run python scripts/config_reference.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
