"""One broker down takes some partitions of the status topic away: the groups whose events go elsewhere are not held
up, the evaluation does not wait for the broker, and the held-back events go out once each when it is back."""

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer

from lagwatch.services.evaluator.evaluation import GroupEvaluator
from lagwatch.services.evaluator.publisher import EventPublisher
from lagwatch.shared.events.status_event import record_key
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, key_on, leaders_spread, make_config
from tests.services.evaluator.test_evaluator import commits
from tests.services.evaluator.test_unsent_events import unsent_seconds

STATUS_TOPIC = "lagwatch.status"
AWAY = 2  # the broker that goes down; it leads partition 1
NOT_HANGING_S = 15  # an evaluation waiting on the broker would not return before it is back (minutes, here)


@pytest.fixture
def brokers(three_brokers):
    """Three brokers, the status topic's partition p led by broker p + 1."""
    leaders_spread(three_brokers, STATUS_TOPIC)
    return three_brokers


def group_on(partition: int, prefix: str) -> str:
    """A group name whose events go to `partition` of the status topic."""
    return key_on(partition, prefix, name=lambda group: record_key(CLUSTER, group))


async def test_a_status_partition_without_its_leader_holds_back_only_its_own_groups(brokers, redis_server, redis):
    config = make_config(brokers.bootstrap, redis_server.url)
    store = WindowStore(redis, config.window())
    statuses = StatusStore(redis, config.window().expire_group_ms)
    held, free = group_on(AWAY - 1, "held"), group_on(0, "free")
    now = int(time.time() * 1000)
    await store.writes.add_broker_offsets(CLUSTER, "orders", [100], sampled_at=now)
    for group in (held, free):
        await store.writes.add_commits(CLUSTER, commits(group, [100], now - 1000), now_ms=now)
    publisher = EventPublisher({"bootstrap_servers": brokers.bootstrap}, STATUS_TOPIC)
    await publisher.start()
    evaluator = GroupEvaluator(CLUSTER, store, statuses, publisher, config.rules())
    try:
        await publisher.publish([])  # the producer learns where the partitions are led
        brokers.set_broker_down(AWAY)
        await asyncio.wait_for(evaluator.evaluate([held, free], now), NOT_HANGING_S)
        held_state, free_state = await statuses.states(CLUSTER, [held, free])
        assert free_state.pending == [] and len(held_state.pending) == 1  # the free group's was acknowledged
        for _ in range(3):  # the evaluator's retries while the broker is away: no wait, no copy queued each time
            await asyncio.wait_for(evaluator.evaluate([held], now), NOT_HANGING_S)
        assert len((await statuses.states(CLUSTER, [held]))[0].pending) == 1
        await asyncio.sleep(1.5)
        await asyncio.wait_for(evaluator.evaluate([held], now), NOT_HANGING_S)
        assert unsent_seconds(CLUSTER) >= 1.5  # said while it lasts, though aiokafka never fails the record
        brokers.set_broker_up(AWAY)

        async def sent() -> bool:
            await evaluator.evaluate([held], now)
            return (await statuses.states(CLUSTER, [held]))[0].pending == []

        await eventually(sent, timeout=60)
        assert unsent_seconds(CLUSTER) == 0.0
    finally:
        await publisher.stop()
    events = await read_all(brokers.bootstrap)
    assert events.count(record_key(CLUSTER, held)) == 1  # once: the retries did not send it again
    assert events.count(record_key(CLUSTER, free)) == 1


async def read_all(bootstrap: str) -> list[bytes]:
    """The keys of every record on the status topic."""
    consumer = AIOKafkaConsumer(STATUS_TOPIC, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        batch = await consumer.getmany(timeout_ms=5000)
        keys = [m.key for messages in batch.values() for m in messages]
        more = await consumer.getmany(timeout_ms=500)
        return keys + [m.key for messages in more.values() for m in messages]
    finally:
        await consumer.stop()


async def test_stopping_does_not_wait_for_a_partition_without_its_leader(brokers):
    publisher = EventPublisher({"bootstrap_servers": brokers.bootstrap}, STATUS_TOPIC)
    await publisher.start()
    await publisher.publish([])  # the producer learns where the partitions are led
    brokers.set_broker_down(AWAY)
    held = group_on(AWAY - 1, "held")
    assert await publisher.publish([(CLUSTER, held, b'{"seq": 1}')]) == set()  # in flight, not acknowledged
    await asyncio.wait_for(publisher.stop(), NOT_HANGING_S)  # the outbox keeps the event for the next evaluator
