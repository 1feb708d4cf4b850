"""`lagwatch config check`: the configuration checked as the services would check it, without connecting to
anything; run as a real subprocess, as a pipeline would."""

import dataclasses
import typing

import pytest
import yaml

from lagwatch.services.notifier.subscriptions import from_config
from lagwatch.shared.notifications.subscriptions.masking import CREDENTIAL_NAME
from lagwatch.shared.runtime.config import Config, ConfigError, load_config
from tests.lagwatch.test_cli import lagwatch

# no variable of the test's own environment may change what is checked
CLEAN = {"LAGWATCH_CONFIG": "", "REDIS_URL": "", "KAFKA_BOOTSTRAP_SERVERS": ""}

GOOD = """
redis: {url: "redis://redis:6379/0"}
clusters:
  prod:
    bootstrap-servers: ["kafka-1:9092", "kafka-2:9092"]
    sasl: {mechanism: SCRAM-SHA-512, username: lagwatch, password: "pw-one-two-three"}
api: {token: "token-one-two-three"}
subscriptions:
  - {id: ops-slack, type: slack, url: "https://hooks.slack.com/services/T0/B0/XXXXXXXX", threshold: ERR}
"""

# five problems the notifier and the Kafka clients would each find only at their start, one at a time
BAD = """
clusters:
  prod:
    bootstrap-servers: ["kafka-1:9093"]
    tls: {enabled: true, ca-file: /nonexistent/ca.pem}
subscriptions:
  - {id: a, type: webhook, url: "http://10.0.0.5/hook", body-template: "{{ event.group "}
  - {id: a, type: slack, url: "https://hooks.slack.com/x", group-allowlist: "(a+)\\\\1"}
"""


def check(tmp_path, text, *args, env=None):
    path = tmp_path / "lagwatch.yaml"
    path.write_text(text)
    return lagwatch("config", "check", "--config", str(path), *args, env={**CLEAN, **(env or {})})


def test_a_good_configuration_is_summarized_and_exits_0(tmp_path):
    result = check(tmp_path, GOOD, env={"LAGWATCH__STORAGE__MIN_DISTANCE": "5"})
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].endswith("lagwatch.yaml, then from the environment LAGWATCH__STORAGE__MIN_DISTANCE")
    assert "cluster prod: kafka-1:9092, kafka-2:9092, SASL SCRAM-SHA-512; commits from __consumer_offsets" in lines
    assert "subscription ops-slack: slack to https://hooks.slack.com:443, threshold ERR" in lines
    assert lines[-1] == "ok: 1 cluster, 1 subscription"
    assert "pw-one-two-three" not in result.stdout and "token-one-two-three" not in result.stdout


def test_every_problem_is_listed_with_its_key_and_exit_code_2(tmp_path):
    result = check(tmp_path, BAD)
    assert result.returncode == 2 and result.stdout == ""
    assert "Traceback" not in result.stderr
    problems = result.stderr.splitlines()
    keys = [line.split(": ")[1] for line in problems]
    assert keys == [
        "config clusters.prod.tls",
        "config subscriptions[0].url",
        "config subscriptions[0].body-template",
        "config subscriptions[1].id",
        "config subscriptions[1].group-allowlist",
    ], problems
    assert "10.0.0.5 is a private address" in problems[1]
    assert "does not compile" in problems[2]


def test_a_subscription_problem_is_said_as_the_notifier_says_it_at_its_start(tmp_path):
    """The same words: the notifier refuses to start on the first of them."""
    result = check(tmp_path, BAD)
    path = tmp_path / "lagwatch.yaml"
    with pytest.raises(ConfigError) as refused:
        from_config(load_config(path, env={}))
    assert f"lagwatch: {refused.value}" in result.stderr.splitlines()


def test_a_value_the_loader_refuses_is_one_line(tmp_path):
    result = check(tmp_path, "storage: {intervals: 0}\n")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.strip() == "lagwatch: config storage.intervals: must be > 0, got 0"


def test_an_aws_login_without_a_region_is_a_problem(tmp_path):
    text = "clusters:\n  msk:\n    tls: {enabled: true}\n    sasl: {mechanism: AWS_MSK_IAM}\n"
    result = check(tmp_path, text, env={"AWS_REGION": "", "AWS_DEFAULT_REGION": "", "AWS_CONFIG_FILE": "/nonexistent"})
    assert result.returncode == 2
    assert result.stderr.startswith("lagwatch: config clusters.msk.sasl.aws.region: no region"), result.stderr


def test_likely_mistakes_are_warnings_and_still_exit_0(tmp_path):
    text = GOOD.replace("threshold: ERR}", "threshold: ERR, clusters: [prod, staging]}")
    result = check(tmp_path, text)
    assert result.returncode == 0
    assert result.stderr.splitlines() == [
        "lagwatch: warning: config subscriptions[0].clusters: staging not defined here: its alerts come only from a "
        "notifier whose configuration defines it"
    ]
    assert result.stdout.splitlines()[-1] == "ok: 1 cluster, 1 subscription, 1 warning (above)"
    nothing = check(tmp_path, "")
    assert nothing.returncode == 0
    assert "clusters: none is defined" in nothing.stderr


SECRETS = {
    "redis-password-1",
    "sasl-password-1",
    "client-secret-1",
    "extension-value-1",
    "api-token-123456",
    "old-api-token-12",
    "signing-secret-1",
    "header-value-123",
    "extra-value-1234",
    "basic-password-1",
    "hooks-path-12345",
}
ALL_SECRETS = """
redis: {url: "redis://:redis-password-1@redis:6379/0"}
clusters:
  plain: {sasl: {mechanism: PLAIN, username: u, password: sasl-password-1}}
  oidc:
    sasl:
      mechanism: OAUTHBEARER
      oauth: {token-endpoint-url: "https://idp/token", client-id: c, client-secret: client-secret-1,
               extensions: {logicalCluster: extension-value-1}}
api: {token: api-token-123456, previous-tokens: [old-api-token-12]}
subscriptions:
  - id: hook
    url: "https://example.com/hooks-path-12345"
    secret: signing-secret-1
    headers: {X-Api-Key: header-value-123}
    extras: {note: extra-value-1234}
    username: someone
    password: basic-password-1
"""


def test_show_prints_the_effective_configuration_with_every_credential_masked(tmp_path):
    result = check(tmp_path, ALL_SECRETS, "--show", env={"LAGWATCH__STORAGE__MIN_DISTANCE": "7"})
    assert result.returncode == 0, result.stderr
    leaked = {secret for secret in SECRETS if secret in result.stdout}
    assert not leaked, result.stdout
    shown = yaml.safe_load(result.stdout)
    assert shown["storage"]["min-distance"] == 7  # the environment's value, over the default
    assert shown["redis"]["url"] == "redis://:***@redis:6379/0"
    assert shown["clusters"]["oidc"]["sasl"]["oauth"]["client-secret"] == "****et-1"
    assert shown["api"]["previous-tokens"] == ["****n-12"]
    assert shown["subscriptions"][0]["username"] == "someone"
    shown_file = tmp_path / "shown.yaml"
    shown_file.write_text(result.stdout)  # it loads as a configuration (its masked values as they are)
    assert load_config(shown_file, env={}).clusters["plain"].sasl.username == "u"


# options whose names look like credentials but are not: paths, an address, a login name
NOT_SECRET = {"key_file", "tls_key_file", "keytab", "token_endpoint_url"}  # paths and addresses


def _leaves(cls, where=""):
    for f in dataclasses.fields(cls):
        kind = typing.get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(kind):
            yield from _leaves(kind, f"{where}{f.name}.")
        elif typing.get_origin(kind) is dict and dataclasses.is_dataclass(typing.get_args(kind)[1]):
            yield from _leaves(typing.get_args(kind)[1], f"{where}{f.name}.<name>.")
        else:
            yield f"{where}{f.name}", f


def test_every_option_named_like_a_credential_is_masked_when_shown():
    """An option added later with a credential's name must say how it is shown (subscriptions are shown as the api
    shows them: masking.py)."""
    unmarked = [
        name
        for name, f in _leaves(Config)
        if CREDENTIAL_NAME.search(f.name)
        and f.name not in NOT_SECRET
        and not (f.metadata.get("secret") or "shown" in f.metadata)
        and not name.startswith("subscriptions")
    ]
    assert not unmarked, unmarked
