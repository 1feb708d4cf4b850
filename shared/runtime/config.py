"""lagwatch's configuration: one model, read from a YAML or TOML file and environment variables.

Option names and defaults are Burrow's (`intervals`, `min-distance`, `expire-group`, `offset-refresh`,
`topic-refresh`, `allowed-lag`, `minimum-complete`, `group-allowlist`, `group-denylist`, `start-latest`, ...).
Times are in seconds, as in Burrow. A file looks like::

    redis: {url: "redis://127.0.0.1:6379/0"}
    storage: {intervals: 10, min-distance: 0, expire-group: 604800}
    evaluator: {allowed-lag: 0, minimum-complete: 0.0}
    clusters:
      prod:
        bootstrap-servers: ["kafka-1:9092", "kafka-2:9092"]
        offset-refresh: 10
        sasl: {mechanism: SCRAM-SHA-512, username: lagwatch, password: "..."}
    notifier: {dashboard-url: "https://lagwatch.example.com", max-attempts: 8}
    subscriptions:                   # notification targets (more can be added through the api)
      - {id: ops-slack, type: slack, url: "https://hooks.slack.com/services/...", threshold: ERR}

Precedence, lowest first: defaults, the file (`--config` or $LAGWATCH_CONFIG), then environment variables named
`LAGWATCH__SECTION__KEY` (`__` between levels, `_` for `-`; e.g. `LAGWATCH__STORAGE__MIN_DISTANCE=5`,
`LAGWATCH__CLUSTERS__PROD__BOOTSTRAP_SERVERS=a:9092,b:9092`). Two shortcuts for the common case:
`REDIS_URL`, and `KAFKA_BOOTSTRAP_SERVERS`, which sets the servers of every configured cluster (or defines the
cluster `local` when none is). Any bad value fails at start-up with a `ConfigError` naming the key (the limits:
docs/configuration.md).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lagwatch.shared.protocol.group_filter import GroupFilter
from lagwatch.shared.protocol.types import CLUSTER_NAME, CLUSTER_NAME_RULE, RuleConfig, WindowConfig

ENV_PREFIX = "LAGWATCH__"
MAX_SUBSCRIPTION_SECONDS = 366 * 86_400
# Upper bounds, so that a typo fails here and not in a service: durations become milliseconds added to an epoch-ms
# clock (int64 in the ingest's Cython pass, doubles in Redis scores and Lua, exact below 2^53); counts end up in C ints
MAX_SECONDS = 100 * 365 * 86_400  # a century
MAX_COUNT = 2**31 - 1
MAX_LAG = 2**63 - 1  # Kafka offsets are int64
MAX_BATCH = 1_000_000  # librdkafka's consume() takes at most this many messages
MAX_SESSION_SECONDS = 3600  # librdkafka's session.timeout.ms is 1 ms to 1 hour
REDIS_SCHEMES = ("redis", "rediss", "unix")  # redis-py's; unix:// not with cluster-mode
# pyarrow's FileSystem.from_uri (the archiver's), by scheme; anything without "://" is a local path
HISTORY_SCHEMES = ("file", "local", "s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss")


class ConfigError(ValueError):
    """A configuration value is missing or wrong; `key` is its dotted name."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"config {key}: {problem}")
        self.key, self.problem = key, problem


Check = Callable[[Any], str | None]  # a field's `check`: the problem with a value, or None


def _opt(default: Any, check: Check | None = None, **metadata: Any) -> Any:
    """A field of a scalar: its default, its `check`, and its other metadata:
    `secret` (a credential: masked wherever the configuration is shown, `lagwatch config check --show`), `shown`
    (how a refused value is quoted: a URL's password stays out of logs), `required`, `option` (the file's name)."""
    if check:
        metadata["check"] = check
    return field(default=default, metadata=metadata)


def _must(ok: Callable[[Any], object], problem: str) -> Check:
    """A check that says `problem` of a value `ok` refuses."""
    return lambda v: None if ok(v) else problem


def _one_of(choices: tuple[str, ...], or_empty: str | None = None) -> Check:
    """A check for one of `choices`; with `or_empty` (said after the choices), "" as well."""
    allowed = choices if or_empty is None else ("", *choices)
    return _must(lambda v: v in allowed, f"must be one of {', '.join(choices)}{or_empty or ''}")


def _at_most(limit: int, what: str, check: Check) -> Check:
    """`check`, then an upper bound that says why it is there (`what`)."""
    too_big = f"must be <= {limit}" + (f" ({what})" if what else "")
    return lambda v: check(v) or (None if v <= limit else too_big)


_positive = _must(lambda v: v > 0, "must be > 0")
_non_negative = _must(lambda v: v >= 0, "must be >= 0")
_seconds = _at_most(MAX_SECONDS, "a century", _positive)
_seconds_or_zero = _at_most(MAX_SECONDS, "a century", _non_negative)
_count = _at_most(MAX_COUNT, "2^31 - 1", _positive)
_count_or_zero = _at_most(MAX_COUNT, "2^31 - 1", _non_negative)
_batch_size = _at_most(MAX_BATCH, "librdkafka's consume() limit", _positive)
_lag = _at_most(MAX_LAG, "2^63 - 1", _non_negative)
# durations a subscription waits (repeats, lag thresholds): beyond a year they are typos, and they become
# millisecond timestamps in Redis scores, which must stay exact
_up_to_a_year = _at_most(MAX_SUBSCRIPTION_SECONDS, "a year", _non_negative)
_port = _must(lambda v: 0 <= v <= 65535, "not a port")
_fraction = _must(lambda v: 0.0 <= v <= 1.0, "must be between 0 and 1")
_session = _must(
    lambda v: 0.001 <= v <= MAX_SESSION_SECONDS,
    f"must be between 0.001 and {MAX_SESSION_SECONDS} (librdkafka's session.timeout.ms range)",
)
_brokers = _must(lambda v: v and all(s.strip() for s in v), "must list at least one broker (host:port)")
_http_url = _must(lambda v: v == "" or re.match(r"^https?://[^/\s]+", v), "must be an http(s) URL")


def _redis_url(v: str) -> str | None:
    """What redis-py's `from_url` takes: otherwise every service dies with its traceback as it connects."""
    from redis.asyncio.connection import parse_url  # the services' client; imported only when a URL is set

    if v.partition("://")[0].lower() not in REDIS_SCHEMES or "://" not in v:
        return "must be a redis://, rediss:// or unix:// URL"
    try:
        parse_url(v)
    except ValueError as exc:  # a port out of range, a bad query argument
        return f"not a valid Redis URL: {exc}"
    return None


def _hide_password(url: Any) -> Any:
    """The URL for an error line: a password in it (redis://:secret@host, s3://key:secret@bucket) becomes ***."""
    return re.sub(r"(?<=://)([^/@]*?):[^/@]*@", r"\1:***@", url, count=1) if isinstance(url, str) else url


def _history_path(v: str) -> str | None:
    if not v.strip():
        return "must not be empty (a local path, or a URI such as s3://bucket/prefix)"
    if "://" not in v:
        return None
    scheme, _, rest = v.partition("://")
    if scheme not in HISTORY_SCHEMES:
        return (
            f"unknown filesystem {scheme!r}: use a local path or one of {', '.join(s + '://' for s in HISTORY_SCHEMES)}"
        )
    if not rest.strip("/"):
        return f"{scheme}:// needs a bucket or path after it"
    if scheme in ("file", "local") and not rest.startswith("/"):
        return f"{scheme}:// needs an absolute path ({scheme}:///...)"
    return None


def _regex(v: str) -> str | None:
    try:
        re.compile(v)
    except re.error as exc:
        return f"not a valid regular expression: {exc}"
    return None


OFFSETS_SOURCES = ("topic", "admin", "auto")


@dataclass(frozen=True)
class RedisConfig:
    url: str = _opt("redis://127.0.0.1:6379/0", _redis_url, shown=_hide_password)
    cluster_mode: bool = False  # connect with the Redis Cluster client

    def cross_check(self) -> tuple[str, str] | None:
        if self.cluster_mode and self.url.lower().startswith("unix://"):
            return "url", "a Redis Cluster is reached over TCP: use redis:// or rediss:// with cluster-mode"
        return None


@dataclass(frozen=True)
class StorageConfig:
    intervals: int = _opt(10, _count)
    min_distance: int = _opt(0, _seconds_or_zero)
    expire_group: int = _opt(604_800, _seconds)
    group_allowlist: str = _opt("", _regex)
    group_denylist: str = _opt("", _regex)
    lag_history: int = _opt(3600, _seconds)  # seconds of log-end samples kept
    lag_history_samples: int = _opt(720, _count)  # at most, per partition


@dataclass(frozen=True)
class EvaluatorConfig:
    allowed_lag: int = _opt(0, _lag)
    minimum_complete: float = _opt(0.0, _fraction)
    minimum_entries: int = _opt(3, _count)  # before STOP, STALL or WARN are judged (docs/rules.md §3); Burrow's: 1
    max_groups: int = _opt(500_000, _count_or_zero)  # new groups past it: skipped
    new_groups_wait: float = _opt(60.0, _seconds_or_zero)  # at most, while an ingest worker reads a backlog
    sweep_interval: float = _opt(300.0, _seconds)  # seconds between full sweeps: a safety net
    status_topic: str = "lagwatch.status"
    changes_topic: str = "lagwatch.changes"
    lag_threshold_topic: str = "lagwatch.lag-thresholds"  # lag-seconds threshold crossings (lag_threshold_event.py)
    http_host: str = "127.0.0.1"
    http_port: int = _opt(8002, _port)


@dataclass(frozen=True)
class TlsConfig:
    enabled: bool = False
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    verify_hostname: bool = True


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "AWS_MSK_IAM", "GSSAPI")


@dataclass(frozen=True)
class OAuthConfig:
    """SASL OAUTHBEARER: a token from an OIDC provider's token endpoint (client-credentials grant)."""

    token_endpoint_url: str = _opt("", _http_url)  # the OIDC provider's token endpoint
    client_id: str = ""  # the OAuth client lagwatch logs in as
    client_secret: str = _opt("", secret=True)  # its secret (HTTP basic auth)
    scope: str = ""  # requested scope(s), space-separated; empty = the provider's default
    extensions: dict[str, str] = field(
        default_factory=dict, metadata={"secret": True}
    )  # SASL extensions (Confluent Cloud's)


@dataclass(frozen=True)
class AwsIamConfig:
    """AWS_MSK_IAM: tokens signed with AWS credentials (aws-msk-iam-sasl-signer-python), sent as OAUTHBEARER."""

    region: str = ""  # the cluster's region; empty = $AWS_REGION, $AWS_DEFAULT_REGION or the profile's region
    profile: str = ""  # a named profile of ~/.aws/config; empty = the default chain (environment, role, ...)
    role_arn: str = ""  # a role to assume (STS) with the default credentials; set `profile` or this, not both


@dataclass(frozen=True)
class KerberosConfig:
    """GSSAPI: Kerberos tickets from a keytab or the credential cache (kinit)."""

    service_name: str = "kafka"  # the brokers' Kerberos service: their principals are `<service>/<host>@REALM`
    principal: str = ""  # lagwatch's principal, e.g. lagwatch@EXAMPLE.COM; empty = the keytab's or cache's
    keytab: str = ""  # lagwatch's keytab file; empty = the credential cache (kinit)
    domain_name: str = ""  # the brokers' host name for the service principal, when it differs from the address


@dataclass(frozen=True)
class SaslConfig:
    mechanism: str = _opt("", _one_of(SASL_MECHANISMS, or_empty=" (or empty: no SASL)"))
    username: str = ""
    password: str = _opt("", secret=True)
    oauth: OAuthConfig = field(default_factory=OAuthConfig)
    aws: AwsIamConfig = field(default_factory=AwsIamConfig)
    kerberos: KerberosConfig = field(default_factory=KerberosConfig)

    def cross_check(self) -> tuple[str, str] | None:
        """The first option the mechanism needs and lacks, or one it does not use: (key below `sasl`, problem)."""
        m = self.mechanism
        wanted = {
            "username": m in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
            "oauth": m == "OAUTHBEARER",
            "aws": m == "AWS_MSK_IAM",
            "kerberos": m == "GSSAPI",
        }
        if wanted["username"] and not self.username:
            return "username", f"required with mechanism {m}"
        if m == "OAUTHBEARER":
            for key in ("token_endpoint_url", "client_id", "client_secret"):
                if not getattr(self.oauth, key):
                    return f"oauth.{key.replace('_', '-')}", "required with mechanism OAUTHBEARER"
        if m == "AWS_MSK_IAM" and self.aws.profile and self.aws.role_arn:
            return "aws.role-arn", "set `profile` or `role-arn`, not both (a profile may name a role itself)"
        if m == "GSSAPI" and not self.kerberos.service_name:
            return "kerberos.service-name", "required with mechanism GSSAPI"
        for key, used in wanted.items():
            value = getattr(self, key)
            if not used and value != type(value)() and (key != "username" or m):
                return key, f"is not used by mechanism {m or '(none)'}: set the mechanism, or remove it"
        return None


@dataclass(frozen=True)
class ClusterConfig:
    bootstrap_servers: list[str] = field(default_factory=lambda: ["127.0.0.1:9092"], metadata={"check": _brokers})
    offsets_topic: str = "__consumer_offsets"
    offsets_source: str = _opt("topic", _one_of(OFFSETS_SOURCES))  # where commits come from (topic or admin API)
    admin_groups: list[str] = field(default_factory=list)  # admin mode: groups to watch besides those listed
    offset_refresh: float = _opt(10.0, _seconds)
    topic_refresh: float = _opt(60.0, _seconds)
    start_latest: bool = False
    client_id: str = "lagwatch"
    group_allowlist: str = _opt("", _regex)  # overrides storage's when set
    group_denylist: str = _opt("", _regex)
    tls: TlsConfig = field(default_factory=TlsConfig)
    sasl: SaslConfig = field(default_factory=SaslConfig)

    def cross_check(self) -> tuple[str, str] | None:
        """Options that are each valid but not together: (key below the cluster, problem)."""
        sasl = self.sasl.cross_check()
        if sasl:
            return f"sasl.{sasl[0]}", sasl[1]
        if self.sasl.mechanism == "AWS_MSK_IAM" and not self.tls.enabled:
            return "tls.enabled", "must be true with AWS_MSK_IAM (MSK's IAM listener, port 9098, is TLS only)"
        return None


@dataclass(frozen=True)
class IngestConfig:
    batch_size: int = _opt(5000, _batch_size)  # records per Redis round of writes
    workers: int = _opt(0, _count_or_zero)  # worker processes; 0: one per CPU but one
    session_timeout: float = _opt(10.0, _session)  # consumer-group session, seconds
    http_host: str = "127.0.0.1"
    http_port: int = _opt(8001, _port)
    # read the log where offsets cannot tell transaction markers from unread records (services/ingest/log_probe.py)
    log_probe: bool = True
    log_probe_rate: float = _opt(50.0, _positive)  # probes a second, per cluster: its workers share it


ORIGIN = re.compile(r"^(\*|https?://[A-Za-z0-9.\-\[\]:]+)\Z")  # a CORS origin as browsers send it, or any: `*`


def cluster_name_problem(name: str) -> str | None:
    """Why `name` (a command's argument, a request's parameter) cannot be a cluster's; None when it can."""
    return None if CLUSTER_NAME.match(name) else f"{name[:100]!r} is not a cluster name ({CLUSTER_NAME_RULE})"


_tokens = _must(all, "must not hold an empty token")
# a header value, so no path, space or line break
_origin = _must(lambda v: v == "" or ORIGIN.match(v), "must be * or an origin (https://host[:port], no path)")


@dataclass(frozen=True)
class ApiConfig:
    host: str = "127.0.0.1"
    port: int = _opt(8000, _port)
    token: str = _opt("", secret=True)  # bearer token for mutating routes; empty = mutations refused
    # tokens still accepted beside `token` while clients move to it (a rotation)
    previous_tokens: list[str] = field(default_factory=list, metadata={"check": _tokens, "secret": True})
    request_timeout: float = _opt(30.0, _seconds)  # seconds; then 503
    # /metrics cardinality: partition-level series on or off, regexes for the series; they change no status
    metrics_partition_series: bool = True
    metrics_group_allowlist: str = _opt("", _regex)
    metrics_group_denylist: str = _opt("", _regex)
    metrics_topic_allowlist: str = _opt("", _regex)
    metrics_topic_denylist: str = _opt("", _regex)
    metrics_family_denylist: str = _opt("", _regex)  # /metrics: leave out the gauge families it matches
    tls_cert_file: str = ""  # HTTPS on the api's listener (services/api/listener_tls.py); empty: plain HTTP
    tls_key_file: str = ""
    access_control_allow_origin: str = _opt("", _origin)  # CORS (services/api/cors.py); empty = none

    def cross_check(self) -> tuple[str, str] | None:
        if self.tls_key_file and not self.tls_cert_file:
            return "tls-key-file", "needs tls-cert-file (the certificate the key belongs to)"
        if self.previous_tokens and not self.token:
            return "previous-tokens", "needs token (the one clients move to); without it mutations are refused"
        return None


THRESHOLDS = ("OK", "WARN", "ERR")  # group statuses a subscription's threshold may name, in Burrow's order
SUBSCRIPTION_TYPES = ("slack", "webhook", "alertmanager", "pagerduty", "msteams", "email")
SUBSCRIPTION_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}\Z")
HTTP_METHODS = ("POST", "PUT", "PATCH", "DELETE")  # DELETE: Burrow's usual `method-close`
MAX_REQUEST_TIMEOUT = 300
_request_timeout = _at_most(MAX_REQUEST_TIMEOUT, "", _non_negative)


@dataclass(frozen=True)
class SubscriptionConfig:
    """One notification target (Burrow's notifier module): who is told, when, and how. The notifier validates the
    URL (scheme, private/link-local addresses) and compiles the templates at start-up; see services/notifier."""

    id: str = _opt("", _must(SUBSCRIPTION_ID.match, "use 1-64 letters, digits, '.', '_' or '-'"), required=True)
    type: str = _opt("webhook", _one_of(SUBSCRIPTION_TYPES))
    url: str = ""  # required but for `email` and `pagerduty` (the Events API's): services/notifier/channels checks it
    secret: str = ""  # HMAC-SHA256 key for X-Lagwatch-Signature (webhooks)
    method: str = _opt("POST", _one_of(HTTP_METHODS))
    url_close: str = ""  # Burrow's: closes (close, lag-close) go here; empty = url; keeps url's scheme, host, port
    method_close: str = _opt("", _one_of(HTTP_METHODS, or_empty=""))  # closes' method; empty = `method`
    timeout: float = _opt(0.0, _request_timeout)  # seconds per request; 0 = notifier's
    extra_ca: str = ""  # CAs trusted besides the system's: PEM text, or a PEM file's path (configuration file only)
    noverify: bool = False  # https without certificate checks (Burrow's `noverify`): test endpoints only
    headers: dict[str, str] = field(default_factory=dict)
    body_template: str = ""  # Jinja2 (sandboxed); empty = the default body (Slack Block Kit / the event JSON)
    url_template: str = ""  # Jinja2 (sandboxed); empty = `url`
    threshold: str = _opt("WARN", _one_of(THRESHOLDS))
    send_close: bool = True  # tell when the incident is over (OK or NOTFOUND again)
    send_once: bool = False  # one notification per incident (no updates, no repeats)
    send_interval: float = _opt(0.0, _up_to_a_year)  # repeat while open; 0 = never
    lag_seconds_threshold: float = _opt(0.0, _up_to_a_year)  # lagwatch's own rule beside Burrow's; 0 = off
    retention_risk_threshold: float = _opt(0.0, _up_to_a_year)  # data-loss-risk, messages-skipped; 0 = off
    group_allowlist: str = _opt("", _regex)
    group_denylist: str = _opt("", _regex)
    clusters: list[str] = field(default_factory=list)  # empty = every cluster
    extras: dict[str, str] = field(default_factory=dict)  # free values for templates (Burrow's `extras`)
    hold_for: float = _opt(0.0, _up_to_a_year)  # flap suppression (Prometheus's `for:`); 0 = at once
    routing_key: str = ""  # pagerduty: the integration's routing key (Events API v2)
    smtp_host: str = ""  # email: the SMTP server
    smtp_port: int = _opt(587, _must(lambda v: 0 < v <= 65535, "not a port"))
    from_: str = _opt("", option="from")  # email: the From address
    to: list[str] = field(default_factory=list)  # email: the recipients
    username: str = ""  # email: SMTP login (empty = no AUTH); HTTP types: basic auth, sent when set (Burrow's)
    password: str = ""  # email: SMTP password; HTTP types: the basic-auth password
    starttls: bool = True  # email: upgrade the connection with STARTTLS (required when `username` is set)


@dataclass(frozen=True)
class NotifierConfig:
    http_host: str = "127.0.0.1"
    http_port: int = _opt(8003, _port)
    dashboard_url: str = ""  # linked from Slack messages (the api or a dashboard)
    dlq_topic: str = "lagwatch.dlq"  # dead letters: deliveries that failed for good
    start_latest: bool = False  # a brand-new notifier group starts at the end of the status topic
    allow_private_targets: bool = False  # webhooks to 10/8, 172.16/12, 192.168/16, 127/8, ::1, fc00::/7
    max_attempts: int = _opt(8, _count)
    backoff_base: float = _opt(1.0, _seconds)  # seconds; doubles per attempt
    backoff_cap: float = _opt(300.0, _seconds)  # seconds; full jitter below it
    request_timeout: float = _opt(10.0, _seconds)  # seconds per HTTP request
    per_host_concurrency: int = _opt(4, _count)  # requests in flight per host
    per_host_queue: int = _opt(200, _count)  # deliveries held per host
    breaker_failures: int = _opt(5, _count)  # consecutive failures: circuit opens
    breaker_cooldown: float = _opt(30.0, _seconds)  # seconds before a probe
    lease: float = _opt(30.0, _seconds)  # visibility timeout of a claimed delivery
    poll_interval: float = _opt(0.5, _seconds)  # outbox poll when idle, seconds
    repeat_check_interval: float = _opt(1.0, _seconds)  # send-interval timer
    dedupe_ttl: float = _opt(604_800.0, _seconds)  # seconds an event id is remembered


@dataclass(frozen=True)
class HistoryConfig:
    """The history of what the ingest read, for the Spark replay (shared/records/history.py): the ingest publishes every
    commit and log-end sample to `topic`; the archiver (`lagwatch run archiver`) writes the topic to Parquet."""

    enabled: bool = False  # off by default: it doubles what the ingest writes to Kafka
    topic: str = "lagwatch.history"
    path: str = _opt("history", shown=_hide_password)  # the archiver's Parquet root
    flush_rows: int = _opt(100_000, _count)  # the archiver's memory bound, records
    flush_interval: float = _opt(60.0, _seconds)  # seconds: files at least this often
    http_host: str = "127.0.0.1"
    http_port: int = _opt(8004, _port)

    def cross_check(self) -> tuple[str, str] | None:
        problem = _history_path(self.path)  # here, not a field check: the field's line comment is its documentation
        return ("path", f"{problem}, got {_hide_password(self.path)!r}") if problem else None


@dataclass(frozen=True)
class Config:
    redis: RedisConfig = field(default_factory=RedisConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    evaluator: EvaluatorConfig = field(default_factory=EvaluatorConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    notifier: NotifierConfig = field(default_factory=NotifierConfig)
    history: HistoryConfig = field(default_factory=HistoryConfig)
    clusters: dict[str, ClusterConfig] = field(default_factory=dict)
    subscriptions: list[SubscriptionConfig] = field(default_factory=list)

    def window(self) -> WindowConfig:
        s = self.storage
        return WindowConfig(
            s.intervals, s.min_distance * 1000, s.expire_group * 1000, s.lag_history * 1000, s.lag_history_samples
        )

    def rules(self) -> RuleConfig:
        e = self.evaluator
        return RuleConfig(e.allowed_lag, e.minimum_complete, e.minimum_entries)

    def cluster(self, name: str) -> ClusterConfig:
        try:
            return self.clusters[name]
        except KeyError:
            raise ConfigError(f"clusters.{name}", "no such cluster is configured") from None

    def only_cluster(self) -> str:
        """The cluster to use when none is named: there must be exactly one."""
        if len(self.clusters) != 1:
            names = ", ".join(sorted(self.clusters)) or "none"
            raise ConfigError("clusters", f"name the cluster to use (configured: {names})")
        return next(iter(self.clusters))

    def group_filter(self, cluster: str) -> GroupFilter:
        """A cluster's own allow/deny regexes, or the storage-wide ones."""
        c = self.cluster(cluster)
        return GroupFilter(
            allowlist=c.group_allowlist or self.storage.group_allowlist,
            denylist=c.group_denylist or self.storage.group_denylist,
        )


def load_config(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Defaults, then the file, then the environment; raises ConfigError naming the first bad key."""
    env = os.environ if env is None else env
    path = path or env.get("LAGWATCH_CONFIG")
    raw = _read_file(Path(path)) if path else {}
    _merge(raw, _from_env(env))
    _apply_shortcuts(raw, env)
    config: Config = build_section(Config, raw, "")
    return config


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but a key given twice in a mapping is an error (YAML's own rule; TOML's too): PyYAML
    keeps the last silently, so a section written twice (`ingest:` added at the end) would drop the first's
    options with no word said."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults`: keys given here override those
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, typing.Hashable):  # PyYAML's own error follows
                continue
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error on one line, with the file's line and column (its own text spans several, with a caret)."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return " ".join(str(exc).split())
    mark, context_mark = exc.problem_mark, exc.context_mark
    text = f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    if exc.context:
        at = f" at line {context_mark.line + 1}, column {context_mark.column + 1}" if context_mark else ""
        text += f" ({exc.context}{at})"
    return text


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError("file", f"cannot read {path}: {exc.strerror}") from None
    try:
        doc = tomllib.loads(text) if path.suffix == ".toml" else yaml.load(text, Loader=_UniqueKeyLoader)  # safe
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("file", f"{path} is not valid TOML: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError("file", f"{path} is not valid YAML: {_yaml_problem(exc)}") from None
    if doc is not None and not isinstance(doc, dict):
        raise ConfigError("file", f"{path} must hold a mapping at the top")
    return doc or {}


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        parts = [p.lower().replace("_", "-") for p in name[len(ENV_PREFIX) :].split("__")]
        if parts[0] == "clusters" and len(parts) > 1:
            parts[1] = name[len(ENV_PREFIX) :].split("__")[1]  # cluster names keep their case
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def _apply_shortcuts(raw: dict[str, Any], env: Mapping[str, str]) -> None:
    if env.get("REDIS_URL"):
        raw.setdefault("redis", {})["url"] = env["REDIS_URL"]
    if env.get("KAFKA_BOOTSTRAP_SERVERS"):
        clusters = raw.setdefault("clusters", {})
        if not clusters:
            clusters["local"] = {}
        for name, cluster in clusters.items():
            if cluster is None:  # `prod:` with nothing under it (its brokers left to this variable) is `prod: {}`
                cluster = clusters[name] = {}
            if isinstance(cluster, dict):
                cluster["bootstrap-servers"] = env["KAFKA_BOOTSTRAP_SERVERS"]


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


def option_name(f: dataclasses.Field[Any]) -> str:
    """How the file spells a field: kebab-case, or its `option` (`from`, a Python keyword)."""
    return f.metadata.get("option") or f.name.replace("_", "-")


def build_section(cls: type, raw: Any, where: str = "") -> Any:
    """One configuration section (a dataclass above) from a mapping with the file's option names; ConfigError
    naming the first bad key. For other sources of the same objects too (subscriptions created through the api)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(where or "file", "expected a mapping")
    known = sorted(option_name(f) for f in dataclasses.fields(cls))
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ConfigError(_join(where, unknown[0]), f"unknown option (known: {', '.join(known)})")
    values, problems = _values(cls, raw, where)
    if problems:
        raise problems[0]
    built = cls(**values)
    problem = built.cross_check() if hasattr(built, "cross_check") else None  # options that depend on each other
    if problem:
        raise ConfigError(_join(where, problem[0]), problem[1])
    return built


def field_problems(cls: type, raw: Any) -> dict[str, str]:
    """Every problem of `raw` as options of the dataclass `cls` ({key: problem}), where loading stops at the first
    one: for APIs that report all invalid fields at once. Empty when `build_section(cls, raw)` would succeed."""
    if not isinstance(raw, Mapping):
        return {"": "expected a JSON object"}
    known = {option_name(f) for f in dataclasses.fields(cls)}
    problems = {str(key): "unknown option" for key in raw if key not in known}
    return problems | {exc.key: exc.problem for exc in _values(cls, raw, "")[1]}


SHOWN_MAX = 120  # characters of a refused value an error quotes: a hostile body is not sent back whole


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_MAX else f"{text[:SHOWN_MAX]}... ({len(text)} characters)"


def _values(cls: type, raw: Mapping[str, Any], where: str) -> tuple[dict[str, Any], list[ConfigError]]:
    """The options of `raw` converted and checked, by field name; the problems, in the fields' order."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    problems = []
    for f in dataclasses.fields(cls):
        key = _join(where, option_name(f))
        try:
            if option_name(f) in raw:
                values[f.name] = _field_value(hints[f.name], f, raw[option_name(f)], key)
            elif f.metadata.get("required"):
                raise ConfigError(key, "required")
        except ConfigError as exc:
            problems.append(exc)
    return values, problems


def _field_value(kind: Any, f: dataclasses.Field[Any], value: Any, key: str) -> Any:
    converted = _convert(kind, value, key)
    problem = f.metadata["check"](converted) if "check" in f.metadata else None
    if problem:
        shown = f.metadata.get("shown", lambda v: v)(value)  # a URL's password stays out of logs
        raise ConfigError(key, f"{problem}, got {_shown(shown)}")
    return converted


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _convert(kind: Any, value: Any, where: str) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return build_section(kind, value, where)
    if origin is list and dataclasses.is_dataclass(args[0]):  # subscriptions
        if not isinstance(value, list):
            raise ConfigError(where, "expected a list")
        return [build_section(typing.get_args(kind)[0], item, f"{where}[{i}]") for i, item in enumerate(value)]
    if origin is dict:  # clusters: name -> ClusterConfig; headers, extras: str -> str
        sections = dataclasses.is_dataclass(args[1])
        if not isinstance(value, Mapping):
            raise ConfigError(where, "expected a mapping of names" + ("" if sections else " to strings"))
        if not sections:
            return {str(k): _convert(str, v, f"{where}.{k}") for k, v in value.items()}
        for name in value:
            if not CLUSTER_NAME.match(str(name)):
                raise ConfigError(f"{where}.{name}", f"cluster names may use {CLUSTER_NAME_RULE} only")
        return {str(name): build_section(args[1], body or {}, f"{where}.{name}") for name, body in value.items()}
    if origin is list:
        items = [s.strip() for s in value.split(",") if s.strip()] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ConfigError(where, f"expected a list of strings, got {_shown(value)}")
        return items
    if kind is bool:
        return _to_bool(value, where)
    if kind in (int, float):
        return _to_number(kind, value, where)
    if kind is str:
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise ConfigError(where, f"expected a string, got {_shown(value)}")
        return str(value)
    raise ConfigError(where, f"unsupported option type {kind}")  # pragma: no cover


def _to_bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
        return value.lower() in ("true", "1", "yes", "on")
    raise ConfigError(where, f"expected true or false, got {_shown(value)}")


def _to_number(kind: type[int] | type[float], value: Any, where: str) -> int | float:
    if isinstance(value, bool):
        raise ConfigError(where, f"expected a number, got {_shown(value)}")
    number: Any
    try:
        number = kind(value) if isinstance(value, str) else value
    except ValueError:
        number = None
    if kind is int and isinstance(number, float) and number.is_integer():
        number = int(number)
    if not isinstance(number, kind) and not (kind is float and isinstance(number, int)):
        raise ConfigError(where, f"expected {'an integer' if kind is int else 'a number'}, got {_shown(value)}")
    if kind is float:  # inf and nan (JSON's 1e400 and Infinity, YAML's .inf, "inf"), integers past a float's range
        try:
            number = float(number)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise ConfigError(where, f"expected a finite number, got {_shown(value)}")
    return kind(number)
