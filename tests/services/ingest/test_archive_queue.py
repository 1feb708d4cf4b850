"""The queue between a batch's store and its commit: positions are committed in batch order, only once archived;
a history topic that stops taking commits stops the commits, not the caller, until a probe gets through.

The history publisher here is a function whose deliveries the test settles by hand (the real publisher against a
broker outage: test_history_outage.py)."""

import asyncio

from confluent_kafka import KafkaError, KafkaException

from lagwatch.services.ingest.archive_queue import ArchiveQueue
from lagwatch.shared.records.history import HistoryMessages
from tests.kafka_helpers import eventually


class Deliveries:
    """A publish function whose calls wait until the test settles them, in any order."""

    def __init__(self) -> None:
        self.calls: list[tuple[HistoryMessages, asyncio.Future[int]]] = []

    async def publish(self, messages: HistoryMessages) -> int:
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.calls.append((messages, done))
        return await done

    def ack(self, i: int) -> None:
        self.calls[i][1].set_result(1)

    def fail(self, i: int) -> None:
        self.calls[i][1].set_exception(KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, "no leader")))


def batch(name: str) -> HistoryMessages:
    messages = HistoryMessages()
    messages.add(b"key", name.encode())
    return messages


async def settled() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_positions_are_committed_in_batch_order_whatever_order_the_acknowledgements_come_in():
    deliveries, committed = Deliveries(), []
    queue = ArchiveQueue("c", deliveries.publish, committed.append)
    tickets = [queue.send(batch(f"b{i}")) for i in range(3)]
    await settled()
    for i, ticket in enumerate(tickets):
        queue.stored(ticket, {0: 10 * (i + 1)})
    deliveries.ack(2)
    deliveries.ack(1)
    await settled()
    assert committed == []  # the first batch is not archived yet: nothing after it moves
    deliveries.ack(0)
    await settled()
    assert committed == [{0: 10}, {0: 20}, {0: 30}]


async def test_a_batch_archived_before_it_is_stored_waits_for_its_store():
    deliveries, committed = Deliveries(), []
    queue = ArchiveQueue("c", deliveries.publish, committed.append)
    ticket = queue.send(batch("b"))
    await settled()
    deliveries.ack(0)
    await settled()
    assert committed == []
    queue.stored(ticket, {3: 7})
    assert committed == [{3: 7}]


async def test_a_failed_delivery_stops_the_commits_until_a_probe_gets_through_then_asks_for_a_rewind():
    deliveries, committed = Deliveries(), []
    queue = ArchiveQueue("c", deliveries.publish, committed.append)
    first, second = queue.send(batch("b0")), queue.send(batch("b1"))
    await settled()
    queue.stored(first, {0: 1})
    queue.stored(second, {0: 2})
    deliveries.ack(0)
    deliveries.fail(1)
    await settled()
    assert committed == [{0: 1}] and queue.broken
    third = queue.send(batch("b2"))  # broken: not sent, never committed
    queue.stored(third, {0: 3})
    assert len(deliveries.calls) == 2
    await eventually(lambda: _true(len(deliveries.calls) == 3))  # the probe: the failed batch again
    assert deliveries.calls[2][0] is deliveries.calls[1][0]
    deliveries.fail(2)
    await eventually(lambda: _true(len(deliveries.calls) == 4), timeout=5)  # and again, after a pause
    deliveries.ack(3)
    await eventually(lambda: _true(queue.rewind_due))
    assert committed == [{0: 1}] and queue.broken
    queue.rewound()  # the worker reads from the committed positions again
    assert not queue.broken and not queue.rewind_due
    ticket = queue.send(batch("b1 again"))
    queue.stored(ticket, {0: 2})
    await settled()
    deliveries.ack(4)
    await settled()
    assert committed == [{0: 1}, {0: 2}]
    await queue.stop()


async def test_the_probe_goes_on_after_librdkafkas_queue_was_full():
    deliveries, committed = Deliveries(), []
    queue = ArchiveQueue("c", deliveries.publish, committed.append)
    queue.send(batch("b0"))
    await settled()
    deliveries.fail(0)
    await eventually(lambda: _true(len(deliveries.calls) == 2))
    deliveries.calls[1][1].set_exception(BufferError("Local: Queue full"))  # not a Kafka error: raised by produce
    await eventually(lambda: _true(len(deliveries.calls) == 3), timeout=5)
    deliveries.ack(2)
    await eventually(lambda: _true(queue.rewind_due))
    await queue.stop()


async def test_a_full_backlog_holds_the_caller_until_the_oldest_delivery_counts_as_stalled():
    deliveries, committed = Deliveries(), []
    queue = ArchiveQueue("c", deliveries.publish, committed.append, limit=2, stall_s=0.3)
    queue.send(batch("b0"))
    queue.send(batch("b1"))
    await settled()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(queue.room(), 5)
    assert queue.broken and 0.2 < loop.time() - started < 3
    await queue.stop()


async def test_admin_mode_cannot_read_again_so_a_probe_that_gets_through_resumes_archiving():
    deliveries, committed = Deliveries(), []
    queue = ArchiveQueue("c", deliveries.publish, committed.append, can_rewind=False)
    ticket = queue.send(batch("b0"))
    queue.stored(ticket, {})
    await settled()
    deliveries.fail(0)
    await settled()
    assert queue.broken
    await eventually(lambda: _true(len(deliveries.calls) == 2))
    deliveries.ack(1)
    await eventually(lambda: _true(not queue.broken))
    assert not queue.rewind_due


async def test_without_history_a_batch_is_committed_when_stored():
    committed: list[dict[int, int]] = []
    queue = ArchiveQueue("c", None, committed.append)
    ticket = queue.send(batch("b0"))
    queue.stored(ticket, {1: 5})
    assert committed == [{1: 5}]


async def _true(value) -> bool:
    return bool(value)
