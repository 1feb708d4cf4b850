"""Configuration: Burrow's names and defaults, a file, environment overrides, and errors that name the key."""

import pytest

from lagwatch.shared.config import ConfigError, load_config


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


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", "1e400", "'Infinity'", str(10**400), "31622401"])
def test_a_subscriptions_durations_are_finite_and_at_most_a_year(tmp_path, value):
    subscription = f"{{id: a, url: 'http://x.example/', send-interval: {value}}}"
    path = write(tmp_path, "subs.yaml", f"subscriptions:\n  - {subscription}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert err.value.key == "subscriptions[0].send-interval"
