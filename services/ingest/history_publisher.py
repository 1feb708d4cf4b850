"""The ingest's history writer: every decoded commit, every log-end and log-start sample and the log probe's answers, as
`shared/records/history.py` records, to the history topic (`history.topic`, when `history.enabled`), for the archiver
and the Spark replay.

Commits are durable: `publish_commits` returns once Kafka acknowledged them all (acks=all), else raises, and the
offsets-topic position waits for it (`archive_queue.py`). Log-end samples are best effort: a lost one leaves a gap of
one poll, which the interpolation of lag in seconds bridges; so are the probe's answers (one lost: the replay judges
the partition by its offsets until the next). Topic deletions are sent again until the history topic takes them, and
kept in Redis meanwhile (`pending_deletions.py`).

Each message costs a delivery report (confluent-kafka takes the GIL for it), so a batch's commits bound for one
history partition (murmur2 of their keys, as Kafka's producers place keys: a group's records stay in order) are
joined into one message, written on this publisher's thread (`_joined`); until the topic's partition count is known
they go keyed as the pass wrote them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from redis.exceptions import RedisError

from lagwatch.services.ingest.pending_deletions import PendingDeletions
from lagwatch.shared.protocol.types import ProbedLog
from lagwatch.shared.records.history import (
    KIND_BROKER,
    MESSAGE_BYTES,
    HistoryMessages,
    HistoryRecord,
    broker_records,
    probe_record,
    topic_deleted_record,
)
from lagwatch.shared.runtime.partitioner import ANY_PARTITION, PartitionCache, PartitionCount, partition_for

log = logging.getLogger(__name__)
DELIVERY_TIMEOUT_S = 30.0
# a stop waits this long for what is queued: past the worker's hand-over (archive_queue.py) only samples and
# commits whose positions were not committed are left (read again), and a broker away must not hold the stop
STOP_FLUSH_S = 5.0
FLUSH_SLICE_S = 0.5  # a flush waits in slices, so that a stop does not queue behind one waiting for a broker away
# the log-end poller's worker takes on, this often, the deletions kept in Redis that no worker sends (a worker
# stopped for good left them)
ADOPT_EVERY_S = 300.0
Outgoing = list[tuple[bytes | None, bytes, int]]  # (key, value, partition) of each message to send


class HistoryPublisher:
    def __init__(
        self, cluster: str, kafka_config: dict[str, Any], topic: str, pending: PendingDeletions | None = None
    ) -> None:
        """`pending`: where topic deletions wait until the history topic took them (None: in memory only)."""
        self.cluster = cluster
        self.topic = topic
        self._failed = 0  # deliveries that failed so far (librdkafka reports only those)
        self._last_error: KafkaError | None = None
        self._config = {
            **kafka_config,
            "acks": "all",
            "linger.ms": 20,
            "compression.type": "lz4",  # far cheaper in CPU per record than gzip (and aiokafka reads it)
            "partitioner": "murmur2_random",
            "delivery.report.only.error": True,
            "message.timeout.ms": int(DELIVERY_TIMEOUT_S * 1000),
            "on_delivery": self._delivered,
        }
        self._producer: Producer | None = None
        self._closing = False
        self._deletions: list[HistoryRecord] = []  # topic deletions to send (again: their delivery failed)
        self._pending = pending
        self._unconfirmed: dict[bytes, HistoryRecord] = {}  # deletions sent, kept in `pending` until delivered
        self._adopt_at = 0.0  # time.monotonic() of the next look at what `pending` keeps
        self._partition_count = PartitionCount(topic)
        self._key_partitions: PartitionCache[bytes] = PartitionCache()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="history-producer")  # flushes block

    async def start(self) -> None:
        """RedisError when the deletions an earlier run left cannot be read (retried as the start is)."""
        if self._pending is not None:
            left = await self._pending.load()
            if left:
                log.info("history: %d topic deletions an earlier run did not archive are sent again", len(left))
            self._deletions = left + self._deletions
            self._adopt_at = time.monotonic() + ADOPT_EVERY_S
        self._producer = Producer(self._config, logger=log)
        self._partition_count.current(self._producer)

    async def stop(self) -> None:
        self._partition_count.cancel()
        if self._producer is not None:
            self._closing = True  # a flush in progress gives up at its next slice
            await self._flush(STOP_FLUSH_S, until_closed=False)
            await self._strike_delivered()
            self._producer.purge()  # what is left goes no more (a stopped worker's records trickling in later)
            self._producer.poll(0)  # their reports: the deletions among them are counted below
        waiting = len(self._deletions) + len(self._unconfirmed)
        if waiting:
            kept = "kept in Redis for the next start" if self._pending is not None else "lost"
            log.warning(
                "history: %d topic deletions not archived (the history topic did not take them): %s", waiting, kept
            )
        self._executor.shutdown(wait=False)

    @property
    def partitions(self) -> int | None:
        """The history topic's partition count, once read (None: messages go keyed, as the pass wrote them)."""
        return self._partition_count.known

    async def publish_commits(self, commits: HistoryMessages) -> int:
        """Send a batch's commits (`history.HistoryMessages`) and wait until Kafka acknowledged every message;
        KafkaException when one was not. Returns the messages sent."""
        failed_before = self._failed
        count = self._partition_count.current(self._require())
        # the compiled pass left the records' text to be written (`HistoryMessages.close`): here, off the loop's thread
        outgoing = await asyncio.get_running_loop().run_in_executor(self._executor, self._joined, commits, count)
        self._produce(outgoing)
        remaining = await self._flush()
        if self._unconfirmed:
            await self._strike_delivered()
        if remaining or self._failed != failed_before:
            reason = self._last_error if self._failed != failed_before else f"{remaining} not acknowledged in time"
            raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, f"history records not archived: {reason}"))
        return len(outgoing)

    async def publish_samples(
        self, by_topic: dict[str, dict[int, int]], sampled_at: int, kind: str = KIND_BROKER
    ) -> None:
        """Queue a poll's log-end (or log-start) samples (best effort: they go out with the next flush), and send
        again the topic deletions whose delivery failed (and, now and then, those another worker left)."""
        await self._strike_delivered()
        await self._adopt_left()
        self._send_deletions()
        problem = self._queue(broker_records(self.cluster, by_topic, sampled_at, kind))
        if problem is not None:
            log.warning("history: %s samples not archived (%s); the history has a gap of one poll", kind, problem)

    def publish_probes(self, answers: Iterable[tuple[tuple[str, int], ProbedLog]]) -> None:
        """Queue the log probe's answers, ((topic, partition), answer) pairs as `log_probes.store_probes` takes them
        (a partition may have two: groups at different offsets). Best effort, as samples: they go out with the next
        flush."""
        records = [probe_record(self.cluster, topic, partition, answer) for (topic, partition), answer in answers]
        problem = self._queue(records)
        if problem is not None:
            log.warning("history: %d probe answers not archived (%s)", len(records), problem)

    async def publish_deletions(self, topics: list[str], deleted_at: int, group: str | None = None) -> None:
        """Send topics deleted from Kafka (`group` None) or from one group through the api; sent again (with the next
        samples) until the history topic takes them, and kept in Redis meanwhile."""
        records = [topic_deleted_record(self.cluster, topic, deleted_at, group) for topic in topics]
        if self._pending is not None:
            try:
                await self._pending.add(records)
            except RedisError as exc:  # sent all the same: only a stop before the topic takes them loses them
                log.warning("history: topic deletions of %s not kept in Redis (%s)", ", ".join(topics), exc)
        self._deletions += records
        self._send_deletions()

    async def _adopt_left(self) -> None:
        """Take on the deletions kept in Redis that this worker is not sending, every ADOPT_EVERY_S (one sent twice
        changes nothing in the replay)."""
        if self._pending is None or time.monotonic() < self._adopt_at:
            return
        self._adopt_at = time.monotonic() + ADOPT_EVERY_S
        try:
            kept = await self._pending.load()
        except RedisError as exc:  # looked at again next time
            log.debug("history: topic deletions kept in Redis not read (%s)", exc)
            return
        known = {record.encode() for record in self._deletions} | self._unconfirmed.keys()
        left = [record for record in kept if record.encode() not in known]
        if left:
            log.info("history: %d topic deletions another worker left unarchived are sent", len(left))
            self._deletions += left

    async def _strike_delivered(self) -> None:
        """Strike from Redis the deletions sent and not reported failed, once the producer's queue is empty
        (librdkafka reports only failures: an empty queue is the only word of a success)."""
        if not self._unconfirmed or self._producer is None or len(self._producer):
            return
        delivered, self._unconfirmed = list(self._unconfirmed.values()), {}
        if self._pending is not None:
            try:
                await self._pending.strike(delivered)
            except RedisError as exc:  # the next start sends them again: archived twice changes nothing
                log.debug("history: archived topic deletions not struck from Redis (%s)", exc)

    def _send_deletions(self) -> None:
        """Queue the deletions waiting, each with a report of its own failure (it then waits here again)."""
        producer = self._producer
        if producer is None:
            return
        producer.poll(0)  # the failures reported since: back in the list first
        waiting, self._deletions = self._deletions, []
        for i, record in enumerate(waiting):
            value = record.encode()
            try:
                producer.produce(self.topic, value, record.key(), on_delivery=self._deletion_report(record, value))
            except (KafkaException, BufferError) as exc:  # BufferError: librdkafka's queue is full (Kafka away long)
                self._deletions += waiting[i:]
                log.warning("history: deletion of %s not archived yet (%s); sent again later", record.topic, exc)
                return
            if self._pending is not None:
                self._unconfirmed[value] = record

    def _deletion_report(self, record: HistoryRecord, value: bytes) -> Callable[[KafkaError | None, Any], None]:
        def reported(error: KafkaError | None, message: Any) -> None:
            if error is not None:  # (only failures are reported): it waits to be sent again
                self._unconfirmed.pop(value, None)
                self._deletions.append(record)  # (the history topic's outage is said by the archive queue)
                log.debug("history: deletion of %s not archived yet (%s); sent again later", record.topic, error)

        return reported

    def _queue(self, records: Iterable[HistoryRecord]) -> Exception | None:
        """Queue records, a message per key (best effort); the error when they could not be."""
        try:
            messages = HistoryMessages()
            for record in records:
                messages.add(record.key(), record.encode())
            messages.close()
            self._produce([(key, value, ANY_PARTITION) for key, value in messages.messages])
        except (KafkaException, BufferError) as exc:  # BufferError: librdkafka's queue is full (Kafka away for long)
            return exc
        return None

    def _joined(self, commits: HistoryMessages, count: int | None) -> Outgoing:
        """The batch's messages joined per history partition (`count` of them), in order, each up to MESSAGE_BYTES;
        keyed as written while the partition count is unknown (None)."""
        commits.close()
        if count is None:
            return [(key, value, ANY_PARTITION) for key, value in commits.messages]
        known = self._key_partitions.lookup(count)
        by_partition: dict[int, list[bytes]] = {}  # history partition -> its messages' values, in order
        for key, value in commits.messages:
            partition = known.get(key)
            if partition is None:
                partition = known[key] = partition_for(key, count)
            by_partition.setdefault(partition, []).append(value)
        return [(None, joined, p) for p, values in by_partition.items() for joined in _joined_up_to_size(values)]

    def _produce(self, outgoing: Outgoing) -> None:
        producer = self._require()
        produce, topic = producer.produce, self.topic
        for key, value, partition in outgoing:
            try:
                produce(topic, value, key, partition)
            except BufferError:  # librdkafka's queue is full: let it send, then queue the message
                producer.poll(0.1)
                produce(topic, value, key, partition)

    async def _flush(self, timeout: float = DELIVERY_TIMEOUT_S, *, until_closed: bool = True) -> int:
        """Wait (on the producer's own thread) until everything queued is delivered or failed, at most `timeout`
        (and, `until_closed`, until `stop`); returns what is left."""
        flush = functools.partial(self._flush_blocking, self._require(), timeout, until_closed)
        return await asyncio.get_running_loop().run_in_executor(self._executor, flush)

    def _flush_blocking(self, producer: Producer, timeout: float, until_closed: bool) -> int:
        deadline = time.monotonic() + timeout
        while True:
            left = producer.flush(max(0.0, min(FLUSH_SLICE_S, deadline - time.monotonic())))
            if not left or time.monotonic() >= deadline or (until_closed and self._closing):
                return left

    def _delivered(self, error: KafkaError | None, message: Any) -> None:
        if error is not None:  # on the flushing thread; the GIL orders this with the readers of `_failed`
            self._failed += 1
            self._last_error = error

    def _require(self) -> Producer:
        if self._producer is None:
            raise KafkaException(KafkaError(KafkaError._STATE, "the history producer is not started"))
        return self._producer


def _joined_up_to_size(values: list[bytes]) -> Iterator[bytes]:
    """Consecutive values joined by newlines, a message taking no more once the next would pass MESSAGE_BYTES (a
    value alone may)."""
    start, size = 0, 0
    for i, value in enumerate(values):
        if i > start and size + len(value) > MESSAGE_BYTES:
            yield b"\n".join(values[start:i])
            start, size = i, 0
        size += len(value) + 1
    if values:
        yield b"\n".join(values[start:])
