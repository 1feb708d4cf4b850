"""Silences and `hold-for` end to end: events on the status topic (Kafka mock) -> `lagwatch run notifier` ->
a real HTTP receiver, with silences written where the api writes them (shared/notifications/subscriptions/silences.py,
Redis)."""

import asyncio
import dataclasses
import time

from lagwatch.services.notifier import metrics
from lagwatch.services.notifier.service import NotifierService
from lagwatch.shared.notifications.subscriptions.silences import Matcher, Silence, SilenceStore
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.config import SubscriptionConfig
from tests.kafka_helpers import eventually, make_config, running
from tests.services.notifier.test_notifier_service import FAST, STATUS_TOPIC, publish
from tests.services.notifier.test_notifier_support import Receiver, Timeline, handled


def sent(receiver):
    return [(r.json()["group"], r.headers["X-Lagwatch-Notification"], r.json()["status"]) for r in receiver.requests]


def notifier(kafka, redis_server, receiver, **subscription):
    config = dataclasses.replace(
        make_config(kafka.bootstrap, redis_server.url, **FAST),
        subscriptions=[SubscriptionConfig(id="hook", url=receiver.url(), **subscription)],
    )
    return NotifierService(config, "local", http_port=0)


async def silenced(kafka, redis, group, ends_in=3600.0) -> SilenceStore:
    """The status topic, and a silence `sil-1` of `group` for the next `ends_in` seconds."""
    kafka.create_topic(STATUS_TOPIC, 1)
    store = SilenceStore(redis)
    await store.put(silence(group, ends=time.time() + ends_in))
    return store


def silence(group, *, starts=None, ends, id_="sil-1"):
    now = time.time()
    return Silence(id_, (Matcher("group", group),), starts or now, ends, "deploy", "alice", now)


async def test_a_silenced_incident_notifies_when_the_silence_ends_if_still_open(kafka, redis_server, redis):
    kafka.create_topic(STATUS_TOPIC, 1)
    held_before = metrics.HELD.labels("webhook", "silence")._value.get()
    ends = time.time() + 6.0
    await SilenceStore(redis).put(silence("billing", ends=ends))
    billing, other = Timeline("billing"), Timeline("other")
    async with Receiver() as receiver, running(notifier(kafka, redis_server, receiver)) as service:
        await publish(
            kafka.bootstrap, billing.to("OK"), billing.to("ERR", (50,)), other.to("OK"), other.to("WARN", (5,))
        )
        await receiver.wait_for(1)
        await eventually(lambda: handled(service, 4))
        assert time.time() < ends and sent(receiver) == [("other", "open", "WARN")]  # other is not silenced
        await receiver.wait_for(2, timeout=15)
        assert time.time() >= ends and sent(receiver)[1] == ("billing", "open", "ERR")
    assert metrics.HELD.labels("webhook", "silence")._value.get() == held_before + 1


async def test_an_incident_over_within_the_silence_is_never_told(kafka, redis_server, redis):
    store = await silenced(kafka, redis, "billing")
    t = Timeline("billing")
    async with Receiver() as receiver, running(notifier(kafka, redis_server, receiver)) as service:
        await publish(kafka.bootstrap, t.to("OK"), t.to("ERR", (50,)), t.to("OK"))
        await eventually(lambda: handled(service, 3))
        await store.end("sil-1")
        await asyncio.sleep(1.0)  # the timer has looked at what the silence held: nothing is left
        assert receiver.requests == [] and await redis.zcard(keys.NOTIFY_REPEATS) == 0


async def test_ending_a_silence_early_sends_what_it_held(kafka, redis_server, redis):
    store = await silenced(kafka, redis, "billing")
    t = Timeline("billing")
    async with Receiver() as receiver, running(notifier(kafka, redis_server, receiver)) as service:
        await publish(kafka.bootstrap, t.to("OK"), t.to("WARN", (5,)))
        await eventually(lambda: handled(service, 2))
        await asyncio.sleep(0.5)
        assert receiver.requests == []
        await store.end("sil-1")  # DELETE /api/v1/silences/sil-1
        await receiver.wait_for(1, timeout=10)
    assert sent(receiver) == [("billing", "open", "WARN")]


async def test_a_silence_holds_repeats_but_lets_the_close_through(kafka, redis_server, redis):
    kafka.create_topic(STATUS_TOPIC, 1)
    store = SilenceStore(redis)
    t = Timeline("billing")
    async with Receiver() as receiver, running(notifier(kafka, redis_server, receiver, send_interval=0.3)):
        await publish(kafka.bootstrap, t.to("OK"), t.to("ERR", (50,)))
        await receiver.wait_for(2)  # the open and a repeat
        await store.put(silence("billing", ends=time.time() + 3600))
        await asyncio.sleep(0.5)  # a repeat in flight when the silence began may still land
        count = len(receiver.requests)
        await asyncio.sleep(1.0)
        assert len(receiver.requests) == count  # repeats held
        await publish(kafka.bootstrap, t.to("OK"))
        await eventually(lambda: _last_kind(receiver, "close"))
    assert sent(receiver)[0] == ("billing", "open", "ERR")


async def test_hold_for_drops_a_flap_and_sends_an_incident_that_held(kafka, redis_server, redis):
    kafka.create_topic(STATUS_TOPIC, 1)
    flap, steady = Timeline("flap"), Timeline("steady")
    held_before = metrics.HELD.labels("webhook", "hold_for")._value.get()
    async with Receiver() as receiver, running(notifier(kafka, redis_server, receiver, hold_for=1.0)) as service:
        await publish(kafka.bootstrap, flap.to("OK"), flap.to("WARN", (5,)), steady.to("OK"), steady.to("WARN", (5,)))
        await eventually(lambda: handled(service, 4))
        started = time.monotonic()
        await publish(kafka.bootstrap, flap.to("OK"))  # back to OK within hold-for: never announced, no close
        await receiver.wait_for(1, timeout=10)
        assert time.monotonic() - started > 0.5
        await asyncio.sleep(1.2)
    assert sent(receiver) == [("steady", "open", "WARN")]
    assert metrics.HELD.labels("webhook", "hold_for")._value.get() == held_before + 2


async def _last_kind(receiver, kind):
    return receiver.requests and receiver.requests[-1].headers["X-Lagwatch-Notification"] == kind


async def test_a_silence_ended_while_the_notifier_was_down_releases_what_it_held(kafka, redis_server, redis):
    store = await silenced(kafka, redis, "billing")
    t = Timeline("billing")
    async with Receiver() as receiver:
        async with running(notifier(kafka, redis_server, receiver)) as service:
            await publish(kafka.bootstrap, t.to("OK"), t.to("ERR", (50,)))
            await eventually(lambda: handled(service, 2))
        assert receiver.requests == []
        await store.end("sil-1")
        async with running(notifier(kafka, redis_server, receiver)):  # what was held is in Redis
            await receiver.wait_for(1, timeout=15)
    assert sent(receiver) == [("billing", "open", "ERR")]


async def test_a_silence_ended_just_before_an_event_still_releases_what_it_held(kafka, redis_server, redis):
    """The event reloads the silences first; the timer must still look at what they held."""
    store = await silenced(kafka, redis, "billing")
    billing, other = Timeline("billing"), Timeline("other")
    async with Receiver() as receiver, running(notifier(kafka, redis_server, receiver)) as service:
        await publish(kafka.bootstrap, billing.to("OK"), billing.to("ERR", (50,)))
        await eventually(lambda: handled(service, 2))
        await store.end("sil-1")
        await publish(kafka.bootstrap, other.to("OK"))
        await receiver.wait_for(1, timeout=10)
    assert sent(receiver) == [("billing", "open", "ERR")]
