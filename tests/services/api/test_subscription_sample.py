"""`POST /api/v1/subscriptions/{id}/test`: a running notifier sends the subscription a sample incident, as `lagwatch
notify test` does, and the api answers with what the receiver said (shared/notifications/sample_requests.py). Real api,
real notifier (its Kafka away: the sample needs only Redis and the receiver), real receivers."""

import asyncio
import dataclasses
import json

import pytest

from lagwatch.services.notifier.service import NotifierService
from lagwatch.shared.notifications import sample_requests
from lagwatch.shared.notifications.delivery import signing
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.config import SubscriptionConfig
from tests.kafka_helpers import eventually, running
from tests.services.api.test_api import api_config, call, serving
from tests.services.notifier.test_notifier_support import Receiver

TOKEN = "sample-route-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECRET = "s" * 32


def config_with(redis_url, *subscriptions):
    config = api_config(
        redis_url, API__TOKEN=TOKEN, NOTIFIER__ALLOW_PRIVATE_TARGETS="true", NOTIFIER__REQUEST_TIMEOUT="2"
    )
    return dataclasses.replace(config, subscriptions=list(subscriptions))


async def test_a_running_notifier_sends_the_sample_signed_and_the_answer_is_its_report(redis_server, redis, http):
    async with Receiver() as receiver:
        hook = SubscriptionConfig(id="hook", url=receiver.url("/hook"), secret=SECRET)
        config = config_with(redis_server.url, hook)
        async with serving(config) as api, running(NotifierService(config, "local", http_port=0)):
            status, body, _ = await call(
                http, "POST", f"{api.url}/api/v1/subscriptions/hook/test?cluster=eu-1", headers=AUTH
            )
    assert status == 200, body
    assert (body["error"], body["message"]) == (False, "sample sent")
    assert {k: body[k] for k in ("subscription", "type", "cluster", "group")} == {
        "subscription": "hook", "type": "webhook", "cluster": "eu-1", "group": "lagwatch-test"
    }  # fmt: skip
    assert body["sent"] == [
        {"kind": "open", "ok": True, "status": 200, "error": None},
        {"kind": "close", "ok": True, "status": 200, "error": None},
    ]
    opened, closed = receiver.requests
    assert [opened.json()["status"], closed.json()["status"]] == ["WARN", "OK"]
    for request in (opened, closed):
        assert request.headers["X-Lagwatch-Reason"] == "test" and request.json()["cluster"] == "eu-1"
        signing.verify_request(SECRET, request.headers, request.body)  # raises unless signed as the notifier signs
    assert await redis.llen(keys.SAMPLE_REQUESTS) == 0


@pytest.mark.parametrize(
    ("sample", "threshold", "expected"),
    [
        ("lag", {"lag_seconds_threshold": 60}, {"alert": "lag-seconds", "max_lag_seconds": 90.0}),
        ("retention", {"retention_risk_threshold": 600}, {"alert": "data-loss-risk", "retention_risk_seconds": 300.0}),
    ],
)
async def test_a_lag_or_retention_sample_sends_that_alerts_open_and_close(
    redis_server, redis, http, sample, threshold, expected
):
    async with Receiver() as receiver:
        config = config_with(redis_server.url, SubscriptionConfig(id="slow", url=receiver.url("/slow"), **threshold))
        async with serving(config) as api, running(NotifierService(config, "local", http_port=0)):
            url = f"{api.url}/api/v1/subscriptions/slow/test?sample={sample}"
            status, body, _ = await call(http, "POST", url, headers=AUTH)
    assert status == 200, body
    assert [(s["kind"], s["ok"]) for s in body["sent"]] == [("lag-open", True), ("lag-close", True)]
    over, under = (request.json() for request in receiver.requests)
    assert (over["threshold_seconds"], over["above"], under["above"]) == (next(iter(threshold.values())), True, False)
    assert {k: over[k] for k in expected} == expected


async def test_an_api_subscription_whose_receiver_refuses_is_answered_502_with_the_report(redis_server, redis, http):
    async with Receiver(script=[403]) as receiver:
        config = config_with(redis_server.url)
        async with serving(config) as api, running(NotifierService(config, "local", http_port=0)):
            # created through the api after the notifier started: it looks the subscription up when asked
            created = {"id": "ops", "url": receiver.url("/ops")}
            status, _, _ = await call(http, "POST", f"{api.url}/api/v1/subscriptions", json=created, headers=AUTH)
            assert status == 201
            status, body, _ = await call(http, "POST", f"{api.url}/api/v1/subscriptions/ops/test", headers=AUTH)
    assert (status, body["error"], body["message"]) == (502, True, "the receiver did not take the sample")
    (sent,) = body["sent"]  # the close is not tried after a refused open
    assert (sent["kind"], sent["ok"], sent["status"]) == ("open", False, 403)
    assert body["cluster"] == "local" and len(receiver.requests) == 1  # the one cluster configured


async def test_with_no_notifier_running_the_request_is_withdrawn_and_answered_504(
    redis_server, redis, http, monkeypatch
):
    monkeypatch.setattr(sample_requests, "PICKUP_S", 0.5)
    async with Receiver() as receiver:
        config = config_with(redis_server.url, SubscriptionConfig(id="hook", url=receiver.url("/hook")))
        async with serving(config) as api:
            status, body, _ = await call(http, "POST", f"{api.url}/api/v1/subscriptions/hook/test", headers=AUTH)
        assert (status, body["error"]) == (504, True)
        assert body["message"] == "no notifier took the request within 0 s: is a notifier running?"
        assert await redis.llen(keys.SAMPLE_REQUESTS) == 0  # withdrawn
        async with running(NotifierService(config, "local", http_port=0)):
            await asyncio.sleep(3 * sample_requests.TAKE_EVERY_S)
    assert receiver.requests == []  # a notifier starting later sends no test nobody waits for


async def test_a_request_queued_behind_one_that_cannot_be_read_is_still_sent_and_reported(redis_server, redis):
    async with Receiver() as receiver:
        config = config_with(redis_server.url, SubscriptionConfig(id="hook", url=receiver.url("/hook")))
        request = sample_requests.SampleRequest.new("hook", "eu-1")
        await redis.rpush(keys.SAMPLE_REQUESTS, '{"id": 7}', "not json", request.encode())
        async with running(NotifierService(config, "local", http_port=0)):
            await eventually(lambda: redis.exists(keys.sample_report(request.id)))
    report = json.loads(await redis.get(keys.sample_report(request.id)))
    assert [(s["kind"], s["ok"]) for s in report["sent"]] == [("open", True), ("close", True)]
    assert len(receiver.requests) == 2 and await redis.llen(keys.SAMPLE_REQUESTS) == 0
    assert 0 < await redis.ttl(keys.sample_report(request.id)) <= sample_requests.REPORT_TTL_S


@pytest.mark.parametrize(
    ("path", "headers", "status", "message"),
    [
        ("/api/v1/subscriptions/hook/test", {}, 401, "a bearer token is required"),
        ("/api/v1/subscriptions/nope/test", AUTH, 404, "subscription not found"),
        ("/api/v1/subscriptions/hook/test?cluster=a%20b", AUTH, 400, "cluster: 'a b' is not a cluster name"),
        ("/api/v1/subscriptions/hook/test?sample=lag", AUTH, 400, "sample: the subscription has no lag-seconds"),
        ("/api/v1/subscriptions/hook/test?sample=retention", AUTH, 400, "sample: the subscription has no retention"),
        (
            "/api/v1/subscriptions/hook/test?sample=nope",
            AUTH,
            400,
            "sample: 'nope' is not one of status, lag, retention",
        ),
    ],
)
async def test_the_token_a_known_subscription_and_a_cluster_name_are_needed(
    redis_server, redis, http, path, headers, status, message
):
    config = config_with(redis_server.url, SubscriptionConfig(id="hook", url="https://alerts.example.com/hook"))
    async with serving(config) as api:
        got, body, _ = await call(http, "POST", f"{api.url}{path}", headers=headers)
    assert (got, body["error"]) == (status, True) and body["message"].startswith(message), body
    assert await redis.llen(keys.SAMPLE_REQUESTS) == 0  # nothing asked of a notifier
