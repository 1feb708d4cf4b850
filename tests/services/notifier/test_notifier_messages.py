"""What the notifier sends: Slack Block Kit messages, webhook bodies, templates (sandboxed), signatures, masking,
URL safety, retry timing, circuit breaking, and validation of configured subscriptions."""

import dataclasses
import hashlib
import hmac
import json
import re
import time

import jsonschema
import pytest

from lagwatch.services.notifier.channels.slack import message
from lagwatch.services.notifier.delivery import CircuitBreaker, RetryPolicy, classify, parse_retry_after
from lagwatch.services.notifier.messages import PermanentError, build_request
from lagwatch.services.notifier.outbox import Delivery
from lagwatch.services.notifier.subscriptions import compile_subscription, from_config
from lagwatch.shared.events.lag_threshold_event import Crossing
from lagwatch.shared.events.lag_threshold_event import build_event as build_lag_event
from lagwatch.shared.events.status_event import Incident, encode, next_incident, schema
from lagwatch.shared.events.status_event import build_event as build_status_event
from lagwatch.shared.notifications.delivery import address_guard, signing
from lagwatch.shared.notifications.subscriptions.masking import mask, masked_document, unmask_unchanged
from lagwatch.shared.protocol.types import GroupStatus, OffsetEntry, PartitionStatus, Status
from lagwatch.shared.runtime.config import ConfigError, SubscriptionConfig, load_config
from lagwatch.shared.statuses.time_lag import TimeLag
from tests.services.notifier.test_notifier_support import Timeline, notification, typed

SLACK_URL = "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX"


def incident():
    t = Timeline("billing")
    t.to("OK")
    opened = t.to("WARN", (120, 0, 40))
    worse = t.to("ERR", (4000, 10, 40))
    closed = t.to("OK")
    return opened, worse, closed


def delivery(event, kind, attempts=1, sub="s1"):
    return Delivery(f"{event['event_id']}.{sub}", sub, kind, typed(event), event["event_id"], 0, attempts=attempts)


def sub(**fields):
    base = {"id": "s1", "type": "webhook", "url": "https://hooks.example.com/lagwatch"}
    return compile_subscription(SubscriptionConfig(**{**base, **fields}), "config")


# --- Slack ---------------------------------------------------------------------------------------------------------


def test_slack_open_message_is_block_kit_with_the_essentials():
    opened, worse, _ = incident()
    dashboard_url = "https://lw.example.com/g/{cluster}/{group}"
    msg = message(notification(worse, "update", dashboard_url=dashboard_url, now_ms=worse["evaluated_at"] + 90_000))
    header, fields = msg["blocks"]
    assert header["type"] == "header" and header["text"]["type"] == "plain_text"
    assert header["text"]["text"] == ":red_circle: ERR: billing on local" and msg["text"] == header["text"]["text"]
    texts = [f["text"] for f in fields["fields"]]
    assert fields["type"] == "section" and all(f["type"] == "mrkdwn" for f in fields["fields"])
    assert "*Group*\nbilling" in texts and "*Cluster*\nlocal" in texts and "*Total lag*\n4,050" in texts
    assert "*Status*\nWARN → *ERR*" in texts and "*Partitions not OK*\n3 of 3" in texts
    assert "*Incident open for*\n2m 30s" in texts  # started at the open event, one minute before the update
    (attachment,) = msg["attachments"]
    assert attachment["color"] == "#E01E5A"
    worst, ctx_block, actions = attachment["blocks"]
    lines = worst["text"]["text"].splitlines()
    assert lines[0] == "*Worst partitions*" and lines[1].startswith("• `orders` / 0: *STALL*, lag 4,000")
    assert ctx_block["type"] == "context" and opened["incident_id"] in ctx_block["elements"][0]["text"]
    (button,) = actions["elements"]
    assert button["type"] == "button" and button["url"] == "https://lw.example.com/g/local/billing"


def test_slack_close_and_repeat_messages():
    opened, _, closed = incident()
    msg = message(notification(closed, "close", now_ms=closed["evaluated_at"] + 5_000_000))
    assert msg["blocks"][0]["text"]["text"] == ":white_check_mark: Resolved: billing on local is OK again"
    assert "*Incident lasted*\n2m" in [f["text"] for f in msg["blocks"][1]["fields"]]  # open -> close, not -> now
    assert msg["attachments"][0]["color"] == "#2EB67D"
    assert all(b["type"] != "actions" for b in msg["attachments"][0]["blocks"])  # no dashboard configured
    repeat = message(notification(opened, "repeat", now_ms=opened["evaluated_at"] + 3_600_000))
    assert repeat["blocks"][0]["text"]["text"] == ":large_yellow_circle: Still WARN: billing on local"
    assert "*Incident open for*\n1h" in [f["text"] for f in repeat["blocks"][1]["fields"]]


def test_slack_text_is_escaped_and_the_header_fits_slacks_limit():
    t = Timeline("<!channel> & " + "x" * 200)
    t.to("OK")
    event = t.to("ERR", (5,))
    msg = message(notification(event, "open"))
    assert len(msg["blocks"][0]["text"]["text"]) <= 150
    assert "&lt;!channel&gt; &amp; x" in msg["blocks"][1]["fields"][0]["text"]


def _hostile_events(group, topic, client_id):
    """A status event (open) and a lag-threshold event (lag-open) of a group whose names are as long as Kafka (or
    nothing at all) lets them be, over eight partitions."""
    now = 1_700_000_060_000
    offsets = OffsetEntry(1, now - 60_000), OffsetEntry(2, now)
    parts = tuple(
        PartitionStatus(topic, i, Status.STALL, *offsets, 1000 + i, 1.0, "/" + client_id, client_id) for i in range(8)
    )
    gs = GroupStatus("prod", group, Status.ERR, 1.0, parts, parts[-1], sum(p.current_lag for p in parts))
    _, opened = next_incident(Status.OK, Status.ERR, Incident(None, None), "prod", group, 2, now)
    status = build_status_event(
        cluster="prod", group=group, seq=2, previous=Status.OK, group_status=gs, incident=opened, evaluated_at=now
    )
    lag = build_lag_event(
        cluster="prod",
        group=group,
        crossing=Crossing(60.0, True),
        seq=1,
        incident_started_at=now,
        evaluated_at=now,
        group_status=gs,
        time_lags={(topic, i): TimeLag(600.0 + i) for i in range(8)},
    )
    return [(status.as_dict(), "open"), (lag.as_dict(), "lag-open")]


def _over_slacks_limits(message):
    """What in a message Slack would refuse (a 400, so a dead letter), and mrkdwn cut inside an entity."""
    problems = []
    texts = []
    for block in message["blocks"] + message["attachments"][0]["blocks"]:
        if block["type"] == "header" and len(block["text"]["text"]) > 150:
            problems.append(("header", len(block["text"]["text"])))
        if block["type"] == "section":
            fields = [f["text"] for f in block.get("fields", [])]
            problems += [("field", len(f)) for f in fields if len(f) > 2000]
            problems += [("fields", len(fields))] if len(fields) > 10 else []
            text = block.get("text", {}).get("text", "")
            problems += [("section", len(text))] if len(text) > 3000 else []
            texts += [*fields, text]
        if block["type"] == "actions":
            problems += [("url", len(e["url"])) for e in block["elements"] if len(e["url"]) > 3000]
    problems += [("entity cut", t[-12:]) for t in texts if "&" in re.sub("&(amp|lt|gt);", "", t)]
    return problems, texts


@pytest.mark.parametrize(
    ("group", "topic", "client_id"),
    [
        ("g" * 2100, "orders", "c"),
        ("&" * 600, "orders", "c"),  # escaped, five times longer
        ("a&" * 700 + "<>" * 300, "orders", "c"),  # entities of every length at the cut
        ("a/" * 1200, "orders", "c"),  # the dashboard URL, quoted
        ("billing", "t" * 249, "&" * 900),  # the worst partitions' lines
    ],
    ids=["long-group", "ampersands", "mixed-entities", "slashes", "long-topic-and-client-id"],
)
def test_slack_messages_stay_within_slacks_limits_whatever_the_names(group, topic, client_id):
    for event, kind in _hostile_events(group, topic, client_id):
        request = build_request(
            sub(type="slack", url=SLACK_URL),
            delivery(event, kind),
            dashboard_url="https://lw.example/{cluster}/{group}",
        )
        problems, texts = _over_slacks_limits(json.loads(request.body))
        assert problems == [], kind
        assert any(t.endswith("…") for t in texts) or "…" in texts[-1], kind  # cut, and says so


def test_slack_request_posts_json_to_the_incoming_webhook():
    opened, _, _ = incident()
    request = build_request(sub(type="slack", url=SLACK_URL), delivery(opened, "open"))
    assert request.method == "POST" and request.url == SLACK_URL
    assert request.headers["Content-Type"] == "application/json"
    assert json.loads(request.body)["blocks"][0]["type"] == "header"


# --- webhooks ------------------------------------------------------------------------------------------------------


def test_webhook_default_body_is_the_event_exactly_for_open_repeat_and_close():
    opened, _, closed = incident()
    for event, kind in ((opened, "open"), (opened, "repeat"), (closed, "close")):
        request = build_request(sub(secret="k" * 32), delivery(event, kind, attempts=2), now=1_800_000_000)
        assert request.body == encode(event)
        jsonschema.validate(json.loads(request.body), schema())
        h = request.headers
        assert h["X-Lagwatch-Event-Id"] == event["event_id"] and h["X-Lagwatch-Timestamp"] == "1800000000"
        assert h["X-Lagwatch-Notification"] == kind and h["X-Lagwatch-Subscription"] == "s1"
        assert h["X-Lagwatch-Attempt"] == "2"
        signing.verify_request("k" * 32, h, request.body, now=1_800_000_010)


def test_templates_with_extras_helpers_method_headers_and_url():
    opened, worse, _ = incident()
    s = sub(
        method="PUT",
        headers={"Authorization": "Bearer abc", "Content-Type": "text/plain"},
        url_template="https://hooks.example.com/{{ extras.team }}/{{ event.group }}",
        body_template=(
            "{{ notification.kind }} {{ event.group }}@{{ event.cluster }} {{ event.status }} "
            "team={{ extras.team }} worst={{ worst_partition_lag(event) }} "
            "stall={{ partitions_by_status(event)['STALL'] | length }} "
            "since={{ format_ts(incident.started_at, '%Y') }} {{ event.partitions[0] | tojson }}"
        ),
        extras={"team": "payments"},
    )
    request = build_request(s, delivery(worse, "update"))
    assert request.method == "PUT" and request.url == "https://hooks.example.com/payments/billing"
    assert request.headers["Authorization"] == "Bearer abc" and request.headers["Content-Type"] == "text/plain"
    year = time.strftime("%Y", time.gmtime(opened["evaluated_at"] / 1000))
    text = request.body.decode()
    assert text.startswith(f"update billing@local ERR team=payments worst=4000 stall=3 since={year} ")
    assert json.loads(text.split(" ", 7)[7]) == worse["partitions"][0]


@pytest.mark.parametrize(
    "template",
    [
        "{{ event.__class__.__mro__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ format_ts.__globals__ }}",
        "{{ event.partitions.append(1) }}",
        "{{ event.clear() }}",
        "{{ no_such_name }}",
    ],
)
def test_the_sandbox_refuses_unsafe_or_broken_templates(template):
    opened, _, _ = incident()
    with pytest.raises(PermanentError, match="template failed"):
        build_request(sub(body_template=template), delivery(opened, "open"))


def test_a_template_rendering_a_forbidden_url_is_refused():
    opened, _, _ = incident()
    s = sub(url_template="http://169.254.169.254/latest/meta-data/{{ event.group }}")
    with pytest.raises(PermanentError, match="metadata"):
        build_request(s, delivery(opened, "open"), allow_private=True)


def test_a_template_rendering_a_look_alike_private_address_is_refused():
    opened, _, _ = incident()
    s = sub(url_template="http://\uff11\uff12\uff17.\uff10.\uff10.\uff11:47001/{{ event.group }}")
    with pytest.raises(PermanentError, match=r"127\.0\.0\.1 is a private address"):
        build_request(s, delivery(opened, "open"), allow_private=False)


# --- signatures ----------------------------------------------------------------------------------------------------


def test_signatures_verify_and_tampering_or_age_fails_with_its_code():
    body, secret, ts, eid = b'{"status":"ERR"}', "s3cret-s3cret", 1_800_000_000, "e-1"
    sig = signing.sign(secret, ts, eid, "open", body)
    assert sig.startswith("v2=") and len(sig) == 67
    signing.verify_signature(secret, str(ts), eid, "open", body, sig, now=ts + 299)
    signing.verify_signature(secret, ts, eid, "open", body, f"v2={'0' * 64}, {sig}", now=ts)  # rotation
    v1 = "v1=" + hmac.new(secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    cases = [
        ((secret, ts, eid, "open", b'{"status":"OK"}', sig), signing.BAD_SIGNATURE),
        (("other-secret", ts, eid, "open", body, sig), signing.BAD_SIGNATURE),
        ((secret, ts + 1, eid, "open", body, sig), signing.BAD_SIGNATURE),
        ((secret, ts, "e-2", "open", body, sig), signing.BAD_SIGNATURE),  # replayed as a new alert (issue 18 row 9)
        ((secret, ts, eid, "close", body, sig), signing.BAD_SIGNATURE),  # ...or as another kind
        ((secret, ts, eid, "open", body, sig), signing.STALE_TIMESTAMP, 301),
        ((secret, ts, eid, "open", body, sig), signing.STALE_TIMESTAMP, -301),
        ((secret, "yesterday", eid, "open", body, sig), signing.MALFORMED),
        ((secret, ts, eid, "open", body, "sha256=abc"), signing.MALFORMED),
        ((secret, ts, eid, "open", body, v1), signing.MALFORMED),  # the old scheme is not accepted
        ((secret, ts, eid, "open", body, None), signing.MALFORMED),
    ]
    for args, code, *offset in cases:
        with pytest.raises(signing.SignatureError) as err:
            signing.verify_signature(*args, now=ts + (offset[0] if offset else 0))
        assert err.value.code == code, args


# --- masking -------------------------------------------------------------------------------------------------------


def test_secrets_are_masked_and_masked_values_sent_back_keep_the_secret():
    config = SubscriptionConfig(
        id="s",
        type="slack",
        url=SLACK_URL,
        secret="super-secret-value-1234",
        headers={"Authorization": "Bearer tok-abcdefghijkl", "X-Api-Key": "k", "X-Team": "payments"},
        extras={"token": "t" * 20, "team": "payments"},
        body_template="{{ 'Bearer body-secret-0123' }}",
    )
    doc = masked_document(config, "api")
    assert doc["url"] == "https://hooks.slack.com/****XXXX" and doc["secret"] == "****1234"
    assert doc["headers"] == {"Authorization": "****ijkl", "X-Api-Key": "****", "X-Team": "****"}
    assert doc["extras"] == {"token": "****tttt", "team": "****"}
    assert doc["body_template"] == "****' }}" and doc["url_template"] == ""
    for secret in ("XXXXXXXXXXXXXXXX", "super-secret", "payments", "body-secret"):
        assert secret not in json.dumps(doc)
    assert masked_document(config, "api", show_templates=True)["body_template"] == config.body_template
    back = unmask_unchanged({**doc, "headers": {**doc["headers"], "X-Team": "core"}}, config)
    assert (back["url"], back["secret"], back["body_template"]) == (SLACK_URL, config.secret, config.body_template)
    assert back["headers"] == {**config.headers, "X-Team": "core"} and back["extras"] == config.extras
    webhook = masked_document(
        dataclasses.replace(config, type="webhook", url="https://u:pw@h.example.com/x?code=abc&team=a"), "api"
    )
    assert webhook["url"] == "https://****@h.example.com/****am=a"
    assert (
        masked_document(dataclasses.replace(config, url="http://[::1]:8080/h"), "api")["url"]
        == "http://[::1]:8080/****"
    )
    assert mask("short") == "****"


def test_a_url_template_keeps_the_urls_destination_and_never_sees_credential_extras():
    """The subscription's headers are meant for `url`'s host (issue 18 row 8)."""
    opened, _, _ = incident()
    moved = sub(url_template="https://elsewhere.example.com/{{ event.group }}", headers={"Authorization": "Bearer x"})
    with pytest.raises(PermanentError, match="must keep the scheme, host and port"):
        build_request(moved, delivery(opened, "open"))
    leaky = sub(url_template="https://hooks.example.com/?k={{ extras.api_key }}", extras={"api_key": "k" * 20})
    with pytest.raises(PermanentError, match="api_key"):
        build_request(leaky, delivery(opened, "open"))
    fine = sub(url_template="https://hooks.example.com/{{ extras.team }}/{{ event.group }}", extras={"team": "a"})
    assert build_request(fine, delivery(opened, "open")).url == "https://hooks.example.com/a/billing"


# --- URL safety ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "allow_private", "problem"),
    [
        ("ftp://example.com/x", True, "only http and https"),
        ("http:///nohost", True, "no host"),
        ("http://169.254.169.254/latest/meta-data", True, "metadata"),
        ("http://[fd00:ec2::254]/", True, "metadata"),
        ("http://metadata.google.internal/computeMetadata/v1/", True, "metadata"),
        ("http://169.254.10.1/", True, "link-local"),
        ("http://[fe80::1]/", True, "link-local"),
        ("http://[::ffff:169.254.169.254]/", True, "metadata"),
        ("http://0.0.0.0:80/", True, "not a global unicast"),
        ("http://10.1.2.3/", False, "private"),
        ("http://172.20.0.1/", False, "private"),
        ("http://192.168.1.1/", False, "private"),
        ("http://127.0.0.1:8080/", False, "private"),
        ("http://[::1]/", False, "private"),
        ("http://[fd12::1]/", False, "private"),
        ("http://localhost:9/", False, "private"),  # resolved: 127.0.0.1
    ],
)
async def test_target_urls_that_are_refused(url, allow_private, problem):
    with pytest.raises(address_guard.TargetError, match=problem):
        await address_guard.check_url(url, allow_private=allow_private)


async def test_target_urls_that_are_allowed():
    await address_guard.check_url("http://127.0.0.1:8080/x", allow_private=True)
    await address_guard.check_url("https://93.184.216.34/hook", allow_private=False)
    assert address_guard.destination(SLACK_URL) == "https://hooks.slack.com:443"


# --- retries and circuit breaking ----------------------------------------------------------------------------------


def test_backoff_is_exponential_with_full_jitter_and_a_cap():
    import random

    policy = RetryPolicy(max_attempts=8, base_s=1.0, cap_s=10.0)
    rng = random.Random(7)
    for attempt, ceiling in [(1, 1), (2, 2), (3, 4), (4, 8), (5, 10), (9, 10)]:
        waits = [policy.backoff(attempt, rng) for _ in range(200)]
        assert min(waits) >= 0 and max(waits) <= ceiling and max(waits) > ceiling * 0.8


def test_retry_after_seconds_or_http_date_and_response_classes():
    assert parse_retry_after("7") == 7.0 and parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("Thu, 01 Jan 2026 00:00:30 GMT", now=1767225600.0) == 30.0
    assert parse_retry_after("99999") == 3600.0
    assert classify(204, None).ok
    r = classify(429, "2")
    assert (r.retryable, r.retry_after, r.host_failure) == (True, 2.0, False)
    assert classify(503, None).retryable and classify(503, None).host_failure
    for status in (400, 401, 403, 404, 410, 301):
        assert not classify(status, None).retryable


def test_circuit_breaker_opens_after_n_failures_and_probes_once_after_the_cooldown():
    b = CircuitBreaker(failures=3, cooldown_s=10)
    for _ in range(3):
        assert b.allow(100)[0]
        b.failure(100)
    assert b.allow(105) == (False, 110)
    assert b.allow(110)[0]  # half-open: one probe
    assert not b.allow(110)[0]
    b.failure(111)  # the probe failed: open again
    assert b.allow(115) == (False, 121)
    assert b.allow(121)[0]
    b.success()
    assert b.allow(121)[0] and b.allow(121)[0]
    b.pause(130)  # a 429's Retry-After
    assert b.allow(125) == (False, 130)


# --- configured subscriptions --------------------------------------------------------------------------------------


def write_config(tmp_path, body):
    path = tmp_path / "lagwatch.yaml"
    path.write_text(body)
    return path


def test_configured_subscriptions_load_with_their_options(tmp_path):
    path = write_config(
        tmp_path,
        f"""
notifier: {{dashboard-url: "https://lw.example.com", max-attempts: 3}}
subscriptions:
  - {{id: ops, type: slack, url: "{SLACK_URL}", threshold: ERR, send-interval: 300, clusters: [prod]}}
  - id: hook
    url: https://hooks.example.com/x
    secret: k
    headers: {{X-Team: payments}}
    group-denylist: "^console-"
    send-once: true
    extras: {{team: payments, priority: 2}}
""",
    )
    config = load_config(path, env={})
    ops, hook = from_config(config)
    assert (ops.type, ops.policy.threshold.name, ops.policy.send_interval_ms, ops.policy.send_close) == (
        "slack",
        "ERR",
        300_000,
        True,
    )
    assert ops.matches("prod", "billing") and not ops.matches("staging", "billing")
    assert (
        hook.type == "webhook" and hook.policy.send_once and hook.config.extras == {"team": "payments", "priority": "2"}
    )
    assert not hook.matches("local", "console-consumer-1") and hook.matches("local", "billing")
    assert config.notifier.max_attempts == 3 and config.notifier.dlq_topic == "lagwatch.dlq"


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ("{type: webhook, url: 'https://x.example.com'}", "subscriptions[0].id"),
        ("{id: a, type: sms, url: 'https://x.example.com'}", "subscriptions[0].type"),
        ("{id: a, url: 'https://x.example.com', threshold: STOP}", "subscriptions[0].threshold"),
        ("{id: a, url: 'https://x.example.com', send-interval: -1}", "subscriptions[0].send-interval"),
        ("{id: a, url: 'https://x.example.com', group-allowlist: '('}", "subscriptions[0].group-allowlist"),
        ("{id: a, url: 'https://x.example.com', sned-close: true}", "subscriptions[0].sned-close"),
        ("{id: a, url: 'https://x.example.com', headers: [a]}", "subscriptions[0].headers"),
        ("{id: 'a b', url: 'https://x.example.com'}", "subscriptions[0].id"),
    ],
)
def test_a_bad_configured_subscription_names_its_key(tmp_path, entry, key):
    with pytest.raises(ConfigError) as err:
        load_config(write_config(tmp_path, f"subscriptions:\n  - {entry}\n"), env={})
    assert err.value.key == key


@pytest.mark.parametrize(
    ("entries", "key"),
    [
        ("- {id: a, url: ''}", "subscriptions[0].url"),  # (the notifier knows which types need a url)
        ("- {id: a, url: 'ftp://x.example.com'}", "subscriptions[0].url"),
        ("- {id: a, url: 'http://169.254.169.254/'}", "subscriptions[0].url"),
        ("- {id: a, url: 'http://10.0.0.1/'}", "subscriptions[0].url"),
        ("- {id: a, url: 'https://x.example.com', body-template: '{{ oops'}", "subscriptions[0].body-template"),
        ("- {id: a, url: 'https://x.example.com'}\n  - {id: a, url: 'https://y.example.com'}", "subscriptions[1].id"),
    ],
)
def test_the_notifier_checks_urls_templates_and_ids_at_start_up(tmp_path, entries, key):
    config = load_config(write_config(tmp_path, f"subscriptions:\n  {entries}\n"), env={})
    with pytest.raises(ConfigError) as err:
        from_config(config)
    assert err.value.key == key


def test_replay_dlq_since_accepts_ages_epochs_and_iso_times():
    from lagwatch.services.notifier.dlq import parse_since

    now = 1_800_000_000.0
    assert parse_since("30m", now) == (now - 1800) * 1000 and parse_since("2h", now) == (now - 7200) * 1000
    assert parse_since("1d", now) == (now - 86_400) * 1000
    assert parse_since("1700000000", now) == 1_700_000_000_000 and parse_since("1700000000123", now) == 1700000000123
    assert parse_since("2023-11-14T22:13:20Z", now) == 1_700_000_000_000
    for bad in ("yesterday", "2023-11-14T22:13:20", "5 parsecs"):
        with pytest.raises(ValueError):
            parse_since(bad, now)


def test_headers_the_notifier_owns_cannot_be_configured():
    config = load_config(env={})
    bad = [
        SubscriptionConfig(id="a", url="https://x.example.com", headers={"X-Lagwatch-Signature": "v1=forged"}),
        SubscriptionConfig(id="b", url="https://x.example.com", headers={"X-Evil": "a\r\nInjected: 1"}),
        SubscriptionConfig(id="c", url="https://x.example.com", headers={"Bad Name": "x"}),
        # the client frames the body: a Content-Length of 5 would cut every event to 5 bytes, answered 200
        SubscriptionConfig(id="d", url="https://x.example.com", headers={"Content-Length": "5"}),
        SubscriptionConfig(id="e", url="https://x.example.com", headers={"transfer-encoding": "chunked"}),
        SubscriptionConfig(id="f", url="https://x.example.com", headers={"Host": "other.example.com"}),
        SubscriptionConfig(id="g", url="https://x.example.com", headers={"X-Nul": "a\x00b"}),
    ]
    for i, sub in enumerate(bad):
        with pytest.raises(ConfigError) as err:
            from_config(dataclasses.replace(config, subscriptions=[sub]))
        assert err.value.key.startswith("subscriptions[0].headers."), i


def test_slack_shows_how_far_behind_in_time_when_the_event_knows():
    _, worse, _ = incident()
    behind = {**worse, "max_lag_seconds": 754.2, "max_lag_seconds_lower_bound": True}
    fields = [f["text"] for f in message(notification(behind, "update"))["blocks"][1]["fields"]]
    assert "*Behind by*\nat least 12m 34s" in fields
    assert not any(f.startswith("*Behind by*") for f in
                   (f["text"] for f in message(notification(worse, "update"))["blocks"][1]["fields"]))  # fmt: skip


@pytest.mark.parametrize(
    ("reason", "slack", "teams"),
    [
        (
            "unsubscribed",
            ":no_bell: No longer watched here: billing on local (this subscription no longer covers it)",
            "Closed: billing on local is no longer covered by this subscription",
        ),
        (  # `lagwatch forget-cluster`: the notifiers close its incidents
            "cluster_forgotten",
            ":no_bell: No longer watched: billing on local (lagwatch no longer watches the cluster)",
            "Closed: billing on local is no longer watched (lagwatch no longer watches the cluster)",
        ),
    ],
)
def test_a_close_that_is_not_the_groups_own_says_why_in_every_channel(reason, slack, teams):
    """services/notifier/scope.py: such a close carries the group's latest event (still WARN here), so every
    channel says why it closes rather than "Resolved"; webhooks get the reason as a header, templates too."""
    opened, _, _ = incident()
    gone = dataclasses.replace(delivery(opened, "close"), notification_id="n" * 32, reason=reason)
    said = json.loads(build_request(sub(type="slack", url=SLACK_URL), gone).body)
    assert said["blocks"][0]["text"]["text"].startswith(slack)
    hook = build_request(sub(secret="k" * 32), gone, now=1_800_000_000)
    assert hook.body == encode(opened) and hook.headers["X-Lagwatch-Reason"] == reason
    assert hook.headers["X-Lagwatch-Event-Id"] == "n" * 32
    signing.verify_request("k" * 32, hook.headers, hook.body, now=1_800_000_010)
    pager = json.loads(build_request(sub(type="pagerduty", routing_key="R0UT1NGKEY0123", url=None), gone).body)
    assert pager["event_action"] == "resolve"
    said = build_request(sub(type="msteams", url="https://example.webhook.office.com/x"), gone).body.decode()
    assert teams in said
    templated = build_request(sub(body_template="{{ notification.reason }}/{{ notification.kind }}"), gone)
    assert templated.body == f"{reason}/close".encode()
    own = build_request(sub(body_template="{{ notification.reason }}"), delivery(opened, "close"))
    assert own.body == b"None" and "X-Lagwatch-Reason" not in own.headers
