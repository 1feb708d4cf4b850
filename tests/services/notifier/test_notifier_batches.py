"""Events handled a batch at a time (event_batches.py, read_ahead.py): a group's events keep their order within a
batch, a Redis outage in the middle of one acknowledges nothing and loses nothing, and a flood of events that notify
nobody passes on to the alert behind it."""

import asyncio
import dataclasses

import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client import REGISTRY

from lagwatch.devkit.redis_server import RedisServer
from lagwatch.services.notifier import read_ahead
from lagwatch.services.notifier.event_batches import EventBatch
from lagwatch.services.notifier.events import STATUS_EVENTS
from lagwatch.services.notifier.outbox import Delivery
from lagwatch.services.notifier.service import NotifierService
from lagwatch.shared.events.status_event import encode, record_key
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.config import SubscriptionConfig
from tests.kafka_helpers import FAST_NOTIFIER, eventually, make_config, running
from tests.services.notifier.test_notifier_skipped_events import committed
from tests.services.notifier.test_notifier_support import Receiver, Timeline, handled

STATUS_TOPIC = "lagwatch.status"
FAST = {**FAST_NOTIFIER, "NOTIFIER__REPEAT_CHECK_INTERVAL": "0.1", "NOTIFIER__HTTP_PORT": "0"}
UNREACHABLE = "http://127.0.0.1:9/hook"  # (nothing is delivered where the dispatcher does not run)


def notifier(kafka, redis_url: str, url: str = UNREACHABLE) -> NotifierService:
    config = make_config(kafka.bootstrap, redis_url, **FAST)
    return NotifierService(dataclasses.replace(config, subscriptions=[SubscriptionConfig(id="hook", url=url)]), "local")


def events_counted(outcome: str) -> float:
    return REGISTRY.get_sample_value("lagwatch_notifier_events_total", {"outcome": outcome}) or 0.0


async def outbox(redis) -> list[tuple[str, str]]:
    """(kind, group) of each delivery in the outbox, in the order recorded."""
    deliveries = [Delivery.from_json(raw) for raw in (await redis.hgetall(keys.OUTBOX_DELIVERIES)).values()]
    return [(d.kind, d.event.group) for d in sorted(deliveries, key=lambda d: d.created_at)]


def receiver_saw(receiver: Receiver) -> list[tuple[str, str]]:
    return [(r.headers["X-Lagwatch-Notification"], r.json()["group"]) for r in receiver.requests]


def test_a_batch_puts_a_groups_later_events_in_later_rounds():
    billing, orders = Timeline("billing"), Timeline("orders")
    events = [billing.next("OK"), billing.next("ERR", (9,)), orders.next("OK"), billing.next("OK")]
    batch = EventBatch(events, STATUS_EVENTS)
    rounds = [[(h.event.group, h.event.seq) for h in round_] for round_ in batch.rounds]
    assert rounds == [[("billing", 1), ("orders", 1)], [("billing", 2)], [("billing", 3)]]


async def test_an_open_and_its_close_in_one_batch_are_delivered_open_then_close(kafka, redis_server, redis):
    kafka.create_topic(STATUS_TOPIC, 1)
    billing, orders = Timeline("billing"), Timeline("orders")
    billing.to("OK")
    orders.to("OK")
    batch = [billing.to("ERR", (9,)), orders.to("WARN", (5,)), billing.to("OK")]
    async with Receiver() as receiver, running(notifier(kafka, redis_server.url, receiver.url())) as service:
        assert await service.handle_batch([encode(e) for e in batch])
        await receiver.wait_for(3)
        await asyncio.sleep(0.3)
    assert sorted(receiver_saw(receiver)) == [("close", "billing"), ("open", "billing"), ("open", "orders")]
    assert [kind for kind, group in receiver_saw(receiver) if group == "billing"] == ["open", "close"]
    assert await redis.hlen(keys.notify_state("hook")) == 1  # orders' incident; billing's is over


async def test_a_redis_outage_mid_batch_acknowledges_nothing_and_loses_nothing(tmp_path, kafka):
    """Redis goes away after the batch's first round is recorded: the batch is not done (not acknowledged) while it
    is away, and once it is back the rest is recorded; the first round's events are not handled twice."""
    billing, orders = Timeline("billing"), Timeline("orders")
    billing.to("OK")
    orders.to("OK")
    batch = [billing.to("ERR", (9,)), orders.to("ERR", (9,)), billing.to("OK")]  # billing's close: a second round
    with RedisServer(dir=tmp_path / "redis", appendonly=True) as server:
        server.start()
        service = notifier(kafka, server.url)
        first_read = service.outbox.read_many

        async def away_before_the_second_round(lookups):
            if [lookup.state_field for lookup in lookups] == ["local/billing"]:
                service.outbox.read_many = first_read
                await asyncio.to_thread(server.stop)  # the AOF is flushed: the first round comes back with it
            return await first_read(lookups)

        service.outbox.read_many = away_before_the_second_round
        handled, duplicates = events_counted("handled"), events_counted("duplicate")
        try:
            handling = asyncio.create_task(service.handle_batch([encode(e) for e in batch]))
            await asyncio.sleep(1.5)
            assert not handling.done()  # retrying with backoff: nothing of the batch may be acknowledged
            await asyncio.to_thread(server.start)
            assert await asyncio.wait_for(handling, timeout=20)
            recorded = await outbox(service.redis)
            assert sorted(recorded) == [("close", "billing"), ("open", "billing"), ("open", "orders")]
            assert [kind for kind, group in recorded if group == "billing"] == ["open", "close"]
        finally:
            await service.redis.aclose()
    assert service.events_handled == 3
    assert (events_counted("handled") - handled, events_counted("duplicate") - duplicates) == (3, 0)


async def test_a_notifier_stopping_while_redis_is_away_acknowledges_nothing(tmp_path, kafka):
    with RedisServer(dir=tmp_path / "redis") as server:
        server.start()
        service = notifier(kafka, server.url)
        t = Timeline("billing")
        try:
            await asyncio.to_thread(server.stop)
            handling = asyncio.create_task(service.handle_batch([encode(t.to("OK")), encode(t.to("ERR", (9,)))]))
            await asyncio.sleep(0.5)
            assert not handling.done()
            service.stopping.set()
            assert await asyncio.wait_for(handling, timeout=10) is False
        finally:
            await service.redis.aclose()
    assert service.events_handled == 0


async def test_an_open_behind_a_flood_of_new_groups_is_delivered_and_every_event_acknowledged(
    kafka, redis_server, redis
):
    """New groups' first statuses (NOTFOUND -> OK) notify nobody; the known group's open behind them is delivered,
    and the position committed is past every event."""
    kafka.create_topic(STATUS_TOPIC, 1)
    known = Timeline("known")
    known.to("OK")
    flood = [Timeline(f"new-{i}").to("OK") for i in range(500)]
    async with Receiver() as receiver, running(notifier(kafka, redis_server.url, receiver.url())) as service:
        async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=5) as producer:
            for event in [*flood, known.to("ERR", (9,))]:
                await producer.send(STATUS_TOPIC, encode(event), key=record_key(event["cluster"], event["group"]))
        await receiver.wait_for(1, timeout=30)
        await eventually(lambda: handled(service, 501))
        await eventually(lambda: _committed_is(kafka.bootstrap, 501), timeout=30)
        await asyncio.sleep(0.3)
    assert receiver_saw(receiver) == [("open", "known")]
    assert await redis.hkeys(keys.notify_state("hook")) == [b"local/known"]


async def _committed_is(bootstrap, offset):
    return await committed(bootstrap) == offset


async def _items(items, pause_after=()):
    for item in items:
        yield item
        if item in pause_after:
            await asyncio.sleep(0.05)


async def test_read_ahead_hands_over_what_has_arrived_and_an_item_alone_at_once():
    got = [batch async for batch in read_ahead.batches(_items(range(7), pause_after=(0, 4)), most=3)]
    assert got[0] == [0]  # alone: not held for others
    assert [item for batch in got for item in batch] == list(range(7)) and max(map(len, got)) <= 3


async def test_read_ahead_raises_what_its_source_raises_after_what_came_before():
    async def failing():
        yield 1
        raise ValueError("broken stream")

    got = []
    with pytest.raises(ValueError, match="broken stream"):
        async for batch in read_ahead.batches(failing(), most=10):
            got.append(batch)
    assert got == [[1]]
