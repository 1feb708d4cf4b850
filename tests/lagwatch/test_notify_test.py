"""`lagwatch notify test ID`, run as a real subprocess against real HTTP receivers: the subscription gets the open
and close of a sample incident, built and signed as the notifier builds them, with `X-Lagwatch-Reason: test`; every
answer is said at once, and a receiver that refuses makes the command fail (services/notifier/sample.py)."""

import asyncio
import json

import jsonschema
import pytest

from lagwatch.shared.events import lag_threshold_event
from lagwatch.shared.notifications.delivery import signing
from lagwatch.shared.notifications.subscriptions.store import SubscriptionStore
from lagwatch.shared.runtime.config import SubscriptionConfig
from tests.lagwatch.test_cli import lagwatch, one_line_error
from tests.net_helpers import free_port
from tests.services.notifier.test_notifier_support import Receiver

SECRET = "k" * 32


def config_file(tmp_path, redis_url: str, subscriptions: str = "") -> str:
    path = tmp_path / "lagwatch.yaml"
    path.write_text(
        f"redis: {{url: {json.dumps(redis_url)}}}\n"
        "clusters: {prod: {bootstrap-servers: ['127.0.0.1:9092']}}\n"
        "notifier: {allow-private-targets: true, request-timeout: 2}\n" + subscriptions
    )
    return str(path)


async def run(*args):
    """The command in a thread: the receivers answer on this event loop meanwhile."""
    return await asyncio.to_thread(lagwatch, "notify", "test", *args)


async def test_a_webhook_gets_the_sample_incidents_open_and_close_signed(tmp_path, redis_server):
    async with Receiver() as receiver:
        subscriptions = (
            f"subscriptions:\n  - {{id: hook, url: {json.dumps(receiver.url('/hook'))}, secret: {SECRET}}}\n"
        )
        result = await run("hook", "--config", config_file(tmp_path, redis_server.url, subscriptions))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report == {
        "subscription": "hook",
        "type": "webhook",
        "cluster": "prod",  # the only cluster configured
        "group": "lagwatch-test",
        "sent": [
            {"kind": "open", "ok": True, "status": 200, "error": None},
            {"kind": "close", "ok": True, "status": 200, "error": None},
        ],
    }
    opened, closed = receiver.requests
    assert [opened.json()["status"], closed.json()["status"]] == ["WARN", "OK"]
    assert opened.json()["incident_id"] == closed.json()["incident_id"] and opened.json()["group"] == "lagwatch-test"
    for request in (opened, closed):
        assert request.headers["X-Lagwatch-Reason"] == "test"
        signing.verify_request(SECRET, request.headers, request.body)  # raises unless signed as the notifier signs


async def test_an_api_subscription_is_found_in_redis_and_a_slack_message_is_what_the_notifier_sends(
    tmp_path, redis_server, redis
):
    async with Receiver() as receiver:
        slack = SubscriptionConfig(id="ops", type="slack", url=receiver.url("/slack"), send_close=False)
        await SubscriptionStore(redis).put(slack, create=True)
        result = await run("ops", "--cluster", "eu-1", "--config", config_file(tmp_path, redis_server.url))
    assert result.returncode == 0, result.stderr
    assert [s["kind"] for s in json.loads(result.stdout)["sent"]] == ["open"]  # no `send-close`: no close
    (message,) = receiver.requests
    assert message.json()["blocks"][0]["text"]["text"].startswith(":large_yellow_circle: WARN: lagwatch-test on eu-1")


async def test_a_receiver_that_refuses_fails_the_command_with_its_answer(tmp_path, redis_server):
    async with Receiver(script=[403]) as receiver:
        subscriptions = f"subscriptions:\n  - {{id: hook, url: {json.dumps(receiver.url('/hook'))}}}\n"
        result = await run("hook", "--config", config_file(tmp_path, redis_server.url, subscriptions))
    assert result.returncode == 1
    (sent,) = json.loads(result.stdout)["sent"]  # the close is not tried after a refused open
    assert (sent["kind"], sent["ok"], sent["status"]) == ("open", False, 403)
    assert len(receiver.requests) == 1


async def test_an_unknown_subscription_is_named_with_those_there_are(tmp_path, redis_server):
    subscriptions = "subscriptions:\n  - {id: hook, url: 'http://127.0.0.1:9/'}\n"
    result = await run("nope", "--config", config_file(tmp_path, redis_server.url, subscriptions))
    assert result.returncode == 2
    assert "no subscription 'nope' (there are: hook)" in one_line_error(result)


async def test_a_receiver_that_does_not_answer_is_said_in_the_report(tmp_path, redis_server):
    subscriptions = f"subscriptions:\n  - {{id: hook, url: 'http://127.0.0.1:{free_port()}/'}}\n"
    result = await run("hook", "--config", config_file(tmp_path, redis_server.url, subscriptions))
    assert result.returncode == 1
    (sent,) = json.loads(result.stdout)["sent"]
    assert sent["ok"] is False and sent["status"] is None and sent["error"]


async def test_templates_render_with_the_reason_test_and_the_command_exits(tmp_path, redis_server):
    """Templates render in worker processes (shared/notifications/templating/template_worker.py): the command stops
    them."""
    async with Receiver() as receiver:
        template = "{{ notification.reason }} {{ notification.kind }} {{ event.group }}"
        subscriptions = (
            f"subscriptions:\n  - {{id: hook, url: {json.dumps(receiver.url('/hook'))}, "
            f"body-template: {json.dumps(template)}}}\n"
        )
        result = await run("hook", "--config", config_file(tmp_path, redis_server.url, subscriptions))
    assert result.returncode == 0, result.stderr
    assert [r.body for r in receiver.requests] == [b"test open lagwatch-test", b"test close lagwatch-test"]


def test_a_subscription_not_in_the_file_with_redis_away_is_said_in_one_line(tmp_path):
    result = lagwatch("notify", "test", "ops", "--config", config_file(tmp_path, f"redis://127.0.0.1:{free_port()}/0"))
    assert result.returncode == 1
    assert "subscription 'ops' is not in the configuration file, and Redis (the api's) failed" in one_line_error(result)


async def test_a_lag_sample_sends_the_lag_seconds_alerts_open_and_close_as_the_notifier_builds_them(
    tmp_path, redis_server
):
    async with Receiver() as receiver:
        subscriptions = (
            f"subscriptions:\n  - {{id: slow, url: {json.dumps(receiver.url('/slow'))}, secret: {SECRET}, "
            "lag-seconds-threshold: 300}\n"
        )
        config = config_file(tmp_path, redis_server.url, subscriptions)
        result = await run("slow", "--sample", "lag", "--config", config)
    assert result.returncode == 0, result.stderr
    sent = json.loads(result.stdout)["sent"]
    assert [(s["kind"], s["ok"]) for s in sent] == [("lag-open", True), ("lag-close", True)]
    over, under = (request.json() for request in receiver.requests)
    jsonschema.validate(over, lag_threshold_event.schema())
    assert (over["kind"], over["group"], over["threshold_seconds"], over["above"]) == (
        "lag_threshold", "lagwatch-test", 300, True
    )  # fmt: skip
    assert over["max_lag_seconds"] == 450.0 and over["partitions"][0]["lag_seconds"] == 450.0
    assert (under["above"], under["incident_id"]) == (False, over["incident_id"])
    for request in receiver.requests:
        assert request.headers["X-Lagwatch-Reason"] == "test"
        signing.verify_request(SECRET, request.headers, request.body)


async def test_a_retention_sample_sends_the_data_loss_risk_alerts_open_and_close(tmp_path, redis_server):
    """For a subscription with `retention-risk-threshold`: retention deletes the partition's oldest unread message
    in half the threshold (by the topic's retention.ms), then no longer; as the evaluator writes such events."""
    async with Receiver() as receiver:
        subscriptions = (
            f"subscriptions:\n  - {{id: risky, url: {json.dumps(receiver.url('/risky'))}, secret: {SECRET}, "
            "retention-risk-threshold: 3600}\n"
        )
        result = await run(
            "risky", "--sample", "retention", "--config", config_file(tmp_path, redis_server.url, subscriptions)
        )
    assert result.returncode == 0, result.stderr
    assert [(s["kind"], s["ok"]) for s in json.loads(result.stdout)["sent"]] == [
        ("lag-open", True),
        ("lag-close", True),
    ]
    over, under = (request.json() for request in receiver.requests)
    for event in (over, under):
        jsonschema.validate(event, lag_threshold_event.schema())
    assert (over["alert"], over["reason"], over["threshold_seconds"], over["above"]) == (
        "data-loss-risk", "retention", 3600, True
    )  # fmt: skip
    assert over["retention_risk_seconds"] == 1800.0 and over["partitions"][0]["retention_risk_seconds"] == 1800.0
    assert (under["alert"], under["above"], under["incident_id"]) == ("data-loss-risk", False, over["incident_id"])
    assert over["incident_id"].startswith("risk-")
    for request in receiver.requests:
        signing.verify_request(SECRET, request.headers, request.body)


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        ("lag", "subscription 'hook' has no lag-seconds-threshold: it gets no lag alerts"),
        ("retention", "subscription 'hook' has no retention-risk-threshold: it gets no retention alerts"),
    ],
)
async def test_a_sample_of_alerts_the_subscription_does_not_get_is_refused_in_one_line(
    tmp_path, redis_server, sample, message
):
    subscriptions = "subscriptions:\n  - {id: hook, url: 'http://127.0.0.1:9/'}\n"
    result = await run("hook", "--sample", sample, "--config", config_file(tmp_path, redis_server.url, subscriptions))
    assert result.returncode == 2
    assert message in one_line_error(result)
