"""A notifier started while Kafka's brokers are down still sends what its Redis outbox holds; a delivery that fails
for good meanwhile waits in the outbox until its dead letter can be published, once Kafka is back."""

import asyncio
import dataclasses
import json

from lagwatch.services.notifier.dlq import read_dead_letters
from lagwatch.services.notifier.service import NotifierService
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.config import SubscriptionConfig
from tests.kafka_helpers import FAST_NOTIFIER, eventually, make_config, running
from tests.services.notifier.test_notifier_delivery import DLQ, enqueue, open_event
from tests.services.notifier.test_notifier_support import Receiver, outbox_empty

STATUS_TOPIC = "lagwatch.status"


async def test_the_outbox_is_delivered_while_kafka_is_down_and_dead_letters_wait_for_it(kafka, redis_server, redis):
    kafka.create_topic(STATUS_TOPIC, 1)
    kafka.create_topic(DLQ, 1)
    async with Receiver() as good, Receiver(default=400) as bad:
        config = dataclasses.replace(
            make_config(kafka.bootstrap, redis_server.url, **FAST_NOTIFIER, NOTIFIER__HTTP_PORT="0"),
            subscriptions=[SubscriptionConfig(id="good", url=good.url()), SubscriptionConfig(id="bad", url=bad.url())],
        )
        service = NotifierService(config, "local", http_port=0)
        opened = open_event()
        await enqueue(service.outbox, opened, "good")  # left by an earlier run
        refused = await enqueue(service.outbox, opened, "bad")
        await asyncio.to_thread(kafka.set_broker_down)
        try:
            async with running(service):
                await good.wait_for(1, timeout=20)  # from Redis alone
                await bad.wait_for(1, timeout=20)  # a 400: for good, but its dead letter cannot be published yet
                await eventually(lambda: _marked_dead(redis, refused.id))
                assert await redis.hkeys(keys.OUTBOX_DELIVERIES) == [refused.id.encode()]
                await asyncio.to_thread(kafka.set_broker_up)
                await eventually(lambda: outbox_empty(redis), timeout=60)
        finally:
            await asyncio.to_thread(kafka.set_broker_up)
    (letter,) = await read_dead_letters({"bootstrap_servers": kafka.bootstrap}, DLQ)
    assert (letter["delivery_id"], letter["status_code"]) == (refused.id, 400)
    assert len(good.requests) == 1 and len(bad.requests) == 1  # the dead letter was not sent again


async def _marked_dead(redis, delivery_id):
    raw = await redis.hget(keys.OUTBOX_DELIVERIES, delivery_id)
    return raw is not None and "dead" in json.loads(raw).get("extra", {})
