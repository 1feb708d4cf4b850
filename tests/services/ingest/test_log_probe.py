"""The log probe (services/ingest/log_probe.py) against the Kafka mock, with real transactional producers.

What the mock can show: commit markers (offsets no consumer receives, which leave a read_committed consumer that has
read everything one offset short of the high watermark), explicit record timestamps, unknown topics and
partitions, committed offsets past the log end or below its start, groups (joined or not).

What it cannot: the mock hands aborted records to read_committed consumers and keeps no last stable offset (the
records of an open transaction are fetched too), so "aborted records only up to the log end" and an open transaction
("open-transaction": end of partition short of the high watermark) are not shown here; a real broker skips the
former in the same read that skips the markers.
"""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from lagwatch.services.ingest.log_probe import PROBE_GROUP, LogProbe, ProbeAnswer, ProbeFailure

TRANSACTIONAL = "payments"
PLAIN = "clicks"
HOUR_MS = 3_600_000
TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Written:
    offset: int
    timestamp_ms: int


def write_transactions(
    bootstrap: str, topic: str, partition: int, timestamps: list[list[int]], *, abort_last: bool = False
) -> None:
    """One transaction per list of timestamps, a record for each, from a real transactional producer: committed, but
    the last one aborted with `abort_last`."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"writer-{topic}-{partition}"})
    producer.init_transactions(10)
    for i, transaction in enumerate(timestamps):
        producer.begin_transaction()
        for timestamp in transaction:
            producer.produce(topic, b"paid", partition=partition, timestamp=timestamp)
        if abort_last and i == len(timestamps) - 1:
            producer.abort_transaction(10)
        else:
            producer.commit_transaction(10)


def write_plain(bootstrap: str, topic: str, partition: int, timestamps: list[int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for timestamp in timestamps:
        producer.produce(topic, b"clicked", partition=partition, timestamp=timestamp)
    assert producer.flush(10) == 0


def read_committed(bootstrap: str, topic: str, partition: int) -> list[Written]:
    """Every record a read_committed consumer receives from the partition, as an application would read it."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reference-reader",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    records: list[Written] = []
    deadline = time.monotonic() + 10
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None and message.error().code() == KafkaError._PARTITION_EOF:
                return records
            records.append(Written(message.offset(), message.timestamp()[1]))
    finally:
        consumer.close()
    raise AssertionError(f"{topic}/{partition} not read to its end")


def hours_ago(hours: float, then: int) -> list[int]:
    start = int(time.time() * 1000 - hours * HOUR_MS)
    return [start + i for i in range(then)]


async def transactional_consumers(bootstrap: str) -> tuple[int, int, int]:
    """Three committed transactions written; what a caught-up read_committed consumer commits (last record + 1),
    what one with ten records still to read commits, and the log end (past the last transaction's marker)."""
    records = await asyncio.to_thread(three_transactions, bootstrap)
    return records[-1].offset + 1, records[-10].offset, records[-1].offset + 2


def three_transactions(bootstrap: str, partition: int = 0, hours: float = 5) -> list[Written]:
    """Three committed transactions of 20 records, written `hours` ago; the records as a consumer receives them."""
    stamps = hours_ago(hours, 60)
    write_transactions(bootstrap, TRANSACTIONAL, partition, [stamps[0:20], stamps[20:40], stamps[40:60]])
    return read_committed(bootstrap, TRANSACTIONAL, partition)


async def abort_tail_consumer(bootstrap: str, topic: str) -> tuple[int, int]:
    """A committed transaction, then an aborted one; what a consumer that read everything the mock hands it commits
    (the last record + 1: the mock hands aborted records to read_committed consumers too, a broker does not), and the
    log end, past the abort marker."""
    stamps = hours_ago(5, 30)
    await asyncio.to_thread(write_transactions, bootstrap, topic, 0, [stamps[:20], stamps[20:]], abort_last=True)
    records = await asyncio.to_thread(read_committed, bootstrap, topic, 0)
    return records[-1].offset + 1, records[-1].offset + 2


@pytest.fixture
async def probe(kafka):
    log_probe = LogProbe({"bootstrap.servers": kafka.bootstrap}, timeout_s=TIMEOUT_S)
    yield log_probe
    log_probe.close()


def caught_up_at(result: ProbeAnswer | ProbeFailure, committed: int) -> ProbeAnswer:
    assert isinstance(result, ProbeAnswer), result
    assert result.caught_up and result.readable_end == committed == result.committed, result
    assert result.first_unread_ms is None and result.timestamp_type is None, result
    return result


def behind_at(result: ProbeAnswer | ProbeFailure, first_unread: Written) -> ProbeAnswer:
    assert isinstance(result, ProbeAnswer), result
    assert not result.caught_up, result
    assert (result.readable_end, result.first_unread_ms) == (first_unread.offset, first_unread.timestamp_ms), result
    assert result.timestamp_type == "create", result
    return result


async def test_a_consumer_that_read_every_transaction_is_caught_up_though_the_log_end_lies_past_its_commit(
    kafka, probe
):
    """It commits last record + 1; the commit marker after it keeps the high watermark one further forever
    (Burrow#651): offsets say lag 1, the log says nothing is left to read. Asked twice (one client reused)."""
    kafka.create_topic(TRANSACTIONAL, 1)
    records = three_transactions(kafka.bootstrap)
    assert len(records) == 60
    committed = records[-1].offset + 1
    for _ in range(2):
        [answer] = await probe.probe([(TRANSACTIONAL, 0, committed)])
        caught_up_at(answer, committed)
        assert answer.log_end > committed  # the marker: offsets alone would say lag 1
        assert abs(answer.probed_at - time.time() * 1000) < 10_000


async def test_a_consumer_whose_tail_ends_in_an_abort_marker_is_caught_up(kafka, probe):
    """All that lies past its commit is the aborted transaction's marker. (With a broker, the aborted records before
    it are skipped in the same read: not shown on the mock.)"""
    kafka.create_topic(TRANSACTIONAL, 1)
    committed, log_end = await abort_tail_consumer(kafka.bootstrap, TRANSACTIONAL)
    [result] = await probe.probe([(TRANSACTIONAL, 0, committed)])
    assert caught_up_at(result, committed).log_end == log_end


async def test_a_consumer_ten_records_behind_gets_the_first_unread_record_and_its_exact_age(kafka, probe):
    kafka.create_topic(TRANSACTIONAL, 1)
    records = three_transactions(kafka.bootstrap, hours=5)
    first_unread = records[-10]
    [answer] = await probe.probe([(TRANSACTIONAL, 0, first_unread.offset)])
    behind_at(answer, first_unread)
    assert answer.log_end == records[-1].offset + 2  # the last record and its transaction's marker
    age_hours = (answer.probed_at - answer.first_unread_ms) / HOUR_MS
    assert 4.99 < age_hours < 5.01


async def test_a_plain_partition_is_caught_up_at_its_end_and_behind_from_its_first_unread_record(kafka, probe):
    kafka.create_topic(PLAIN, 1)
    stamps = hours_ago(2, 30)
    write_plain(kafka.bootstrap, PLAIN, 0, stamps)
    at_end, behind = await probe.probe([(PLAIN, 0, 30)]), await probe.probe([(PLAIN, 0, 12)])
    assert caught_up_at(at_end[0], 30).log_end == 30
    assert behind_at(behind[0], Written(12, stamps[12])).log_end == 30


async def test_one_call_probes_partitions_of_several_topics_at_once_each_with_its_own_answer(kafka, probe):
    """Transactional partitions caught up and behind, plain ones at the end, behind and empty, and one partition
    asked from two offsets, all in one call, answered in the order asked."""
    kafka.create_topic(TRANSACTIONAL, 2)
    kafka.create_topic(PLAIN, 3)
    payments = [three_transactions(kafka.bootstrap, partition, hours=partition + 1) for partition in (0, 1)]
    stamps = hours_ago(3, 8)
    write_plain(kafka.bootstrap, PLAIN, 0, stamps)
    write_plain(kafka.bootstrap, PLAIN, 1, stamps)
    asked = [
        (TRANSACTIONAL, 0, payments[0][-1].offset + 1),
        (TRANSACTIONAL, 1, payments[1][25].offset),
        (PLAIN, 0, 8),
        (PLAIN, 1, 3),
        (PLAIN, 2, 0),
        (TRANSACTIONAL, 0, payments[0][0].offset),
    ]
    started = time.monotonic()
    answers = await probe.probe(asked)
    elapsed = time.monotonic() - started
    caught_up_at(answers[0], asked[0][2])
    behind_at(answers[1], payments[1][25])
    caught_up_at(answers[2], 8)
    behind_at(answers[3], Written(3, stamps[3]))
    caught_up_at(answers[4], 0)
    behind_at(answers[5], payments[0][0])
    assert [(a.topic, a.partition, a.committed) for a in answers] == asked
    assert elapsed < TIMEOUT_S  # answered, not timed out


async def test_partitions_that_cannot_be_probed_fail_with_their_reason_beside_the_answers(kafka, probe):
    """Unknown topic, unknown partition, past the log end, below the log start (retention moved it): each a
    failure with its reason, nothing raised, and the partition that can be probed in the same call answered."""
    kafka.create_topic(PLAIN, 2)
    stamps = hours_ago(1, 10)
    write_plain(kafka.bootstrap, PLAIN, 0, stamps)
    write_plain(kafka.bootstrap, PLAIN, 1, stamps)
    kafka.delete_records(PLAIN, 1, 6)
    answers = await probe.probe(
        [("no-such-topic", 0, 0), (PLAIN, 9, 0), (PLAIN, 0, 11), (PLAIN, 1, 2), (PLAIN, 0, 4), (PLAIN, 0, -1)]
    )
    reasons = [a.reason if isinstance(a, ProbeFailure) else "answered" for a in answers]
    assert reasons == [
        "unknown-partition",
        "unknown-partition",
        "out-of-range",
        "out-of-range",
        "answered",
        "invalid-offset",
    ]
    behind_at(answers[4], Written(4, stamps[4]))


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # nothing listens once it is closed


async def test_an_unreachable_cluster_gives_failures_within_the_timeout_without_blocking_the_loop():
    probe = LogProbe({"bootstrap.servers": f"127.0.0.1:{closed_port()}"}, timeout_s=1.0)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        started = time.monotonic()
        failures = await probe.probe([(PLAIN, 0, 5), (PLAIN, 1, 0), (TRANSACTIONAL, 0, 3)])
        elapsed = time.monotonic() - started
    finally:
        ticker.cancel()
        probe.close()
    assert [type(f) for f in failures] == [ProbeFailure] * 3
    assert {f.reason for f in failures} <= {"unreachable", "timeout"}, failures
    assert elapsed < 1.0 + 0.5
    assert ticks > elapsed / 0.01 / 3  # the loop went on while librdkafka waited


def simple_commit(bootstrap: str, group: str, topic: str) -> KafkaError | None:
    """Commit an offset for `group` from a consumer that only assigns: the mock refuses such member-less commits
    (UNKNOWN_MEMBER_ID) to a group any member ever joined, so its success says nobody joined `group`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    except KafkaException as exc:
        return exc.args[0]
    finally:
        consumer.close()
    return None


def committed_offset(bootstrap: str, group: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        [tp] = consumer.committed([TopicPartition(topic, partition)], timeout=10)
        return int(tp.offset)
    finally:
        consumer.close()


def join_group(bootstrap: str, group: str, topic: str) -> None:
    """A member subscribes to `group` and leaves once assigned."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 6000})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 15
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.1)
    consumer.close()


async def test_the_probe_joins_no_group_and_commits_nothing(kafka, probe):
    """The probe's group has no committed offset after probes, and takes a member-less commit afterwards, which
    the mock refuses once a member joined (shown on a group that a subscriber joined: the check can fail)."""
    kafka.create_topic(PLAIN, 2)
    write_plain(kafka.bootstrap, PLAIN, 0, hours_ago(1, 5))
    write_plain(kafka.bootstrap, PLAIN, 1, hours_ago(1, 5))
    for _ in range(2):
        answers = await probe.probe([(PLAIN, 0, 2), (PLAIN, 1, 5)])
        assert all(isinstance(a, ProbeAnswer) for a in answers), answers
    assert committed_offset(kafka.bootstrap, PROBE_GROUP, PLAIN, 0) == OFFSET_INVALID
    assert committed_offset(kafka.bootstrap, PROBE_GROUP, PLAIN, 1) == OFFSET_INVALID
    assert simple_commit(kafka.bootstrap, PROBE_GROUP, PLAIN) is None
    join_group(kafka.bootstrap, "a-subscriber", PLAIN)
    refused = simple_commit(kafka.bootstrap, "a-subscriber", PLAIN)
    assert refused is not None and refused.code() == KafkaError.UNKNOWN_MEMBER_ID, refused


async def test_a_closed_probe_refuses_to_probe(kafka):
    probe = LogProbe({"bootstrap.servers": kafka.bootstrap})
    probe.close()
    with pytest.raises(RuntimeError):
        await probe.probe([(PLAIN, 0, 0)])
