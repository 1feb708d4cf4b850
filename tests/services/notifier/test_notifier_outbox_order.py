"""One incident's notifications to one subscription go out in the order they were recorded (outbox.py, the chains
of scripts.py): a close never overtakes its open, whether the open is retried or both are claimed in one batch.
Other incidents and other subscriptions do not wait for each other."""

import json

from lagwatch.services.notifier.outbox import APPLIED, Delivery, Outbox, RecordRequest, delivery_id, group_field
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from tests.kafka_helpers import eventually
from tests.services.notifier.test_notifier_delivery import config_for, dispatching
from tests.services.notifier.test_notifier_support import Receiver, Timeline, typed

ANNOUNCED = '{"incident": "i1"}'


async def record(outbox, event_id, kind, *, sub="hook", group="billing", before="", after=ANNOUNCED, event=None):
    d = Delivery(delivery_id(event_id, sub), sub, kind, typed(event or {"event_id": event_id}), event_id, now_ms())
    outcome = await outbox.record(
        RecordRequest(
            subscription_id=sub,
            event_id=event_id,
            state_field=group_field("local", group),
            expected_state=before,
            new_state=after,
            delivery=d,
            repeat_at=None,
        )
    )
    assert outcome == APPLIED
    return d


async def claimed_ids(outbox):
    deliveries, _ = await outbox.claim(10)
    return [d.id for d in deliveries]


async def test_a_close_recorded_behind_its_open_waits_for_it_even_in_one_claim(redis):
    outbox = Outbox(redis, lease_ms=5000, seen_ttl_ms=60_000)
    opened = await record(outbox, "e1", "open")
    closed = await record(outbox, "e2", "close", before=ANNOUNCED, after="")
    other_group = await record(outbox, "e3", "open", group="payments")
    other_sub = await record(outbox, "e1", "open", sub="pager")
    assert set(await claimed_ids(outbox)) == {opened.id, other_group.id, other_sub.id}  # not the close beside them
    assert await claimed_ids(outbox) == []
    await outbox.finish(opened.id)
    assert await claimed_ids(outbox) == [closed.id]  # due at once, not after the wait
    await outbox.finish(closed.id)
    for d in (other_group, other_sub):
        await outbox.finish(d.id)
    assert await redis.zcard(keys.OUTBOX_ORDER) == 0 and await redis.hlen(keys.OUTBOX_CHAIN_OF) == 0


async def test_a_retried_open_still_goes_before_its_close(redis):
    outbox = Outbox(redis, lease_ms=5000, seen_ttl_ms=60_000)
    opened = await record(outbox, "e1", "open")
    assert await claimed_ids(outbox) == [opened.id]
    closed = await record(outbox, "e2", "close", before=ANNOUNCED, after="")
    await outbox.reschedule(opened, now_ms() + 300)  # the receiver answered 500: retried later
    assert await claimed_ids(outbox) == []  # the close is due, but behind the open
    await eventually(lambda: claimed_ids(outbox))  # the open, at its retry time
    await outbox.finish(opened.id)
    assert await claimed_ids(outbox) == [closed.id]


async def test_a_delivery_gone_from_the_outbox_does_not_hold_its_chain_back(redis):
    """An entry whose delivery was removed some other way (by hand, an older notifier) is skipped, not waited on."""
    outbox = Outbox(redis, lease_ms=5000, seen_ttl_ms=60_000)
    opened = await record(outbox, "e1", "open")
    closed = await record(outbox, "e2", "close", before=ANNOUNCED, after="")
    await redis.hdel(keys.OUTBOX_DELIVERIES, opened.id)
    await redis.zrem(keys.OUTBOX_DUE, opened.id)
    assert await claimed_ids(outbox) == [closed.id]


async def test_a_receiver_that_fails_the_open_once_still_hears_open_then_close(redis_server, redis, kafka):
    """End to end through the dispatcher: the open gets a 500, the close is recorded meanwhile; the receiver's
    last word on the incident is the close."""
    timeline = Timeline("billing")
    timeline.to("OK")
    opening = timeline.to("ERR", (500, 0))
    closing = timeline.to("OK")
    async with Receiver(script=[500]) as receiver:
        config = config_for(kafka, redis_server, [{"id": "hook", "url": receiver.url()}])
        async with dispatching(config) as (outbox, _):
            await record(outbox, opening["event_id"], "open", event=opening)
            await record(outbox, closing["event_id"], "close", before=ANNOUNCED, after="", event=closing)
            await receiver.wait_for(3)
    kinds = [(json.loads(r.body)["event_id"], r.headers["X-Lagwatch-Notification"]) for r in receiver.requests]
    assert kinds == [
        (opening["event_id"], "open"),  # the 500
        (opening["event_id"], "open"),
        (closing["event_id"], "close"),
    ]
