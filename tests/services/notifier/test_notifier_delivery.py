"""Delivering from the outbox to real HTTP receivers: retries, Retry-After, dead letters and their replay,
isolation of a hanging endpoint, and recovery of deliveries a crashed worker held."""

import asyncio
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from lagwatch.services.notifier.delivery import Dispatcher, Sender
from lagwatch.services.notifier.dlq import DeadLetters, read_dead_letters
from lagwatch.services.notifier.outbox import Delivery, Outbox, group_field
from lagwatch.services.notifier.subscriptions import Registry
from lagwatch.shared.events.status_event import encode
from lagwatch.shared.notifications.delivery import signing
from lagwatch.shared.notifications.subscriptions.store import SubscriptionStore
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.config import SubscriptionConfig
from lagwatch.shared.runtime.redis_client import connect
from tests.kafka_helpers import FAST_NOTIFIER, eventually, make_config
from tests.services.notifier.test_notifier_support import Receiver, Timeline, typed

DLQ = "lagwatch.dlq"
FAST = {**FAST_NOTIFIER, "NOTIFIER__MAX_ATTEMPTS": "4"}


def config_for(kafka, redis_server, subscriptions, **env):
    config = make_config(kafka.bootstrap if kafka else "127.0.0.1:9", redis_server.url, **{**FAST, **env})
    return dataclasses.replace(config, subscriptions=[SubscriptionConfig(**s) for s in subscriptions])


@contextlib.asynccontextmanager
async def dispatching(config, *, dead_letters=True):
    """A Dispatcher (the notifier's delivery workers) running against Redis and, for dead letters, Kafka."""
    redis = connect(config.redis)
    n = config.notifier
    outbox = Outbox(redis, lease_ms=int(n.lease * 1000), seen_ttl_ms=60_000)
    registry = Registry(config, SubscriptionStore(redis))
    sender = Sender(timeout_s=n.request_timeout, allow_private=n.allow_private_targets)
    dlq = DeadLetters({"bootstrap_servers": config.cluster("local").bootstrap_servers[0]}, n.dlq_topic)
    await sender.start()
    if dead_letters:
        await dlq.start()
    dispatcher = Dispatcher(outbox, registry, sender, dlq, n)
    stopping = asyncio.Event()
    task = asyncio.create_task(dispatcher.run(stopping))
    try:
        yield outbox, dispatcher
    finally:
        stopping.set()
        await asyncio.wait_for(task, 10)
        await sender.stop()
        await dlq.stop()
        await redis.aclose()


def open_event(group="billing"):
    t = Timeline(group)
    t.to("OK")
    return t.to("ERR", (500, 0))


async def enqueue(outbox, event, sub_id="hook", kind="open"):
    d = Delivery(f"{event['event_id']}.{sub_id}", sub_id, kind, typed(event), event["event_id"], now_ms())
    assert await outbox.enqueue(d)
    return d


async def outbox_empty(redis):
    return (
        await redis.zcard(keys.OUTBOX_DUE) == 0
        and await redis.zcard(keys.OUTBOX_INFLIGHT) == 0
        and await redis.hlen(keys.OUTBOX_DELIVERIES) == 0
    )


async def test_a_500_then_200_is_delivered_once_with_the_same_event_id(redis_server, redis, kafka):
    async with Receiver(script=[500, 503]) as receiver:
        config = config_for(kafka, redis_server, [{"id": "hook", "url": receiver.url(), "secret": "k" * 16}])
        event = open_event()
        async with dispatching(config) as (outbox, _):
            await enqueue(outbox, event)
            await receiver.wait_for(3)
            await eventually(lambda: outbox_empty(redis))
            await asyncio.sleep(0.3)  # nothing more is sent
    assert len(receiver.requests) == 3
    assert [r.headers["X-Lagwatch-Attempt"] for r in receiver.requests] == ["1", "2", "3"]
    assert {r.headers["X-Lagwatch-Event-Id"] for r in receiver.requests} == {event["event_id"]}
    last = receiver.requests[-1]
    assert last.body == encode(event)
    signing.verify_request("k" * 16, last.headers, last.body)


async def test_429_retry_after_is_honoured(redis_server, redis, kafka):
    async with Receiver(script=[(429, {"Retry-After": "1"})]) as receiver:
        config = config_for(kafka, redis_server, [{"id": "hook", "url": receiver.url()}])
        async with dispatching(config) as (outbox, _):
            await enqueue(outbox, open_event())
            first, second = await receiver.wait_for(2)
            await eventually(lambda: outbox_empty(redis))
    gap = second.at - first.at
    assert 1.0 <= gap < 1.8, gap  # the backoff alone would have waited at most 0.1 s


async def test_a_400_is_dead_lettered_at_once_and_replay_dlq_sends_it_again(redis_server, redis, kafka):
    kafka.create_topic(DLQ, 1)
    async with Receiver(script=[400]) as receiver:
        config = config_for(kafka, redis_server, [{"id": "hook", "url": receiver.url(), "secret": "top-secret-key"}])
        event = open_event()
        async with dispatching(config) as (outbox, _):
            await enqueue(outbox, event)
            await receiver.wait_for(1)
            await eventually(lambda: outbox_empty(redis))
            letters = await eventually(lambda: read_dead_letters({"bootstrap_servers": kafka.bootstrap}, DLQ))
            await asyncio.sleep(0.3)
            assert len(receiver.requests) == 1  # no retries for a 400
            (letter,) = letters
            assert letter["subscription_id"] == "hook" and letter["error"].startswith("HTTP 400")
            assert letter["status_code"] == 400 and letter["attempts"] == 1 and letter["event"] == event
            assert "top-secret-key" not in json.dumps(letter) and receiver.url() not in json.dumps(letter)

            # the incident is still open for the subscription (as recorded when its open was decided)
            state = group_field(event["cluster"], event["group"])
            await redis.hset(keys.notify_state("hook"), state, json.dumps({"incident_id": event["incident_id"]}))
            result = replay_dlq(kafka, redis_server, "--subscription", "hook", "--since", "1h")
            assert result == {"read": 1, "matched": 1, "enqueued": 1, "already_pending": 0, "incident_over": 0}
            assert replay_dlq(kafka, redis_server, "--subscription", "other") == {
                "read": 1,
                "matched": 0,
                "enqueued": 0,
                "already_pending": 0,
                "incident_over": 0,
            }
            await receiver.wait_for(2)
            await eventually(lambda: outbox_empty(redis))
    assert receiver.requests[1].body == encode(event)
    assert receiver.requests[1].headers["X-Lagwatch-Event-Id"] == event["event_id"]


async def test_replay_dlq_leaves_out_an_open_whose_incident_was_closed_since(redis_server, redis, kafka):
    """The open was dead-lettered, the close delivered (the subscription's incident state is gone): replaying the
    open would open the incident anew at the receiver, after its close, for good."""
    kafka.create_topic(DLQ, 1)
    async with Receiver(script=[400]) as receiver:
        config = config_for(kafka, redis_server, [{"id": "hook", "url": receiver.url()}])
        async with dispatching(config) as (outbox, _):
            await enqueue(outbox, open_event())
            await eventually(lambda: read_dead_letters({"bootstrap_servers": kafka.bootstrap}, DLQ))
            result = replay_dlq(kafka, redis_server, "--subscription", "hook")
            assert result == {"read": 1, "matched": 1, "enqueued": 0, "already_pending": 0, "incident_over": 1}
            await asyncio.sleep(0.3)
    assert len(receiver.requests) == 1


def replay_dlq(kafka, redis_server, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAGWATCH")}
    env.update(REDIS_URL=redis_server.url, KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap)
    lagwatch = Path(sys.executable).parent / "lagwatch"
    done = subprocess.run(
        [lagwatch, "notify", "replay-dlq", *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_the_last_retry_goes_to_the_dead_letter_topic(redis_server, redis, kafka):
    kafka.create_topic(DLQ, 1)
    async with Receiver(default=500) as receiver:
        config = config_for(kafka, redis_server, [{"id": "hook", "url": receiver.url()}], NOTIFIER__MAX_ATTEMPTS="3")
        async with dispatching(config) as (outbox, _):
            await enqueue(outbox, open_event())
            await eventually(lambda: outbox_empty(redis))
            (letter,) = await eventually(lambda: read_dead_letters({"bootstrap_servers": kafka.bootstrap}, DLQ))
    assert len(receiver.requests) == 3
    assert letter["attempts"] == 3 and letter["error"].startswith("gave up after 3 attempts: HTTP 500")


async def test_a_hanging_receiver_does_not_delay_a_healthy_one(redis_server, redis, kafka):
    async with Receiver(default="hang") as slow, Receiver() as healthy:
        config = config_for(
            kafka,
            redis_server,
            [{"id": "slow", "url": slow.url()}, {"id": "healthy", "url": healthy.url()}],
            NOTIFIER__REQUEST_TIMEOUT="2",
            NOTIFIER__LEASE="5",
            NOTIFIER__PER_HOST_CONCURRENCY="2",
        )
        async with dispatching(config, dead_letters=False) as (outbox, _):
            for i in range(20):
                await enqueue(outbox, open_event(f"g{i}"), "slow")
            await slow.wait_for(2)  # the slow host's two slots hang; 18 wait their turn
            started = time.monotonic()
            await enqueue(outbox, open_event("other"), "healthy")
            await healthy.wait_for(1)
            assert time.monotonic() - started < 0.5
            assert len(slow.requests) == 2  # per-host concurrency limit


async def test_a_dead_host_opens_its_circuit_and_waits_without_using_attempts(redis_server, redis, kafka):
    async with Receiver(default=503) as dead:
        config = config_for(
            kafka,
            redis_server,
            [{"id": "hook", "url": dead.url()}],
            NOTIFIER__BREAKER_FAILURES="3",
            NOTIFIER__BREAKER_COOLDOWN="0.6",
            NOTIFIER__MAX_ATTEMPTS="50",
            NOTIFIER__PER_HOST_CONCURRENCY="1",
        )
        async with dispatching(config, dead_letters=False) as (outbox, _):
            for i in range(5):
                await enqueue(outbox, open_event(f"g{i}"))
            await dead.wait_for(3)
            await asyncio.sleep(0.4)
            assert len(dead.requests) == 3  # open: nothing goes out during the cool-down
            dead.default = 200
            await dead.wait_for(3 + 5, timeout=5)  # one probe, then the rest
            await eventually(lambda: outbox_empty(redis))


async def test_a_delivery_held_by_a_crashed_worker_is_sent_after_its_lease(redis_server, redis, kafka):
    async with Receiver() as receiver:
        config = config_for(kafka, redis_server, [{"id": "hook", "url": receiver.url()}], NOTIFIER__LEASE="0.6")
        redis_client = connect(config.redis)
        crashed = Outbox(redis_client, lease_ms=600, seen_ttl_ms=1000)
        event = open_event()
        await enqueue(crashed, event)
        claimed, _ = await crashed.claim(10)
        assert [d.id for d in claimed] == [f"{event['event_id']}.hook"]  # claimed, then the worker "dies"
        assert await redis.zcard(keys.OUTBOX_INFLIGHT) == 1
        started = time.monotonic()
        async with dispatching(config, dead_letters=False):
            (request,) = await receiver.wait_for(1)
            await eventually(lambda: outbox_empty(redis))
            await asyncio.sleep(0.2)
        await redis_client.aclose()
    assert request.at - started >= 0.4 and len(receiver.requests) == 1


async def test_a_delivery_for_a_deleted_subscription_is_dropped(redis_server, redis, kafka):
    config = config_for(kafka, redis_server, [])
    async with dispatching(config, dead_letters=False) as (outbox, _):
        await enqueue(outbox, open_event(), "gone")
        await eventually(lambda: outbox_empty(redis))


class LoopProbe:
    """A thread asking the event loop to run a no-op every 0.1 s, as a supervisor's health check would: counts the
    answers later than `limit_s`."""

    def __init__(self, limit_s: float) -> None:
        import threading

        self.limit_s = limit_s
        self.loop = asyncio.get_running_loop()
        self.late = self.answered = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import concurrent.futures

        while not self._stop.wait(0.1):
            try:
                asyncio.run_coroutine_threadsafe(asyncio.sleep(0), self.loop).result(timeout=self.limit_s)
                self.answered += 1
            except concurrent.futures.TimeoutError:
                self.late += 1

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=self.limit_s + 1)


async def test_a_hostile_template_is_cut_off_and_holds_up_neither_the_loop_nor_other_subscriptions(
    redis_server, redis, kafka
):
    kafka.create_topic(DLQ, 1)
    hostile = "{% for i in range(100000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}"
    async with Receiver() as receiver:
        config = config_for(
            kafka,
            redis_server,
            [
                {"id": "hostile", "url": receiver.url("/hostile"), "body_template": hostile},
                {"id": "plain", "url": receiver.url("/plain"), "body_template": "{{ event.group }}"},
            ],
        )
        event = open_event()
        async with dispatching(config) as (outbox, _):
            with LoopProbe(limit_s=3.0) as probe:
                await enqueue(outbox, event, "hostile")
                await enqueue(outbox, event, "plain")
                await receiver.wait_for(1)
                await eventually(lambda: outbox_empty(redis))
                (letter,) = await eventually(lambda: read_dead_letters({"bootstrap_servers": kafka.bootstrap}, DLQ))
    assert [(r.path, r.body) for r in receiver.requests] == [("/plain", b"billing")]
    assert letter["subscription_id"] == "hostile" and "time budget" in letter["error"] and letter["attempts"] == 1
    assert probe.answered > 0 and probe.late == 0


async def test_a_captured_request_resent_with_another_event_id_or_kind_is_refused(redis_server, redis, kafka):
    """The signature covers the timestamp, the event id, the kind and the body (issue 18 row 9): the receiver that
    verifies as docs/webhooks.md says refuses a captured request re-sent as a new alert or as another kind."""
    from lagwatch.devkit.webhook_receiver import WebhookReceiver

    async with WebhookReceiver("k" * 16) as receiver, aiohttp.ClientSession() as http:
        config = config_for(kafka, redis_server, [{"id": "hook", "url": receiver.url("webhook"), "secret": "k" * 16}])
        async with dispatching(config, dead_letters=False) as (outbox, _):
            await enqueue(outbox, open_event())
            await eventually(lambda: outbox_empty(redis))
        (captured,) = receiver.deliveries

        async def resend(event_id: str, kind: str) -> tuple[int, dict]:
            headers = {
                signing.TIMESTAMP_HEADER: captured.timestamp,
                signing.SIGNATURE_HEADER: captured.signature,
                signing.EVENT_ID_HEADER: event_id,
                "X-Lagwatch-Notification": kind,
            }
            async with http.post(receiver.url("webhook"), data=captured.body.encode(), headers=headers) as response:
                return response.status, await response.json()

        assert await resend("another-event-id", captured.kind) == (401, {"error": signing.BAD_SIGNATURE})
        assert await resend(captured.notification_id, "close") == (401, {"error": signing.BAD_SIGNATURE})
        assert await resend(captured.notification_id, captured.kind) == (200, {"duplicate": True})
    assert captured.kind == "open" and len(receiver.alerts) == 1
