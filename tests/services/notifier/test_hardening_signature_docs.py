"""Issue 18 ("Done when": docs/security.md says how to verify signatures): what the docs tell receivers is checked
against a request a running notifier really sent — security.md's recipe, webhooks.md's code for receivers without
lagwatch, and `signing.verify_request` — and each refuses the same request re-sent with another event id, kind,
body, an old timestamp or the wrong secret."""

import asyncio
import dataclasses
import hashlib
import hmac
import time

import pytest
import redis as sync_redis
from multidict import CIMultiDict

from lagwatch.devkit.mock_kafka import MockKafkaCluster
from lagwatch.services.notifier.service import NotifierService
from lagwatch.shared.notifications.delivery import signing
from lagwatch.shared.runtime.config import SubscriptionConfig
from tests import paths
from tests.kafka_helpers import FAST_NOTIFIER, make_config, running
from tests.services.notifier.test_notifier_service import STATUS_TOPIC, publish
from tests.services.notifier.test_notifier_support import Receiver, Timeline

DOCS = paths.DOCS
SECRET = "k" * 24
RECIPE = 'HMAC-SHA256(secret, timestamp + "\\n" + event_id + "\\n" + kind + "\\n" + body)'


def recipe(secret: str, headers, body: bytes) -> bool:
    """security.md's steps 1-3, as written there."""
    timestamp, event_id = headers["X-Lagwatch-Timestamp"], headers["X-Lagwatch-Event-Id"]
    kind, signature = headers["X-Lagwatch-Notification"], headers["X-Lagwatch-Signature"]
    if abs(time.time() - int(timestamp)) > 300:
        return False
    signed = (timestamp + "\n" + event_id + "\n" + kind + "\n").encode() + body
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    values = [v.strip()[3:] for v in signature.split(",") if v.strip().startswith("v2=")]
    return any(hmac.compare_digest(expected, v) for v in values)


def receivers_code():
    """webhooks.md's `verify`, for receivers without lagwatch (the code block after "Without lagwatch installed")."""
    text = (DOCS / "webhooks.md").read_text()
    block = text.split("Without lagwatch installed:", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(block, namespace)
    return namespace["verify"]


def library(secret: str, headers, body: bytes) -> str | None:
    try:
        signing.verify_request(secret, CIMultiDict(headers), body)
    except signing.SignatureError as exc:
        return exc.code
    return None


@pytest.fixture(scope="module")
def delivered(_shared_redis_server):
    """One notification with a signature, as a running notifier sent it: (headers, body)."""

    async def deliver(kafka, redis_url):
        kafka.create_topic(STATUS_TOPIC, 1)
        async with Receiver() as receiver:
            hook = SubscriptionConfig(id="hook", url=receiver.url(), secret=SECRET)
            config = dataclasses.replace(make_config(kafka.bootstrap, redis_url, **FAST_NOTIFIER), subscriptions=[hook])
            t = Timeline("billing")
            async with running(NotifierService(config, "local", http_port=0)):
                await publish(kafka.bootstrap, t.to("OK"), t.to("ERR", (10,)))
                (request,) = await receiver.wait_for(1, timeout=40)
        return dict(request.headers), request.body

    with sync_redis.Redis.from_url(_shared_redis_server.url) as client:
        client.flushdb()
    with MockKafkaCluster() as kafka:
        kafka.start()
        return asyncio.run(deliver(kafka, _shared_redis_server.url))


def test_security_md_gives_the_recipe_the_notifier_signs_with(delivered):
    text = (DOCS / "security.md").read_text()
    assert RECIPE in text and "X-Lagwatch-Signature" in text and "verify_request" in text
    headers, body = delivered
    assert headers["X-Lagwatch-Signature"].startswith("v2=")
    assert recipe(SECRET, headers, body)


@pytest.mark.parametrize("check", ["recipe", "receivers-code", "library"])
def test_every_documented_check_accepts_the_real_request_and_refuses_it_altered(delivered, check):
    headers, body = delivered
    verify = {
        "recipe": lambda s, h, b: None if recipe(s, h, b) else "refused",
        "receivers-code": lambda s, h, b: receivers_code()(s.encode(), h, b),
        "library": library,
    }[check]
    assert verify(SECRET, headers, body) is None
    altered = [
        (SECRET, {**headers, "X-Lagwatch-Event-Id": "another-event"}, body),  # replayed as a new alert
        (SECRET, {**headers, "X-Lagwatch-Notification": "close"}, body),  # an open passed off as a close
        (SECRET, headers, body + b" "),
        ("another-secret-0123456789", headers, body),
        (SECRET, {**headers, "X-Lagwatch-Timestamp": str(int(headers["X-Lagwatch-Timestamp"]) - 3600)}, body),
    ]
    assert all(verify(*case) is not None for case in altered)
