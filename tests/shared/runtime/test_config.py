"""Configuration: Burrow's names and defaults, a file, environment overrides, and errors that name the key."""

import pytest

from lagwatch.shared.runtime.config import ConfigError, load_config


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_defaults_are_burrows():
    cfg = load_config(env={})
    assert (cfg.storage.intervals, cfg.storage.min_distance, cfg.storage.expire_group) == (10, 0, 604800)
    assert (cfg.evaluator.allowed_lag, cfg.evaluator.minimum_complete) == (0, 0.0)
    assert cfg.clusters == {}
    assert cfg.window().expire_group_ms == 604_800_000


def test_yaml_file_with_several_named_clusters(tmp_path):
    path = write(
        tmp_path,
        "lagwatch.yaml",
        """
storage: {intervals: 12, min-distance: 5, group-denylist: "^console-consumer-"}
clusters:
  prod:
    bootstrap-servers: ["k1:9092", "k2:9092"]
    offset-refresh: 30
    sasl: {mechanism: SCRAM-SHA-512, username: lw, password: secret}
  staging: {bootstrap-servers: ["s1:9092"], start-latest: true}
""",
    )
    cfg = load_config(path, env={})
    assert cfg.storage.intervals == 12 and cfg.window().min_distance_ms == 5000
    assert cfg.cluster("prod").bootstrap_servers == ["k1:9092", "k2:9092"]
    assert cfg.cluster("prod").offset_refresh == 30.0 and cfg.cluster("prod").topic_refresh == 60.0
    assert cfg.cluster("prod").sasl.mechanism == "SCRAM-SHA-512"
    assert cfg.cluster("staging").start_latest is True


def test_toml_file_works_too(tmp_path):
    path = write(tmp_path, "lagwatch.toml", "[evaluator]\nallowed-lag = 5\nminimum-complete = 0.5\n")
    cfg = load_config(path, env={})
    assert cfg.rules().allowed_lag == 5 and cfg.rules().minimum_complete == 0.5


def test_environment_overrides_the_file(tmp_path):
    path = write(tmp_path, "c.yaml", "storage: {intervals: 12}\nclusters: {Prod: {}}\n")
    env = {
        "LAGWATCH_CONFIG": str(path),
        "LAGWATCH__STORAGE__INTERVALS": "15",
        "LAGWATCH__CLUSTERS__Prod__BOOTSTRAP_SERVERS": "a:1,b:2",
        "LAGWATCH__CLUSTERS__Prod__TLS__ENABLED": "true",
    }
    cfg = load_config(env=env)
    assert cfg.storage.intervals == 15
    assert cfg.cluster("Prod").bootstrap_servers == ["a:1", "b:2"]
    assert cfg.cluster("Prod").tls.enabled is True


def test_shortcuts_for_redis_and_kafka():
    cfg = load_config(env={"REDIS_URL": "redis://r:6380/1", "KAFKA_BOOTSTRAP_SERVERS": "k:9092"})
    assert cfg.redis.url == "redis://r:6380/1"
    assert cfg.cluster("local").bootstrap_servers == ["k:9092"]


def test_the_kafka_shortcut_sets_a_cluster_declared_with_nothing_under_it(tmp_path):
    """`prod:` alone is YAML's null: its brokers are the shortcut's, not the default 127.0.0.1:9092."""
    path = write(tmp_path, "c.yaml", "clusters:\n  prod:   # brokers from KAFKA_BOOTSTRAP_SERVERS\n  dev: {}\n")
    cfg = load_config(path, env={"KAFKA_BOOTSTRAP_SERVERS": "k:9092"})
    assert cfg.cluster("prod").bootstrap_servers == cfg.cluster("dev").bootstrap_servers == ["k:9092"]


@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({"LAGWATCH__STORAGE__INTERVALS": "ten"}, "storage.intervals"),
        ({"LAGWATCH__STORAGE__INTERVALS": "0"}, "storage.intervals"),
        ({"LAGWATCH__EVALUATOR__MINIMUM_COMPLETE": "1.5"}, "evaluator.minimum-complete"),
        ({"LAGWATCH__STORAGE__GROUP_ALLOWLIST": "("}, "storage.group-allowlist"),
        ({"LAGWATCH__STORAGE__INTERVAL": "10"}, "storage.interval"),
        ({"LAGWATCH__CLUSTERS__bad name__OFFSET_REFRESH": "1"}, "clusters.bad name"),
        ({"LAGWATCH__CLUSTERS__x__SASL__MECHANISM": "KERBEROS"}, "clusters.x.sasl.mechanism"),
        ({"LAGWATCH__CLUSTERS__x__SASL__MECHANISM": "OAUTHBEARER"}, "clusters.x.sasl.oauth.token-endpoint-url"),
        ({"LAGWATCH__CLUSTERS__x__START_LATEST": "maybe"}, "clusters.x.start-latest"),
        ({"LAGWATCH__NOTIFIER__BACKOFF_CAP": "inf"}, "notifier.backoff-cap"),
        ({"LAGWATCH__NOTIFIER__LEASE": "nan"}, "notifier.lease"),
        ({"LAGWATCH__CLUSTERS__x__OFFSET_REFRESH": "1e400"}, "clusters.x.offset-refresh"),
    ],
)
def test_a_bad_value_names_its_key(env, key):
    with pytest.raises(ConfigError) as err:
        load_config(env=env)
    assert err.value.key == key
    assert key in str(err.value)


def test_unreadable_or_malformed_files_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml", env={})
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "bad.yaml", "storage: [unclosed"), env={})
    with pytest.raises(ConfigError, match=r"clusters\.nope"):
        load_config(env={}).cluster("nope")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            "ingest: {http-host: 0.0.0.0}\nstorage: {intervals: 3}\ningest: {workers: 2}\n",
            "line 3, column 1: duplicate key 'ingest'",
        ),
        ("storage:\n  intervals: 3\n  intervals: 4\n", "line 3, column 3: duplicate key 'intervals'"),
        ("redis: {url: 'redis://x\n", "line 2, column 1: found unexpected end of stream (while scanning a quoted"),
    ],
    ids=["a section twice", "an option twice", "a syntax error"],
)
def test_a_yaml_error_is_one_line_with_its_line_and_column(tmp_path, text, says):
    """PyYAML keeps the last of two equal keys: the first `ingest:` (its http-host) would go with no word said."""
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "c.yaml", text), env={})
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_yaml_merge_key_may_be_overridden(tmp_path):
    path = write(tmp_path, "c.yaml", "ingest:\n  <<: {http-host: 0.0.0.0, http-port: 9}\n  http-port: 8001\n")
    assert (load_config(path, env={}).ingest.http_host, load_config(path, env={}).ingest.http_port) == ("0.0.0.0", 8001)


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", "1e400", "'Infinity'", str(10**400), "31622401"])
def test_a_subscriptions_durations_are_finite_and_at_most_a_year(tmp_path, value):
    subscription = f"{{id: a, url: 'http://x.example/', send-interval: {value}}}"
    path = write(tmp_path, "subs.yaml", f"subscriptions:\n  - {subscription}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert err.value.key == "subscriptions[0].send-interval"


@pytest.mark.parametrize(
    ("option", "value", "key"),
    [
        ("storage: {expire-group: %s}", 10**30, "storage.expire-group"),  # the ingest's int64 milliseconds overflowed
        ("storage: {min-distance: %s}", 10**30, "storage.min-distance"),
        ("storage: {lag-history: %s}", 3_153_600_001, "storage.lag-history"),
        ("storage: {intervals: %s}", 2**31, "storage.intervals"),
        ("evaluator: {allowed-lag: %s}", 2**63, "evaluator.allowed-lag"),
        ("evaluator: {sweep-interval: %s}", 1e20, "evaluator.sweep-interval"),
        ("clusters: {x: {offset-refresh: %s}}", 1e20, "clusters.x.offset-refresh"),
        ("ingest: {batch-size: %s}", 1_000_001, "ingest.batch-size"),
        ("ingest: {session-timeout: %s}", 3601, "ingest.session-timeout"),
        ("notifier: {dedupe-ttl: %s}", 1e13, "notifier.dedupe-ttl"),
        ("history: {flush-rows: %s}", 2**31, "history.flush-rows"),
    ],
)
def test_durations_and_counts_have_an_upper_bound_naming_the_key(tmp_path, option, value, key):
    """Seconds become int64 milliseconds and counts C ints in the services: a typo must fail here, not there."""
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "c.yaml", option % value), env={})
    assert err.value.key == key
    assert str(err.value).startswith(f"config {key}: must be")


def test_the_upper_bounds_leave_room_for_any_real_setting(tmp_path):
    text = """
storage: {expire-group: 3153600000, min-distance: 3153600000, intervals: 2147483647}
evaluator: {allowed-lag: 9223372036854775807}
ingest: {batch-size: 1000000, session-timeout: 3600}
"""
    cfg = load_config(write(tmp_path, "c.yaml", text), env={})
    assert cfg.window().expire_group_ms == 3_153_600_000_000  # a century, well inside an int64 and a double
    assert (cfg.ingest.batch_size, cfg.ingest.session_timeout) == (1_000_000, 3600.0)


@pytest.mark.parametrize(
    "url", ["http://nope", "5", "localhost:6379", "redis-cluster://a:7000", "redis://h:99999/0", "redis://h/0?db=x"]
)
def test_redis_url_must_be_one_redis_py_connects_to(url):
    with pytest.raises(ConfigError) as err:
        load_config(env={"LAGWATCH__REDIS__URL": url})
    assert err.value.key == "redis.url"


def test_redis_url_forms_redis_py_takes_are_accepted():
    for url in ("redis://r:6380/1", "rediss://:secret@r:6380/0", "unix:///run/redis.sock?db=2"):
        assert load_config(env={"REDIS_URL": url}).redis.url == url
    cluster = {"LAGWATCH__REDIS__URL": "rediss://node-1:7000", "LAGWATCH__REDIS__CLUSTER_MODE": "true"}
    assert load_config(env=cluster).redis.cluster_mode is True


def test_a_redis_cluster_is_not_reached_through_a_unix_socket():
    env = {"LAGWATCH__REDIS__URL": "unix:///run/redis.sock", "LAGWATCH__REDIS__CLUSTER_MODE": "true"}
    with pytest.raises(ConfigError, match=r"redis\.url: a Redis Cluster is reached over TCP"):
        load_config(env=env)


def test_a_bad_url_is_shown_without_its_password():
    with pytest.raises(ConfigError) as err:
        load_config(env={"REDIS_URL": "http://lagwatch:s3cret@redis:6379"})
    assert "s3cret" not in str(err.value) and "lagwatch:***@redis" in str(err.value)


@pytest.mark.parametrize("path", ["bogus://x", "S3://bucket/h", "s3://", "file://history", "", " "])
def test_history_path_is_a_local_path_or_a_filesystem_pyarrow_knows(path):
    with pytest.raises(ConfigError) as err:
        load_config(env={"LAGWATCH__HISTORY__PATH": path})
    assert err.value.key == "history.path"


@pytest.mark.parametrize(
    "path", ["history", "/var/lib/lagwatch/history", "file:///data/h", "s3://bucket/prefix", "hdfs://nn:8020/h"]
)
def test_history_path_accepts_local_paths_and_object_stores(path):
    assert load_config(env={"LAGWATCH__HISTORY__PATH": path}).history.path == path


def test_every_history_scheme_accepted_is_one_pyarrow_recognises():
    """The list in shared/runtime/config.py follows pyarrow's FileSystem.from_uri: a scheme it does not know would pass
    the check and fail in the archiver. (Opening may still fail here, e.g. without libhdfs: not for want of a
    scheme.)"""
    from pyarrow import fs

    from lagwatch.shared.runtime.config import HISTORY_SCHEMES

    for scheme in HISTORY_SCHEMES:
        uri = f"{scheme}:///tmp/h" if scheme in ("file", "local") else f"{scheme}://bucket/h?region=us-east-1"
        try:
            fs.FileSystem.from_uri(uri)
        except Exception as exc:
            assert "Unrecognized filesystem type" not in str(exc), scheme


@pytest.mark.parametrize(
    ("env", "text"),
    [
        ({"LAGWATCH__CLUSTERS__x__BOOTSTRAP_SERVERS": ""}, ""),
        ({"LAGWATCH__CLUSTERS__x__BOOTSTRAP_SERVERS": ",,"}, ""),
        ({}, "clusters: {x: {bootstrap-servers: []}}"),
        ({}, "clusters: {x: {bootstrap-servers: ['']}}"),
    ],
)
def test_a_cluster_needs_at_least_one_broker(tmp_path, env, text):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "c.yaml", text), env=env)
    assert err.value.key == "clusters.x.bootstrap-servers"
    assert "at least one broker" in str(err.value)


def test_a_cluster_name_ending_in_a_newline_is_refused(tmp_path):
    # it names Redis keys and the history's directories: a `^...$` pattern let one trailing newline through
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "c.yaml", 'clusters: {"prod\\n": {bootstrap-servers: ["k:9092"]}}'), env={})
    assert "prod" in str(err.value)


def test_previous_api_tokens_need_a_current_one_and_none_may_be_empty(tmp_path):
    """A rotation keeps old tokens beside the new one; old ones alone would accept what `token` empty refuses."""
    with pytest.raises(ConfigError, match=r"previous-tokens.*needs token"):
        load_config(env={"LAGWATCH__API__PREVIOUS_TOKENS": "old-token-2025"})
    path = tmp_path / "lagwatch.yaml"
    path.write_text('api: {token: t, previous-tokens: ["a", ""]}\n')
    with pytest.raises(ConfigError, match=r"previous-tokens.*empty token"):
        load_config(path, env={})
    config = load_config(env={"LAGWATCH__API__TOKEN": "t", "LAGWATCH__API__PREVIOUS_TOKENS": "old-1,old-2"})
    assert config.api.previous_tokens == ["old-1", "old-2"]
