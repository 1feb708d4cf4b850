"""A dead-letter topic partition whose leader is away: publishing a dead letter gives up in seconds (the delivery
worker is not held; the dead letter stays in the outbox and is tried again), the retries do not queue copies, and
the dead letter is on the topic once when the leader is back."""

import asyncio

import pytest
from aiokafka.errors import KafkaTimeoutError

from lagwatch.services.notifier.dlq import DeadLetters, read_dead_letters
from tests.kafka_helpers import eventually, key_on, leaders_spread

DLQ = "lagwatch.dlq"
AWAY = 2  # leads partition 1
NOT_HANGING_S = 30  # a publish waiting on the broker would not return before it is back


@pytest.fixture
async def dead_letters(three_brokers):
    leaders_spread(three_brokers, DLQ)
    dlq = DeadLetters({"bootstrap_servers": three_brokers.bootstrap}, DLQ)
    await dlq.start()
    await dlq._producer.partitions_for(DLQ)  # the producer knows the leaders
    yield dlq
    await asyncio.wait_for(dlq.stop(), NOT_HANGING_S)


def dead_letter(delivery_id: str, subscription_id: str) -> dict:
    return {"delivery_id": delivery_id, "subscription_id": subscription_id, "error": "HTTP 500"}


async def test_a_dead_letter_for_a_partition_without_its_leader_waits_in_the_outbox(three_brokers, dead_letters):
    held, free = key_on(AWAY - 1, "sub-held"), key_on(0, "sub-free")
    three_brokers.set_broker_down(AWAY)
    await asyncio.wait_for(dead_letters.publish(dead_letter("d-free", free)), NOT_HANGING_S)  # other partitions take
    for _ in range(2):  # the dispatcher's retries while the leader is away: each gives up, none queues a copy
        with pytest.raises(KafkaTimeoutError):
            await asyncio.wait_for(dead_letters.publish(dead_letter("d-held", held)), NOT_HANGING_S)
    three_brokers.set_broker_up(AWAY)

    async def published() -> bool:
        try:
            await dead_letters.publish(dead_letter("d-held", held))
        except KafkaTimeoutError:
            return False
        return True

    await eventually(published, timeout=60)
    records = await read_dead_letters({"bootstrap_servers": three_brokers.bootstrap}, DLQ)
    assert sorted(r["delivery_id"] for r in records) == ["d-free", "d-held"]  # once each


async def test_stopping_does_not_wait_for_a_dead_letter_partition_without_its_leader(three_brokers, dead_letters):
    three_brokers.set_broker_down(AWAY)
    with pytest.raises(KafkaTimeoutError):
        await dead_letters.publish(dead_letter("d-held", key_on(AWAY - 1, "sub-held")))
    # the fixture's stop is bounded: the dead letter is still in the outbox for whoever runs next
