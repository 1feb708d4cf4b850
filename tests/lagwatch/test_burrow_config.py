"""`lagwatch migrate burrow-config`: Burrow's own example configurations (tests/data/burrow, from Burrow's repository)
become lagwatch YAML that the configuration loader and the notifier accept, with their notifier templates rewritten
in Jinja2 and rendered by the notifier as Burrow would have rendered them; what does not carry over is a warning."""

import base64
import dataclasses
import json
import subprocess
import sys
import tomllib

import pytest
import yaml

from lagwatch.burrow_config import migrate
from lagwatch.go_template import Untranslatable, translate
from lagwatch.services.notifier import subscriptions
from lagwatch.services.notifier.messages import build_request
from lagwatch.services.notifier.outbox import Delivery
from lagwatch.services.notifier.service import NotifierService
from lagwatch.shared.notifications.templating.templates import context, render_limited
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.config import Config, SubscriptionConfig, build_section, load_config
from tests import paths
from tests.kafka_helpers import make_config, running
from tests.services.notifier.test_notifier_service import FAST, STATUS_TOPIC, publish
from tests.services.notifier.test_notifier_support import Receiver, Timeline, typed

DATA = paths.DATA / "burrow"


def run_migrate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lagwatch.cli", "migrate", "burrow-config", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def burrow_example(tmp_path_factory):
    """Burrow's config/burrow.toml, migrated by the command, saved and loaded as lagwatch's configuration."""
    result = run_migrate(str(DATA / "burrow.toml"), "--templates", str(DATA))
    assert result.returncode == 0, result.stderr
    path = tmp_path_factory.mktemp("migrated") / "lagwatch.yaml"
    path.write_text(result.stdout)
    return result, load_config(path, env={})


def test_burrows_example_becomes_a_configuration_lagwatch_loads(burrow_example):
    _, config = burrow_example
    local = config.clusters["local"]
    assert local.bootstrap_servers == [f"kafka0{i}.example.com:10251" for i in (1, 2, 3)]
    assert (local.topic_refresh, local.offset_refresh, local.client_id) == (120, 30, "burrow-test")
    assert local.group_denylist == "^(console-consumer-|python-kafka-consumer-|quick-).*$"
    assert (config.storage.intervals, config.storage.expire_group, config.storage.min_distance) == (15, 604800, 1)
    assert (config.api.host, config.api.port) == ("0.0.0.0", 8000)
    (sub,) = config.subscriptions
    assert (sub.id, sub.type, sub.url) == ("default", "webhook", "http://someservice.example.com:1467/v1/event")
    assert (sub.method, sub.method_close, sub.threshold, sub.send_close) == ("POST", "DELETE", "OK", True)
    assert (sub.send_interval, sub.timeout) == (60, 5)
    assert sub.extras == {"api_key": "REDACTED", "app": "burrow", "tier": "STG", "fabric": "mydc"}
    assert subscriptions.from_config(config)  # the notifier accepts it: URL guard, templates compiled in a worker


def test_what_does_not_carry_over_is_a_warning_on_stderr(burrow_example):
    result, _ = burrow_example
    warnings = result.stderr.splitlines()
    assert all(line.startswith("lagwatch: warning: ") for line in warnings), warnings
    for expected in (
        "[zookeeper]: not carried over",
        "[consumer.local_zk]: class-name 'kafka_zk'",
        "[cluster.local]: groups-reaper-refresh is not carried over",
        "[notifier.default]: keepalive is not carried over",
        "[notifier.default]: template-close conf/default-http-delete.tmpl: `.Id` is no field",
        "[notifier.default]: send-close without url-close",
    ):
        assert any(expected in line for line in warnings), (expected, warnings)
    assert "REDACTED" not in result.stderr


def delivery(event, kind):
    event_id = event["event_id"]
    return Delivery(f"{event_id}.{kind}", "default", kind, typed(event), event_id, now_ms(), attempts=1)


def test_the_migrated_notifier_sends_what_burrows_templates_describe(burrow_example):
    _, config = burrow_example
    (sub,) = subscriptions.from_config(config)
    t = Timeline("billing", start_ms=1_763_800_000_000)
    t.to("OK")
    opened = t.to("ERR", (500, 0))
    closed = t.to("OK")

    open_request = build_request(sub, delivery(opened, "open"))
    assert (open_request.method, open_request.url) == ("POST", "http://someservice.example.com:1467/v1/event")
    assert open_request.headers["Content-Type"] == "application/json"
    body = json.loads(open_request.body)
    event = body["events"][0]
    assert (body["api_key"], body["app"], body["block"]) == ("REDACTED", "burrow", False)
    assert event["id"] == opened["incident_id"]
    assert event["event"]["severity"] == "ERR" and event["event"]["tier"] == "STG"
    assert event["event"]["group"] == "billing" and event["event"]["complete"] == 1.0
    assert event["event"]["start"] == "Nov 22, 2025 08:28:40 UTC"  # Go's "Jan 02, 2006 15:04:05 UTC", in UTC
    (partition,) = event["event"]["partitions"]  # Burrow's JSON names, in its struct's order
    assert list(partition) == ["topic", "partition", "owner", "client_id", "status", "start", "end", "current_lag"]
    assert (partition["status"], partition["current_lag"], partition["start"]) == ("STALL", 500, {"offset": 1000})

    close_request = build_request(sub, delivery(closed, "close"))
    assert (close_request.method, close_request.url) == ("DELETE", "http://someservice.example.com:1467/v1/event")
    assert json.loads(close_request.body) == {"api_key": "REDACTED", "app": "burrow", "block": False,
                                              "ids": [opened["incident_id"]]}  # fmt: skip


def test_burrows_docker_example_loads_too(tmp_path):
    result = run_migrate(str(DATA / "docker-burrow.toml"))
    assert result.returncode == 0, result.stderr
    path = tmp_path / "lagwatch.yaml"
    path.write_text(result.stdout)
    config = load_config(path, env={})
    assert config.clusters["local"].bootstrap_servers == ["kafka:9092"]
    assert config.clusters["local"].client_id == "docker-client"
    assert config.subscriptions == []


def test_client_profiles_bring_tls_and_sasl_to_their_clusters(tmp_path):
    toml = tmp_path / "burrow.toml"
    toml.write_text(
        """
[client-profile.secure]
client-id = "burrow-prod"
kafka-version = "2.8.0"
tls = "mtls"
sasl = "scram"
[tls.mtls]
cafile = "/etc/burrow/ca.pem"
certfile = "/etc/burrow/client.pem"
keyfile = "/etc/burrow/client.key"
noverify = true
[sasl.scram]
mechanism = "SCRAM-SHA-512"
username = "burrow"
password = "s3cret"
[cluster.prod]
class-name = "kafka"
servers = ["k1:9093"]
client-profile = "secure"
[consumer.prod]
class-name = "kafka"
cluster = "prod"
servers = ["k1:9093"]
group-blacklist = "^tmp-"
start-latest = true
offsets-topic = "__consumer_offsets"
[evaluator.default]
class-name = "caching"
minimum-complete = 0.5
expire-cache = 10
[tls.web]
certfile = "/etc/burrow/web.pem"
keyfile = "/etc/burrow/web.key"
[httpserver.default]
address = "127.0.0.1:8080"
timeout = 30
tls = "web"
"""
    )
    result = run_migrate(str(toml))
    assert result.returncode == 0, result.stderr
    out = tmp_path / "lagwatch.yaml"
    out.write_text(result.stdout)
    config = load_config(out, env={})
    prod = config.clusters["prod"]
    assert (prod.client_id, prod.start_latest, prod.group_denylist) == ("burrow-prod", True, "^tmp-")
    assert (prod.tls.enabled, prod.tls.ca_file, prod.tls.cert_file, prod.tls.key_file) == (
        True,
        "/etc/burrow/ca.pem",
        "/etc/burrow/client.pem",
        "/etc/burrow/client.key",
    )
    assert prod.tls.verify_hostname is False
    assert (prod.sasl.mechanism, prod.sasl.username, prod.sasl.password) == ("SCRAM-SHA-512", "burrow", "s3cret")
    assert config.evaluator.minimum_complete == 0.5
    assert (config.api.host, config.api.port, config.api.request_timeout) == ("127.0.0.1", 8080, 30)
    assert (config.api.tls_cert_file, config.api.tls_key_file) == ("/etc/burrow/web.pem", "/etc/burrow/web.key")
    assert "noverify: lagwatch still checks" in result.stderr and "expire-cache" in result.stderr


ROLE = "arn:aws:iam::123456789012:role/ro"


def test_burrows_msk_iam_profile_becomes_an_aws_msk_iam_login():
    doc = migrate(
        {
            "iam": {"msk-iam": {"region": "us-west-1", "role-arn": ROLE, "profile": "p"}},
            "client-profile": {"msk": {"client-id": "burrow", "iam": "msk-iam"}},
            "cluster": {"prod": {"class-name": "kafka", "servers": ["b-1.example:9098"], "client-profile": "msk"}},
        }
    )
    cluster = doc.config["clusters"]["prod"]
    assert cluster["tls"] == {"enabled": True}
    assert cluster["sasl"] == {
        "mechanism": "AWS_MSK_IAM",
        "aws": {"region": "us-west-1", "role-arn": ROLE},
    }
    assert any("profile is dropped" in w for w in doc.warnings), doc.warnings
    loaded = build_section(Config, {"clusters": doc.config["clusters"]})  # the loader accepts what is written
    assert loaded.clusters["prod"].sasl.aws.role_arn == ROLE


def test_a_template_with_no_counterpart_is_a_warning_and_the_default_body_is_kept(tmp_path):
    (tmp_path / "open.tmpl").write_text('{{define "x"}}x{{end}}{{template "x"}}')
    doc = migrate(
        {
            "notifier": {
                "n": {"class-name": "http", "url-open": "https://h.example.com/x", "template-open": "open.tmpl"}
            }
        },
        [tmp_path],
    )
    (sub,) = doc.config["subscriptions"]
    assert "body-template" not in sub
    assert sub["send-close"] is False  # Burrow's default, written out: lagwatch's is true
    assert any("template-open open.tmpl not translated" in w for w in doc.warnings), doc.warnings


def test_templated_urls_become_a_url_template(tmp_path):
    notifier = {"class-name": "http", "url-open": "https://h.example.com/open/{{.Group}}",
                "url-close": "https://h.example.com/close/{{.ID}}", "send-close": True}  # fmt: skip
    doc = migrate({"notifier": {"n": notifier}})
    (sub,) = doc.config["subscriptions"]
    assert sub["url"] == "https://h.example.com/open/"
    assert sub["url-template"] == (
        '{% if notification.kind == "close" %}https://h.example.com/close/{{ ID }}'
        "{% else %}https://h.example.com/open/{{ Group }}{% endif %}"
    )


def test_bad_toml_is_one_line_and_exit_code_2(tmp_path):
    bad = tmp_path / "burrow.toml"
    bad.write_text("[cluster.local\nservers=")
    result = run_migrate(str(bad))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("lagwatch: ") and "not valid TOML" in result.stderr
    assert run_migrate(str(tmp_path / "missing.toml")).returncode == 2


def test_servers_as_one_string_are_its_brokers_as_burrow_reads_them():
    """Burrow (viper's string slice) splits a string on spaces; it is not a list of its characters."""
    config = migrate({"cluster": {"prod": {"servers": "k1:9092 k2:9092"}}}).config
    assert config["clusters"]["prod"]["bootstrap-servers"] == ["k1:9092", "k2:9092"]


@pytest.mark.parametrize(
    ("toml", "says"),
    [
        ("[cluster.prod]\nservers = 5\n", "[cluster.prod] servers: expected a list"),
        ('client-profile = 5\n[cluster.prod]\nservers = ["k:1"]\nclient-profile = "p"\n', "[client-profile]: "),
        ('[cluster.prod]\nservers = ["k:1"]\nclient-profile = ["p"]\n', "[cluster.prod] client-profile: "),
        ('[notifier.n]\nclass-name = "http"\nurl-open = "https://h/x"\nextras = 5\n', "[notifier.n] extras: "),
    ],
    ids=["servers", "client-profile section", "client-profile name", "extras"],
)
def test_a_value_of_the_wrong_type_is_one_line_and_exit_code_2(tmp_path, toml, says):
    path = tmp_path / "burrow.toml"
    path.write_text(toml)
    result = run_migrate(str(path))
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"lagwatch: {says}") and len(result.stderr.splitlines()) == 1


# --- Go templates -> Jinja2 ----------------------------------------------------------------------------------------

EVENT = Timeline("billing", start_ms=1_763_800_000_000)
EVENT.to("OK")
ERR_EVENT = EVENT.to("ERR", (7, 0, 3))


def render(go_source: str, extras=None) -> str:
    ctx = context(ERR_EVENT, kind="open", subscription_id="s", notification_id="n", attempt=1,
                  extras=extras or {"team": "payments"}, dashboard_url="")  # fmt: skip
    return render_limited(translate(go_source).source, ctx)


@pytest.mark.parametrize(
    ("go", "rendered"),
    [
        ("{{.Group}} on {{.Cluster}}: {{.Result.Status}}", "billing on local: ERR"),
        ('{{index .Extras "team"}} {{.Extras.team}}', "payments payments"),
        ("{{if eq .Result.Status 3}}err{{else if eq .Result.Status 2}}warn{{else}}ok{{end}}", "err"),
        ("{{if gt .Result.Status 2}}bad{{end}}", "bad"),
        ("{{if ne .Result.Status 1}}x{{end}}{{if eq .Result.Status 1 3}}y{{end}}", "xy"),
        ("{{range .Result.Partitions}}{{.Topic}}/{{.Partition}}={{.CurrentLag}};{{end}}", "orders/0=7;orders/2=3;"),
        ("{{range $i, $p := .Result.Partitions}}{{$i}}:{{$p.Partition}} {{end}}", "0:0 1:2 "),
        ("{{range $k, $v := .Extras}}{{$k}}={{$v}}{{end}}", "team=payments"),
        ("{{with .Result.Maxlag}}{{.Topic}} {{.CurrentLag}}{{else}}none{{end}}", "orders 7"),
        ("{{len .Result.Partitions}} of {{.Result.TotalPartitions}}", "2 of 3"),
        ("{{maxlag .Result.Maxlag}} {{add 1 2}} {{divide -7 2}}", "7 3 -3"),
        ('{{printf "%s has %d" .Group .Result.TotalLag}}', "billing has 10"),
        (
            '{{(partitioncounts .Result.Partitions).stall}} {{index (topicsbystatus .Result.Partitions) "STALL"}}',
            "2 ['orders']",
        ),
        ("a  {{- /* a comment */ -}}  b", "ab"),
        # a field right after a parenthesised pipeline is its field; after a space, the next argument
        (
            '{{(index .Result.Partitions 0).Topic}} {{printf "%v/%v" (index .Result.Partitions 0).Partition .Group}}',
            "orders 0/billing",
        ),
        ('{{printf "%v|%v" (len .Result.Partitions) .Group}}', "2|billing"),
        ("{{$g := .Group}}{{range .Result.Partitions}}{{$g}}{{$.Cluster}} {{end}}", "billinglocal billinglocal "),
        ('{{.Result.Status.String}} {{.Start.Format "2006-01-02T15:04:05Z07:00"}}', "ERR 2025-11-22T08:28:40Z"),
        ('{"x": "{#"}', '{"x": "{#"}'),
    ],
)
def test_go_templates_render_as_burrow_would(go, rendered):
    assert render(go) == rendered


@pytest.mark.parametrize(
    "go",
    ['{{template "x"}}', "{{range .Result.Partitions}}{{break}}{{end}}", "{{if true}}x", "{{call .X}}",
     "{{range .Result.Partitions}}{{.Start.Timestamp}}{{end}}", "{{.}}"],
)  # fmt: skip
def test_go_constructs_without_a_counterpart_are_refused(go):
    with pytest.raises(Untranslatable):
        translate(go)


def test_the_yaml_keeps_templates_readable():
    doc = migrate({"notifier": {"n": {"class-name": "http", "url-open": "https://h.example.com/x",
                                      "template-open": str(DATA / "default-slack-post.tmpl")}}})  # fmt: skip
    assert "body-template: |" in doc.yaml()
    assert yaml.safe_load(doc.yaml())["subscriptions"][0]["body-template"].startswith('{ "attachments"')


# --- end to end -------------------------------------------------------------------------------------------------


async def test_a_migrated_burrow_notifier_alerts_through_lagwatch_run_notifier(kafka, redis_server, redis):
    """Burrow's example notifier, pointed at a local receiver with basic auth and a url-close, migrated, then run by
    the notifier service on status events from Kafka: the open and close bodies Burrow's templates describe, the
    close sent with DELETE to url-close, every request with basic auth."""
    kafka.create_topic(STATUS_TOPIC, 1)
    async with Receiver() as receiver:
        burrow = tomllib.loads((DATA / "burrow.toml").read_text())
        burrow["notifier"]["default"].update(
            {"url-open": receiver.url("/v1/event"), "url-close": receiver.url("/v1/event/close"),
             "username": "burrow", "password": "basic-auth-password", "threshold": 2}
        )  # fmt: skip
        migration = migrate(burrow, [DATA])
        subs = [build_section(SubscriptionConfig, s, "subscriptions[0]") for s in migration.config["subscriptions"]]
        config = dataclasses.replace(make_config(kafka.bootstrap, redis_server.url, **FAST), subscriptions=subs)
        t = Timeline("billing")
        async with running(NotifierService(config, "local", http_port=0)):
            opened = t.to("ERR", (500, 0))
            await publish(kafka.bootstrap, opened)
            await receiver.wait_for(1, timeout=30)
            await publish(kafka.bootstrap, t.to("OK"))
            await receiver.wait_for(2, timeout=30)
    first, second = receiver.requests
    auth = "Basic " + base64.b64encode(b"burrow:basic-auth-password").decode()
    assert first.headers["Authorization"] == second.headers["Authorization"] == auth
    assert (first.method, first.path, second.method, second.path) == ("POST", "/v1/event", "DELETE", "/v1/event/close")
    event = first.json()["events"][0]
    assert event["id"] == opened["incident_id"] and event["event"]["severity"] == "ERR"
    assert event["event"]["partitions"][0]["current_lag"] == 500
    assert second.json() == {"api_key": "REDACTED", "app": "burrow", "block": False, "ids": [opened["incident_id"]]}


def test_an_email_notifier_becomes_an_email_subscription(tmp_path):
    (tmp_path / "mail.tmpl").write_text(
        "Subject: [Burrow] {{.Group}} is lagging\nContent-Type: text/plain\n\n{{.Group}} on {{.Cluster}}: "
        "{{.Result.Status}}, {{len .Result.Partitions}} partitions have problems\n"
    )
    toml = {"notifier": {
        "mail": {"class-name": "email", "server": "smtp.example.com", "port": 587, "auth-type": "plain",
                 "username": "burrow", "password": "smtp-password", "from": "burrow@example.com",
                 "to": "ops@example.com, oncall@example.com", "template-open": "mail.tmpl", "threshold": 3},
        "broken": {"class-name": "email", "server": "smtp.example.com", "port": 25, "from": "b@example.com",
                   "to": "ops@example.com", "template-open": str(DATA / "default-email.tmpl")},
    }}  # fmt: skip
    doc = migrate(toml, [tmp_path])
    path = tmp_path / "lagwatch.yaml"
    path.write_text(doc.yaml())
    config = load_config(path, env={})
    mail, broken = subscriptions.from_config(config)  # the notifier accepts both
    assert (mail.config.type, mail.config.smtp_host, mail.config.smtp_port, mail.config.from_) == (
        "email",
        "smtp.example.com",
        587,
        "burrow@example.com",
    )
    assert mail.config.to == ["ops@example.com", "oncall@example.com"]
    assert (mail.config.username, mail.config.password, mail.config.threshold) == ("burrow", "smtp-password", "ERR")
    assert not broken.config.body_template  # Burrow's default mail template reads partitions' timestamps
    assert any("[notifier.broken]: template-open" in w and "offsets only" in w for w in doc.warnings), doc.warnings
    assert any("Subject/Content-Type lines are dropped" in w for w in doc.warnings)

    t = Timeline("billing")
    t.to("OK")
    event = t.to("ERR", (7, 0))
    sent = build_request(mail, Delivery("d", "mail", "open", typed(event), event["event_id"], now_ms(), attempts=1))
    assert sent.message.get_content() == "\nbilling on local: ERR, 1 partitions have problems\n"
    assert sent.message["To"] == "ops@example.com, oncall@example.com"


@pytest.mark.parametrize(
    ("origin", "api", "warned"),
    [
        ("https://dash.example.com", {"access-control-allow-origin": "https://dash.example.com"}, None),
        ("*", {"access-control-allow-origin": "*"}, None),
        ("mysite.example.com", None, "is not an origin a browser sends"),  # Burrow's own example: no browser sends it
    ],
)
def test_burrows_cors_origin_becomes_the_apis_and_the_rest_of_general_a_warning(origin, api, warned):
    doc = migrate({"general": {"pidfile": "burrow.pid", "access-control-allow-origin": origin}})
    assert doc.config.get("api") == api
    assert any("[general]: pidfile is not carried over: run under a supervisor" in w for w in doc.warnings)
    assert any(warned in w for w in doc.warnings) if warned else not any("origin" in w for w in doc.warnings)
    build_section(Config, doc.config)  # loads as lagwatch loads it
