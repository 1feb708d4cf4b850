"""Reconciliation after skipped events (services/notifier/reconcile.py) against a real Redis: a skip found twice
is counted once, two notifiers reconciling at once close an incident once (and the close reaches a real HTTP
receiver once), an event older than what a reconciliation set is a duplicate, and a lag incident the evaluator
counts as over is closed with the evaluator's own close. The end-to-end path through
Kafka is in test_notifier_skipped_events.py."""

import asyncio
import dataclasses
import json
import time

from lagwatch.services.notifier.events import LAG_EVENTS
from lagwatch.services.notifier.missed import RECONCILED
from lagwatch.services.notifier.service import NotifierService
from lagwatch.services.notifier.skipped_events import LostPosition, SkipWatch
from lagwatch.shared.events.lag_threshold_event import Crossing, Threshold
from lagwatch.shared.events.lag_threshold_event import build_event as build_lag_event
from lagwatch.shared.events.status_event import encode
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Status
from lagwatch.shared.runtime.config import SubscriptionConfig
from lagwatch.shared.statuses.time_lag import TimeLag
from tests.kafka_helpers import FAST_NOTIFIER, make_config, running
from tests.services.notifier.test_notifier_skipped_events import HOUR_MS, STATUS_TOPIC, evaluated
from tests.services.notifier.test_notifier_support import CLUSTER, Receiver, Timeline, group_status

FAST = {**FAST_NOTIFIER, "NOTIFIER__HTTP_PORT": "0"}
# the partition's log end when the skip was found: the notifiers have read that far
LOST = LostPosition(STATUS_TOPIC, 0, lost=3, log_start=10, log_end=20)


def notifier(kafka, redis_server, url):
    config = dataclasses.replace(
        make_config(kafka.bootstrap, redis_server.url, **FAST), subscriptions=[SubscriptionConfig(id="hook", url=url)]
    )
    service = NotifierService(config, CLUSTER, http_port=0)
    service.read_positions.moved_to(LOST.topic, LOST.partition, LOST.log_end)
    return service


def skip_watch(service):
    return SkipWatch(service.redis, CLUSTER, service.read_positions, start_latest=False)


async def deliveries(redis):
    return [json.loads(raw) for raw in (await redis.hgetall(keys.OUTBOX_DELIVERIES)).values()]


async def test_a_skip_found_again_is_counted_once(kafka, redis_server, redis):
    service = notifier(kafka, redis_server, "http://127.0.0.1:9/hook")
    watch = skip_watch(service)
    assert await watch.record(LOST, partitions=1) == 7
    assert await watch.record(LOST, partitions=1) == 0  # the committed position stayed: found again after a restart
    further = dataclasses.replace(LOST, log_start=15)  # retention went on before it was read: 5 more
    assert await watch.record(further, partitions=1) == 5
    assert await redis.hgetall(keys.NOTIFY_SKIPS) == {b"local/lagwatch.status:0": b"3 15"}
    (due,) = (await redis.hgetall(keys.NOTIFY_RECONCILE)).values()
    assert due.split()[0] == b"20"  # due once read to the log end
    await service.redis.aclose()


async def test_two_notifiers_reconciling_at_once_close_the_incident_once(kafka, redis_server, redis):
    store = StatusStore(redis, expire_group_ms=HOUR_MS)
    billing = Timeline("billing", start_ms=int(time.time() * 1000) - HOUR_MS)
    seen = [billing.to("OK"), billing.to("WARN", (50, 0))]
    await evaluated(store, *seen, billing.to("OK"))  # its close was skipped
    async with Receiver() as receiver:
        first, second = notifier(kafka, redis_server, receiver.url()), notifier(kafka, redis_server, receiver.url())
        for event in seen:
            assert await first.handle(encode(event))
        assert await skip_watch(first).record(LOST, partitions=1) == 7
        for service in (first, second):
            await service.registry.refresh()
        now = int(time.time() * 1000)
        changed = await asyncio.gather(first.reconciler.run_due(now), second.reconciler.run_due(now))
        assert sorted(changed) == [0, 1]  # one recorded it, the other found it recorded
        assert await redis.hlen(keys.NOTIFY_RECONCILE) == 0 and await redis.hlen(keys.notify_state("hook")) == 0
        assert await first.reconciler.run_due(now) == 0  # nothing due any more
        await first.redis.aclose()
        async with running(second):
            await receiver.wait_for(2, timeout=20)
            await asyncio.sleep(0.5)
    assert [(r.headers["X-Lagwatch-Notification"], r.headers.get("X-Lagwatch-Reason")) for r in receiver.requests] == [
        ("open", None),
        ("close", RECONCILED),
    ]


async def test_an_event_older_than_what_a_reconciliation_set_changes_nothing(kafka, redis_server, redis):
    store = StatusStore(redis, expire_group_ms=HOUR_MS)
    billing = Timeline("billing", start_ms=int(time.time() * 1000) - HOUR_MS)
    seen = [billing.to("OK"), billing.to("WARN", (50, 0))]
    closed, reopened = billing.to("OK"), billing.to("ERR", (0, 900))
    await evaluated(store, *seen, closed, reopened)
    service = notifier(kafka, redis_server, "http://127.0.0.1:9/hook")
    for event in seen:
        assert await service.handle(encode(event))
    await skip_watch(service).record(LOST, partitions=1)
    await service.registry.refresh()
    assert await service.reconciler.run_due(int(time.time() * 1000)) == 2  # the close of one, the open of the other
    kinds = sorted((d["kind"], d["event"]["incident_id"], d.get("reason")) for d in await deliveries(redis))
    assert kinds == sorted(
        [
            ("open", seen[1]["incident_id"], None),
            ("close", seen[1]["incident_id"], RECONCILED),
            ("open", reopened["incident_id"], RECONCILED),
        ]
    )
    assert await service.handle(encode(closed))  # a late read of the close it stood for: not the new incident's
    assert await service.handle(encode(reopened))  # and the event the reconciled open stood for: a duplicate
    assert len(await deliveries(redis)) == 3
    (state,) = (await redis.hgetall(keys.notify_state("hook"))).values()
    assert json.loads(state)["incident_id"] == reopened["incident_id"]
    await service.redis.aclose()


def lag_crossing(seq, above):
    """A lag-seconds crossing of 300 s by billing, as the evaluator publishes it."""
    return build_lag_event(
        cluster=CLUSTER,
        group="billing",
        crossing=Crossing(300.0, above),
        seq=seq,
        incident_started_at=1_700_000_000_000,
        evaluated_at=1_700_000_000_000 + seq,
        group_status=group_status(CLUSTER, "billing", Status.OK, (40,)),
        time_lags={("orders", 0): TimeLag(700.0)},
    )


async def test_a_lag_incident_whose_close_was_skipped_is_closed_as_the_evaluator_would(kafka, redis_server, redis):
    config = dataclasses.replace(
        make_config(kafka.bootstrap, redis_server.url, **FAST),
        subscriptions=[SubscriptionConfig(id="hook", url="http://127.0.0.1:9/hook", lag_seconds_threshold=300)],
    )
    service = NotifierService(config, CLUSTER, http_port=0)
    lag_topic = config.evaluator.lag_threshold_topic
    service.read_positions.moved_to(lag_topic, 0, LOST.log_end)
    assert await service.handle(lag_crossing(1, above=True).encode(), LAG_EVENTS)
    # the evaluator has counted the way back under since (its event was skipped): crossings 2, under
    await redis.hset(keys.group_lag_thresholds(CLUSTER, "billing"), Threshold(300.0).key, "2:1700000000000")
    await skip_watch(service).record(dataclasses.replace(LOST, topic=lag_topic), partitions=1)
    await service.registry.refresh()
    assert await service.reconciler.run_due(int(time.time() * 1000)) == 1
    close = [d for d in await deliveries(redis) if d["kind"] == "lag-close"]
    assert [(d["reason"], d["event"]["event_id"]) for d in close] == [(RECONCILED, lag_crossing(2, False).event_id)]
    assert await service.handle(lag_crossing(2, above=False).encode(), LAG_EVENTS)  # read late after all: a duplicate
    assert len(await deliveries(redis)) == 2 and await redis.hlen(keys.notify_state("hook")) == 0
    await service.redis.aclose()
