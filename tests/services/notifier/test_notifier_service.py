"""`lagwatch run notifier` end to end: events on the status topic (Kafka mock) -> notifications at real HTTP
receivers. Open, update, repeat and close; a redelivered event; api-created subscriptions; a crash mid-retry."""

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from lagwatch.services.notifier.events import LAG_EVENTS
from lagwatch.services.notifier.service import NotifierService
from lagwatch.shared.events.lag_threshold_event import Alert, Crossing, Reason, build_event, event_id, incident_id
from lagwatch.shared.events.status_event import encode, record_key
from lagwatch.shared.notifications.subscriptions.store import SubscriptionStore
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Status
from lagwatch.shared.runtime import service_lifecycle
from lagwatch.shared.runtime.config import SubscriptionConfig
from lagwatch.shared.statuses.retention import RetentionRisk
from lagwatch.shared.statuses.time_lag import TimeLag
from tests.kafka_helpers import FAST_NOTIFIER, check_readiness_follows_the_brokers, eventually, make_config, running
from tests.services.notifier.test_notifier_support import Receiver, Timeline, group_status, handled, outbox_empty

STATUS_TOPIC = "lagwatch.status"
FAST = {**FAST_NOTIFIER, "NOTIFIER__REPEAT_CHECK_INTERVAL": "0.1", "NOTIFIER__HTTP_PORT": "0"}


async def publish(bootstrap, *events):
    async with AIOKafkaProducer(bootstrap_servers=bootstrap) as producer:
        for event in events:
            await producer.send_and_wait(STATUS_TOPIC, encode(event), key=record_key(event["cluster"], event["group"]))


def kinds(receiver):
    return [
        (r.headers["X-Lagwatch-Notification"], r.json()["status"] if r.path == "/hook" else None)
        for r in receiver.requests
    ]


async def test_status_events_become_slack_and_webhook_notifications(kafka, redis_server, redis):
    kafka.create_topic(STATUS_TOPIC, 3)
    async with Receiver() as receiver:
        config = dataclasses.replace(
            make_config(
                kafka.bootstrap, redis_server.url, **FAST, NOTIFIER__DASHBOARD_URL="https://lw.example/{group}"
            ),
            subscriptions=[
                SubscriptionConfig(id="slack", type="slack", url=receiver.url("/slack"), group_denylist="^other$"),
                SubscriptionConfig(id="hook", url=receiver.url("/hook"), send_interval=0.4, secret="k" * 16),
            ],
        )
        t = Timeline("billing")
        async with running(NotifierService(config, "local", http_port=0)) as service:
            await publish(kafka.bootstrap, t.to("OK"), t.to("WARN", (50, 0)))  # OK: below the threshold
            await receiver.wait_for(3, timeout=30)  # slack open, hook open, hook repeat
            await publish(kafka.bootstrap, t.to("ERR", (900, 20)))
            await eventually(lambda: _count(receiver, "update", 2))
            await publish(kafka.bootstrap, t.to("OK"))
            await eventually(lambda: _count(receiver, "close", 2))
            await asyncio.sleep(0.6)  # no repeats once closed
            assert await redis.zcard(keys.NOTIFY_REPEATS) == 0
            other = Timeline("other")
            await publish(kafka.bootstrap, other.to("OK"), other.to("ERR", (5,)))
            await eventually(lambda: _count(receiver, "open", 3))  # the hook only: slack denies the group
            assert service.events_handled == 6
    slack = [r for r in receiver.requests if r.path == "/slack"]
    assert [r.headers["X-Lagwatch-Notification"] for r in slack] == ["open", "update", "close"]
    assert [r.json()["blocks"][0]["text"]["text"] for r in slack] == [
        ":large_yellow_circle: WARN: billing on local",
        ":red_circle: ERR: billing on local",
        ":white_check_mark: Resolved: billing on local is OK again",
    ]
    assert slack[0].json()["attachments"][0]["blocks"][-1]["elements"][0]["url"] == "https://lw.example/billing"
    hook = [
        (r.headers["X-Lagwatch-Notification"], r.json()["group"], r.json()["status"])
        for r in receiver.requests
        if r.path == "/hook"
    ]
    repeats = [h for h in hook if h[0] == "repeat"]
    assert (
        hook[0] == ("open", "billing", "WARN") and repeats and all(h == ("repeat", "billing", "WARN") for h in repeats)
    )
    assert hook[len(repeats) + 1 :] == [
        ("update", "billing", "ERR"),
        ("close", "billing", "OK"),
        ("open", "other", "ERR"),
    ]
    ids = [r.headers["X-Lagwatch-Event-Id"] for r in receiver.requests if r.path == "/hook"]
    assert len(set(ids)) == len(ids)  # each repeat is its own notification


async def _count(receiver, kind, n):
    return sum(r.headers["X-Lagwatch-Notification"] == kind for r in receiver.requests) >= n


async def test_a_redelivered_event_is_delivered_once(kafka, redis_server, redis):
    kafka.create_topic(STATUS_TOPIC, 1)
    async with Receiver() as receiver:
        config = dataclasses.replace(
            make_config(kafka.bootstrap, redis_server.url, **FAST),
            subscriptions=[SubscriptionConfig(id="hook", url=receiver.url())],
        )
        t = Timeline("billing")
        t.to("OK")
        opened = t.to("ERR", (10,))
        async with running(NotifierService(config, "local", http_port=0)) as service:
            await publish(kafka.bootstrap, opened, opened)  # the evaluator's rare duplicate
            await eventually(lambda: handled(service, 2))
            await receiver.wait_for(1)
            await asyncio.sleep(0.5)
        async with running(NotifierService(config, "local", http_port=0)) as service:
            await publish(kafka.bootstrap, opened)  # and once more, to a restarted notifier
            await eventually(lambda: handled(service, 1))
            await asyncio.sleep(0.5)
    assert len(receiver.requests) == 1 and receiver.requests[0].headers["X-Lagwatch-Event-Id"] == opened["event_id"]


async def test_subscriptions_created_through_the_api_store_are_used_at_once(kafka, redis_server, redis):
    kafka.create_topic(STATUS_TOPIC, 1)
    async with Receiver() as receiver:
        config = make_config(kafka.bootstrap, redis_server.url, **FAST)
        t = Timeline("billing")
        async with running(NotifierService(config, "local", http_port=0)) as service:
            await publish(kafka.bootstrap, t.to("OK"))
            await eventually(lambda: handled(service, 1))  # nobody subscribed yet
            await SubscriptionStore(redis).put(
                SubscriptionConfig(id="late", url=receiver.url(), threshold="ERR", send_close=False), create=True
            )
            await publish(kafka.bootstrap, t.to("WARN", (5,)), t.to("ERR", (50,)), t.to("OK"))
            await eventually(lambda: handled(service, 4))
            await receiver.wait_for(1)
            await asyncio.sleep(0.3)
    assert [(r.headers["X-Lagwatch-Notification"], r.json()["status"]) for r in receiver.requests] == [("open", "ERR")]


def notifier_process(config_path, env):
    lagwatch = Path(sys.executable).parent / "lagwatch"
    return subprocess.Popen(
        [str(lagwatch), "run", "notifier", "--config", str(config_path), "--http-port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


async def test_a_notifier_killed_mid_retry_delivers_once_after_a_restart(kafka, redis_server, redis, tmp_path):
    kafka.create_topic(STATUS_TOPIC, 1)
    async with Receiver(default=500) as receiver:
        config_path = tmp_path / "lagwatch.yaml"
        config_path.write_text(
            json.dumps(
                {
                    "notifier": {
                        "allow-private-targets": True,
                        "backoff-base": 0.1,
                        "backoff-cap": 0.2,
                        "request-timeout": 0.5,
                        "lease": 1.5,
                        "poll-interval": 0.05,
                        "max-attempts": 100,
                    },
                    "subscriptions": [{"id": "hook", "url": receiver.url(), "secret": "s" * 16}],
                }
            )
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAGWATCH")}
        env.update(REDIS_URL=redis_server.url, KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap)
        env.update(LAGWATCH__INGEST__SESSION_TIMEOUT="3")
        t = Timeline("billing")
        t.to("OK")
        opened = t.to("ERR", (10,))
        first = notifier_process(config_path, env)
        try:
            await publish(kafka.bootstrap, opened)
            await receiver.wait_for(3, timeout=40)  # failing, retrying
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
            failed = len(receiver.requests)
            receiver.default = 200
            assert await redis.hlen(keys.OUTBOX_DELIVERIES) == 1  # the delivery survived the crash
            second = notifier_process(config_path, env)
            try:
                await receiver.wait_for(failed + 1, timeout=40)
                await eventually(lambda: outbox_empty(redis))
                await asyncio.sleep(1.0)  # the re-read event (its offset may not be committed) adds nothing
            finally:
                second.send_signal(signal.SIGTERM)
                out, _ = second.communicate(timeout=30)
            assert second.returncode == 0, out
        finally:
            if first.poll() is None:
                first.kill()
    assert len(receiver.requests) == failed + 1  # delivered once, after the failed attempts
    assert {r.headers["X-Lagwatch-Event-Id"] for r in receiver.requests} == {opened["event_id"]}
    assert "s" * 16 not in out and receiver.url() not in out  # secrets and URLs are never logged


async def test_a_bad_subscription_stops_start_up_naming_the_key(tmp_path):
    config_path = tmp_path / "lagwatch.yaml"
    config_path.write_text("subscriptions:\n  - {id: a, url: 'http://169.254.169.254/latest'}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAGWATCH")}
    env.update(KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9", REDIS_URL="redis://127.0.0.1:9/0")
    lagwatch = Path(sys.executable).parent / "lagwatch"
    started = time.monotonic()
    done = subprocess.run(
        [lagwatch, "run", "notifier", "--config", str(config_path)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and time.monotonic() - started < 30
    assert "subscriptions[0].url" in done.stderr and "metadata" in done.stderr


async def health(service, path="/healthz"):
    import aiohttp

    async with aiohttp.ClientSession() as http, http.get(service.health.url + path) as response:
        return response.status, await response.json()


async def test_a_stored_subscription_it_cannot_use_stops_neither_the_others_nor_the_repeats(kafka, redis_server, redis):
    """An older, laxer api stored `send_interval: 1e400` (JSON's infinity): that subscription is ignored, and the
    notifier goes on reading events and sending repeats for the others."""
    kafka.create_topic(STATUS_TOPIC, 1)
    await redis.hset(keys.SUBSCRIPTIONS, "old", '{"id": "old", "url": "http://127.0.0.1:9/", "send_interval": 1e400}')
    async with Receiver() as receiver:
        await SubscriptionStore(redis).put(
            SubscriptionConfig(id="good", url=receiver.url(), send_interval=0.3), create=True
        )
        t = Timeline("billing")
        async with running(NotifierService(make_config(kafka.bootstrap, redis_server.url, **FAST), "local")) as service:
            await publish(kafka.bootstrap, t.to("OK"), t.to("ERR", (10,)))
            await eventually(lambda: _count(receiver, "repeat", 2), timeout=30)
            assert not service.app.crashed
            assert await health(service) == (200, {"service": "notifier", "status": "alive"})
    assert receiver.requests[0].headers["X-Lagwatch-Notification"] == "open"


async def test_healthz_fails_once_the_faust_app_has_crashed(kafka, redis_server, redis):
    """A crashed Faust app stops every agent and the timer while the process (and its health server) lives on:
    /healthz must say so, for the supervisor to restart the process."""
    kafka.create_topic(STATUS_TOPIC, 1)
    async with running(NotifierService(make_config(kafka.bootstrap, redis_server.url, **FAST), "local")) as service:
        await eventually(lambda: _assigned(service))
        assert (await health(service))[0] == 200
        assert await alive_scraped(service) == {"app": 1.0, "dispatcher": 1.0}
        await service.app.crash(RuntimeError("an agent's bug"))
        assert await health(service) == (503, {"service": "notifier", "status": "dead", "dead": ["app"]})
        assert await alive_scraped(service) == {"app": 0.0, "dispatcher": 1.0}  # for Prometheus too


async def alive_scraped(service) -> dict[str, float]:
    """`lagwatch_service_alive` as Prometheus scrapes it from the health port: check -> 1 or 0."""
    import aiohttp
    from prometheus_client.parser import text_string_to_metric_families

    async with aiohttp.ClientSession() as http, http.get(service.health.url + "/metrics") as response:
        text = await response.text()
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == "lagwatch_service_alive"]
    return {s.labels["check"]: s.value for s in family.samples if s.labels["service"] == "notifier"}


async def test_a_notifier_whose_faust_app_crashed_exits_with_an_error_after_the_grace(
    kafka, redis_server, redis, monkeypatch
):
    """Docker's restart policy does not act on /healthz: a notifier whose agents stopped for good must end, or
    it would hold no alert ever again. /healthz says "dead" during the grace, then the service fails."""
    monkeypatch.setattr(service_lifecycle, "DEAD_WORK_GRACE_S", 1.0)
    kafka.create_topic(STATUS_TOPIC, 1)
    service = NotifierService(make_config(kafka.bootstrap, redis_server.url, **FAST), "local")
    task = asyncio.create_task(service.run())
    try:
        await eventually(lambda: _assigned(service))
        await service.app.crash(RuntimeError("an agent's bug"))
        assert (await health(service))[0] == 503
        with pytest.raises(RuntimeError, match="notifier: Faust app crashed"):
            await asyncio.wait_for(task, timeout=30)
    finally:
        service.stopping.set()
        if not task.done():
            await asyncio.wait_for(task, timeout=30)


async def _assigned(service):
    try:
        return (await health(service, "/readyz"))[0] == 200
    except OSError:  # its health server is not listening yet
        return False


async def test_readiness_reports_a_broker_outage_and_the_recovery(kafka, redis_server):
    kafka.create_topic(STATUS_TOPIC, 1)
    async with running(NotifierService(make_config(kafka.bootstrap, redis_server.url, **FAST), "local")) as service:
        await check_readiness_follows_the_brokers(kafka, service)


def _crossing(group, alert, threshold, seq, above, reason=None):
    """A lag-threshold event as the evaluator publishes it (the group far over every threshold, or at risk)."""
    reason = reason or (Reason.LAG if alert == Alert.LAG_SECONDS else Reason.RETENTION)
    return build_event(
        cluster="local",
        group=group,
        crossing=Crossing(threshold, above, reason, alert),
        seq=seq,
        incident_started_at=1_700_000_000_000,
        evaluated_at=1_700_000_000_000 + seq,
        group_status=group_status("local", group, Status.OK, (40,)),
        time_lags={("orders", 0): TimeLag(700.0)},
        retention={("orders", 0): RetentionRisk(200.0)},
    ).encode()


@pytest.mark.parametrize("alert", [Alert.LAG_SECONDS, Alert.DATA_LOSS_RISK])
async def test_a_changed_threshold_still_closes_the_incident_announced(kafka, redis_server, redis, alert):
    """docs/webhooks.md: a subscription whose threshold was changed still hears the end of what it was told —
    whichever order the evaluator publishes the old threshold's close and the new one's open in (an evaluator
    older than this notifier published the open first: group `old`)."""
    option = "lag_seconds_threshold" if alert == Alert.LAG_SECONDS else "retention_risk_threshold"
    store = SubscriptionStore(redis)
    await store.put(SubscriptionConfig(id="pager", url="http://127.0.0.1:9/", **{option: 600}), create=True)
    service = NotifierService(make_config(kafka.bootstrap, redis_server.url, **FAST), "local", http_port=0)
    try:
        for group in ("old", "new"):
            assert await service.handle(_crossing(group, alert, 600.0, 1, True), LAG_EVENTS)
        await store.put(SubscriptionConfig(id="pager", url="http://127.0.0.1:9/", **{option: 300}), create=False)
        for group in ("old", "new"):
            new_open = _crossing(group, alert, 300.0, 1, True)
            old_close = _crossing(group, alert, 600.0, 2, False, Reason.THRESHOLD_REMOVED)
            for raw in [new_open, old_close] if group == "old" else [old_close, new_open]:
                assert await service.handle(raw, LAG_EVENTS)
            assert await service.handle(new_open, LAG_EVENTS)  # redelivered: nothing more
            assert await service.handle(_crossing(group, alert, 300.0, 2, False), LAG_EVENTS)
    finally:
        await service.redis.aclose()
    sent = [json.loads(raw) for raw in (await redis.hgetall(keys.OUTBOX_DELIVERIES)).values()]
    for group in ("old", "new"):
        told = sorted(
            (d["event"]["threshold_seconds"], d["kind"], d["event"]["incident_id"])
            for d in sent
            if d["event"]["group"] == group
        )
        incident = {t: incident_id("local", group, t, 1, alert) for t in (300.0, 600.0)}
        assert told == [
            (300.0, "lag-close", incident[300.0]),
            (300.0, "lag-open", incident[300.0]),
            (600.0, "lag-close", incident[600.0]),
            (600.0, "lag-open", incident[600.0]),
        ], group
        (closed,) = [
            d
            for d in sent
            if d["event"]["group"] == group and d["kind"] == "lag-close" and d["event"]["threshold_seconds"] == 600.0
        ]
        assert closed["notification_id"] == event_id("local", group, 600.0, 2, alert)  # the evaluator's close's
        assert not closed["event"]["above"]
