"""The notifier's repeat timer against a real Redis: one unreadable incident state (a manual edit, a version
downgrade) must not stop the repeats and held releases of every other subscription."""

import dataclasses
import json

from lagwatch.services.notifier.outbox import Delivery, group_field, repeat_member
from lagwatch.services.notifier.service import NotifierService
from lagwatch.shared.notifications.subscriptions.store import SubscriptionStore
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.config import SubscriptionConfig
from tests.kafka_helpers import FAST_NOTIFIER, make_config
from tests.services.notifier.test_notifier_support import Timeline

FAR = 10**13  # a "now" by which every repeat is due


async def test_an_unreadable_incident_state_does_not_stop_the_other_repeats(redis_server, redis):
    subscriptions = [
        SubscriptionConfig(id=sub_id, url=f"http://127.0.0.1:9/{sub_id}", send_interval=1) for sub_id in ("a", "b")
    ]
    config = dataclasses.replace(
        make_config("127.0.0.1:9", redis_server.url, **FAST_NOTIFIER), subscriptions=subscriptions
    )
    service = NotifierService(config, "local", http_port=0)
    try:
        t = Timeline("billing")
        t.to("OK")
        assert await service.handle(json.dumps(t.to("ERR", (5,))).encode())  # both announced: two opens
        for raw in (await redis.hgetall(keys.OUTBOX_DELIVERIES)).values():
            if (delivery := Delivery.from_json(raw)).subscription_id == "b":
                await service.outbox.finish(delivery.id)  # b's receiver took its open: b is due a repeat
        field = group_field("local", "billing")
        await redis.hset(keys.notify_state("a"), field, '{"status": "ERR"}')  # a's state no longer reads
        await redis.zadd(keys.NOTIFY_REPEATS, {repeat_member("a", field): 1})  # and is due first
        for _ in range(2):  # (every tick alike)
            await service.repeat_once(now=FAR)
    finally:
        await service.dead_letters.stop()
        await service.redis.aclose()
    kinds = sorted(
        (d.subscription_id, d.kind)
        for d in map(Delivery.from_json, (await redis.hgetall(keys.OUTBOX_DELIVERIES)).values())
    )
    assert kinds == [("a", "open"), ("b", "repeat")]
    assert await redis.zscore(keys.NOTIFY_REPEATS, repeat_member("a", field)) is None  # looked at no more


async def test_a_state_that_is_not_json_does_not_fail_the_recheck_of_held_notifications(redis_server, redis):
    subscriptions = [SubscriptionConfig(id="a", url="http://127.0.0.1:9/a", send_interval=1)]
    config = dataclasses.replace(
        make_config("127.0.0.1:9", redis_server.url, **FAST_NOTIFIER), subscriptions=subscriptions
    )
    service = NotifierService(config, "local", http_port=0)
    try:
        field = group_field("local", "billing")
        await redis.hset(keys.notify_state("a"), field, "not json")
        await redis.zadd(keys.NOTIFY_REPEATS, {repeat_member("a", field): FAR})  # due later: the recheck reads it
        await service.repeats.recheck_held(now=1)
        assert await redis.zscore(keys.NOTIFY_REPEATS, repeat_member("a", field)) == FAR  # not made due
    finally:
        await service.dead_letters.stop()
        await service.redis.aclose()


async def test_repeats_do_not_pile_up_behind_a_notification_its_receiver_has_not_taken(redis_server, redis):
    # the receiver down for an hour at send-interval 60 s would otherwise get ~60 "still" messages at once
    subscriptions = [SubscriptionConfig(id="a", url="http://127.0.0.1:9/a", send_interval=60)]
    config = dataclasses.replace(
        make_config("127.0.0.1:9", redis_server.url, **FAST_NOTIFIER), subscriptions=subscriptions
    )
    service = NotifierService(config, "local", http_port=0)
    member = repeat_member("a", group_field("local", "billing"))

    async def kinds():
        return sorted(d.kind for d in map(Delivery.from_json, (await redis.hgetall(keys.OUTBOX_DELIVERIES)).values()))

    try:
        t = Timeline("billing")
        t.to("OK")
        assert await service.handle(json.dumps(t.to("ERR", (5,))).encode())  # the open, not delivered (no sender)
        for _ in range(5):  # five repeat slots pass while the open waits
            due = int(await redis.zscore(keys.NOTIFY_REPEATS, member))
            assert await service.repeat_once(now=due) == 0
            assert int(await redis.zscore(keys.NOTIFY_REPEATS, member)) > due  # the schedule still moves on
        assert await kinds() == ["open"]
        (opened,) = await redis.hkeys(keys.OUTBOX_DELIVERIES)
        await service.outbox.finish(opened.decode())  # the receiver took it
        assert await service.repeat_once(now=int(await redis.zscore(keys.NOTIFY_REPEATS, member))) == 1
        assert await kinds() == ["repeat"]
    finally:
        await service.dead_letters.stop()
        await service.redis.aclose()


async def test_a_changed_send_interval_reaches_the_incidents_already_going_on(redis_server, redis):
    store = SubscriptionStore(redis)
    await store.put(SubscriptionConfig(id="a", url="http://127.0.0.1:9/a"), create=True)  # no repeats
    service = NotifierService(make_config("127.0.0.1:9", redis_server.url, **FAST_NOTIFIER), "local", http_port=0)
    member = repeat_member("a", group_field("local", "billing"))
    try:
        await service.repeat_once(now=1_000)  # the subscriptions as first seen
        t = Timeline("billing")
        t.to("OK")
        assert await service.handle(json.dumps(t.to("ERR", (5,))).encode())
        assert await redis.zscore(keys.NOTIFY_REPEATS, member) is None
        await store.put(SubscriptionConfig(id="a", url="http://127.0.0.1:9/a", send_interval=60), create=False)
        await service.repeat_once(now=2_000)
        assert await redis.zscore(keys.NOTIFY_REPEATS, member) == 62_000  # from the change on, not the next event
        await store.put(SubscriptionConfig(id="a", url="http://127.0.0.1:9/a", send_interval=30), create=False)
        await service.repeat_once(now=3_000)
        assert await redis.zscore(keys.NOTIFY_REPEATS, member) == 33_000  # a shorter one: sooner
    finally:
        await service.dead_letters.stop()
        await service.redis.aclose()
