"""The ingest's history publisher on the Kafka mock: a batch's commits arrive complete and each group's in order in
one partition, joined into one message per history partition (a message costs a delivery report, and
confluent-kafka takes the GIL for each)."""

from __future__ import annotations

import asyncio
import collections

from confluent_kafka import Consumer, TopicPartition

from lagwatch.services.ingest.history_publisher import HistoryPublisher
from lagwatch.services.ingest.pending_deletions import PendingDeletions
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import ProbedLog
from lagwatch.shared.records.history import (
    KIND_PROBE,
    MESSAGE_BYTES,
    HistoryMessages,
    commits_key,
    decode,
    records_of,
    topic_deleted_record,
)
from lagwatch.shared.runtime.partitioner import partition_for
from tests.kafka_helpers import eventually
from tests.services.ingest.conftest import AWAY

TOPIC = "lagwatch.history"
T = 1_767_225_600_000


async def started(kafka, partitions: int) -> HistoryPublisher:
    kafka.create_topic(TOPIC, partitions)
    publisher = HistoryPublisher("prod", {"bootstrap.servers": kafka.bootstrap}, TOPIC)
    await publisher.start()

    async def count_known() -> bool:  # read in the background: until then messages go keyed, unjoined
        return publisher.partitions == partitions

    await eventually(count_known)
    return publisher


def read_all(bootstrap: str, partitions: int) -> list[tuple[int, bytes | None, bytes]]:
    """Every message of the topic: (partition, key, value), in each partition's order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    out, idle = [], 0
    while idle < 5:
        message = consumer.poll(0.2)
        if message is None or message.error():
            idle += 1
            continue
        out.append((message.partition(), message.key(), message.value()))
    consumer.close()
    return out


async def test_a_batchs_commits_arrive_joined_per_history_partition_with_each_group_in_order_in_one(kafka):
    publisher = await started(kafka, 3)
    commits, sent = HistoryMessages(), []
    for round_ in range(2):  # a group's second commit comes after every group's first, as in a real batch
        for offsets_partition in range(10):
            for n in range(3):
                group = f"g{offsets_partition}-{n}"
                order = len(sent)
                commits.add_commit("prod", offsets_partition, group, "t", 0, 100 + round_, T, order, T)
                sent.append((offsets_partition, group, order))
    commits.close()

    messages = await publisher.publish_commits(commits)
    await publisher.stop()

    read = await asyncio.to_thread(read_all, kafka.bootstrap, 3)
    assert messages == len(read) <= 3 < len(commits.messages)  # 20 messages of the pass, one per history partition
    assert all(key is None for _, key, _ in read)
    by_group = collections.defaultdict(list)
    for partition, _, value in read:
        for line in records_of(value):
            record = decode(line)
            by_group[record.group].append((partition, record.order, record.offset))
    assert sorted(order for records in by_group.values() for _, order, _ in records) == list(range(len(sent)))
    for offsets_partition, group, _ in sent:
        partitions = {partition for partition, _, _ in by_group[group]}
        assert partitions == {partition_for(commits_key("prod", offsets_partition), 3)}  # where its key goes
        assert [offset for _, _, offset in by_group[group]] == [100, 101]  # in order


async def test_a_joined_message_takes_no_more_records_once_past_its_size(kafka):
    publisher = await started(kafka, 1)
    commits = HistoryMessages()
    count = 3 * MESSAGE_BYTES // 150  # records of ~190 bytes: four or five messages' worth
    for order in range(count):
        commits.add_commit("prod", order % 7, f"g{order % 7}", "t", 0, order, T, order, T)
    commits.close()

    messages = await publisher.publish_commits(commits)
    await publisher.stop()

    read = await asyncio.to_thread(read_all, kafka.bootstrap, 1)
    assert messages == len(read) >= 4
    assert all(len(value) <= MESSAGE_BYTES + 300 for _, _, value in read)
    assert [decode(line).order for _, _, value in read for line in records_of(value)] == list(range(count))


async def test_the_log_probes_answers_arrive_as_probe_records_keyed_by_topic_both_of_a_partition(kafka):
    """A partition may have two answers (groups at different offsets: one caught up, one with a record unread)."""
    publisher = await started(kafka, 3)
    answers = [
        (("payments", 0), ProbedLog(62, 63, None, None, T)),
        (("payments", 0), ProbedLog(50, 63, 50, T - 60_000, T)),
        (("orders", 2), ProbedLog(7, 9, None, None, T + 1)),
    ]

    publisher.publish_probes(answers)
    await publisher.stop()

    read = await asyncio.to_thread(read_all, kafka.bootstrap, 3)
    records = [(key, decode(line)) for _, key, value in read for line in records_of(value)]
    assert sorted((key, r.kind, r.topic, r.partition, r.group) for key, r in records) == [
        (b"prod/orders", KIND_PROBE, "orders", 2, None),
        (b"prod/payments", KIND_PROBE, "payments", 0, None),
        (b"prod/payments", KIND_PROBE, "payments", 0, None),
    ]
    got = [
        ((r.topic, r.partition), ProbedLog(r.offset, r.log_end, r.unread_from, r.unread_ms, r.observed_at))
        for _, r in records
    ]
    assert sorted(got) == sorted(answers)


async def test_a_topic_deletion_the_history_topic_did_not_take_is_sent_again_until_it_does(
    one_broker_apart, monkeypatch
):
    """The history topic's broker is away for longer than a delivery may take: the deletion fails, and goes with
    the next samples, until the topic takes it (it was best effort: lost, and the replay kept the topic's
    partitions for good)."""
    from lagwatch.services.ingest import history_publisher

    monkeypatch.setattr(history_publisher, "DELIVERY_TIMEOUT_S", 1.0)
    publisher = HistoryPublisher("prod", {"bootstrap.servers": one_broker_apart.bootstrap}, TOPIC)
    await publisher.start()
    one_broker_apart.set_broker_down(AWAY)
    await publisher.publish_deletions(["orders"], T, "billing")
    await asyncio.sleep(2.5)  # its delivery has failed by now
    await publisher.publish_samples({"orders": {0: 5}}, T + 1)  # takes in the failure, sends the deletion again
    one_broker_apart.set_broker_up(AWAY)

    async def deleted() -> list:
        await publisher.publish_samples({}, T + 2)
        read = await asyncio.to_thread(read_all, one_broker_apart.bootstrap, 3)
        return [r for _, _, v in read for r in map(decode, records_of(v)) if r.kind == "topic-deleted"]

    (record,) = await eventually(deleted, timeout=30, interval=1.0)
    await publisher.stop()
    assert (record.topic, record.group, record.observed_at) == ("orders", "billing", T)


async def archived_and_struck(publisher: HistoryPublisher, pending: PendingDeletions, bootstrap: str) -> list:
    """The deletions on the history topic, once Redis keeps none (`publisher` polls as the log-end poller does: it
    strikes what the topic took since its last poll)."""

    async def done() -> list:
        await publisher.publish_samples({}, T + 2)
        read = await asyncio.to_thread(read_all, bootstrap, 3)
        deleted = [r for _, _, v in read for r in map(decode, records_of(v)) if r.kind == "topic-deleted"]
        return not await pending.load() and deleted

    return await eventually(done, timeout=30, interval=1.0)


async def test_a_topic_deletion_not_archived_at_a_stop_is_sent_by_the_next_start(one_broker_apart, redis, monkeypatch):
    """The history topic's broker is away when a topic is deleted, and the worker stops before it is back: the
    deletion waits in Redis (it was lost with the worker's memory), the next start sends it, and once the history
    topic took it Redis no longer keeps it."""
    from lagwatch.services.ingest import history_publisher

    monkeypatch.setattr(history_publisher, "DELIVERY_TIMEOUT_S", 1.0)
    monkeypatch.setattr(history_publisher, "STOP_FLUSH_S", 0.5)
    pending = PendingDeletions(redis, "prod")
    config = {"bootstrap.servers": one_broker_apart.bootstrap}
    first = HistoryPublisher("prod", config, TOPIC, pending)
    await first.start()
    one_broker_apart.set_broker_down(AWAY)
    await first.publish_deletions(["orders"], T, "billing")
    await first.stop()
    assert [(r.topic, r.group, r.observed_at) for r in await pending.load()] == [("orders", "billing", T)]

    one_broker_apart.set_broker_up(AWAY)
    second = HistoryPublisher("prod", config, TOPIC, pending)
    await second.start()

    (record,) = await archived_and_struck(second, pending, one_broker_apart.bootstrap)
    await second.stop()
    assert (record.topic, record.group, record.observed_at) == ("orders", "billing", T)


async def test_deletions_a_worker_left_are_taken_on_by_the_log_end_pollers_worker(one_broker_apart, redis, monkeypatch):
    """A worker stops for good with a deletion the history topic did not take; the worker polling log ends, started
    before it, takes it on at its next look (every ADOPT_EVERY_S) and sends it, once the topic takes it again."""
    from lagwatch.services.ingest import history_publisher

    monkeypatch.setattr(history_publisher, "DELIVERY_TIMEOUT_S", 1.0)
    monkeypatch.setattr(history_publisher, "STOP_FLUSH_S", 0.5)
    monkeypatch.setattr(history_publisher, "ADOPT_EVERY_S", 0.0)
    pending = PendingDeletions(redis, "prod")
    config = {"bootstrap.servers": one_broker_apart.bootstrap}
    poller, gone = HistoryPublisher("prod", config, TOPIC, pending), HistoryPublisher("prod", config, TOPIC, pending)
    await poller.start()
    await gone.start()
    one_broker_apart.set_broker_down(AWAY)
    await gone.publish_deletions(["orders"], T, "billing")
    await gone.stop()
    one_broker_apart.set_broker_up(AWAY)

    (record,) = await archived_and_struck(poller, pending, one_broker_apart.bootstrap)
    await poller.stop()
    assert (record.topic, record.group, record.observed_at) == ("orders", "billing", T)


async def test_kept_deletions_load_in_the_order_they_happened_and_what_is_not_a_deletion_is_struck(redis):
    pending = PendingDeletions(redis, "prod")
    await pending.add([topic_deleted_record("prod", "b", T + 1, "billing")])
    await pending.add([topic_deleted_record("prod", "a", T)])
    key = keys.history_deletions("prod")
    await redis.hset(key, mapping={"not json": "1", commit_record_json(): "2"})

    assert [(r.topic, r.group) for r in await pending.load()] == [("a", None), ("b", "billing")]
    assert len(await redis.hgetall(key)) == 2  # the unreadable two struck
    await pending.strike([topic_deleted_record("prod", "a", T)])
    assert [r.topic for r in await pending.load()] == ["b"]


def commit_record_json() -> str:
    commits = HistoryMessages()
    commits.add_commit("prod", 0, "g", "t", 0, 1, T, 1, T)
    commits.close()
    return records_of(commits.messages[0][1])[0].decode()
