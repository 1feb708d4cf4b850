"""The ingest's history writer: every decoded commit and every log-end and log-start sample, as
`shared/domain/history.py` records, to the history topic (`history.topic`, when `history.enabled`), for the archiver and
the Spark replay.

Commits are durable: `publish_commits` returns once Kafka acknowledged them all (acks=all) and raises otherwise,
and the ingest commits its offsets-topic position only after that, so a failure makes it read the batch again
(re-read commits are duplicates, which the replay drops by `order`). Log-end samples are best effort: one that is
lost leaves a gap of one poll in the history, which the interpolation of lag in seconds bridges.

A message holds consecutive records of one key (a group's commits, a topic's samples of a poll), one per line
(`shared/domain/history.py`): with a message per commit, history cost one worker 30-32 % of its throughput, with a
message per run of a group's commits 17-21 % (bench/bench_vs_burrow.py --history, 1M commits).

The producer is librdkafka's (confluent-kafka): one C call queues a record, batching and lz4 run on librdkafka's
own threads, and only failed deliveries call back into Python. With aiokafka's producer, whose record batches are
built in Python, keeping the history cost the ingest 30 % of its throughput (bench/bench_vs_burrow.py --history).
Keys are partitioned as Kafka's Java clients do (murmur2), so a group's records stay in order in one partition.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from lagwatch.shared.domain.history import KIND_BROKER, HistoryMessages, broker_records

log = logging.getLogger(__name__)
DELIVERY_TIMEOUT_S = 30.0


class HistoryPublisher:
    def __init__(self, cluster: str, kafka_config: dict[str, Any], topic: str) -> None:
        self.cluster = cluster
        self.topic = topic
        self.samples_lost = 0
        self._failed = 0  # deliveries that failed so far (librdkafka reports only those)
        self._last_error: KafkaError | None = None
        self._config = {
            **kafka_config,
            "acks": "all",
            "linger.ms": 20,
            "compression.type": "lz4",  # measured: gzip cost 5.5 µs of CPU per record, lz4 ~0.1 (aiokafka reads it)
            "partitioner": "murmur2_random",
            "delivery.report.only.error": True,
            "message.timeout.ms": int(DELIVERY_TIMEOUT_S * 1000),
            "on_delivery": self._delivered,
        }
        self._producer: Producer | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="history-producer")  # flushes block

    async def start(self) -> None:
        self._producer = Producer(self._config, logger=log)

    async def stop(self) -> None:
        if self._producer is not None:
            await self._flush()
        self._executor.shutdown(wait=False)

    async def publish_commits(self, commits: HistoryMessages) -> int:
        """Send a batch's commits (`history.HistoryMessages`) and wait until Kafka acknowledged every message;
        KafkaException when one was not. Returns the messages sent."""
        failed_before = self._failed
        self._produce(commits)
        remaining = await self._flush()
        if remaining or self._failed != failed_before:
            reason = self._last_error if self._failed != failed_before else f"{remaining} not acknowledged in time"
            raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, f"history records not archived: {reason}"))
        return len(commits.messages)

    async def publish_samples(
        self, by_topic: dict[str, dict[int, int]], sampled_at: int, kind: str = KIND_BROKER
    ) -> None:
        """Queue a poll's log-end (or log-start) samples (best effort: they go out with the next flush)."""
        try:
            messages = HistoryMessages()  # a topic's samples in one message
            for record in broker_records(self.cluster, by_topic, sampled_at, kind):
                messages.add(record.key(), record.encode())
            messages.close()
            self._produce(messages)
        except KafkaException as exc:
            self.samples_lost += sum(len(p) for p in by_topic.values())
            log.warning("history: log-end samples not archived (%s); the history has a gap of one poll", exc)

    def _produce(self, messages: HistoryMessages) -> None:
        producer = self._require()
        produce, topic = producer.produce, self.topic
        for key, value in messages.messages:
            try:
                produce(topic, value, key)
            except BufferError:  # librdkafka's queue is full: let it send, then queue the message
                producer.poll(0.1)
                produce(topic, value, key)

    async def _flush(self) -> int:
        """Wait (on the producer's own thread) until everything queued is delivered or failed; returns what is left."""
        producer = self._require()
        return await asyncio.get_running_loop().run_in_executor(self._executor, producer.flush, DELIVERY_TIMEOUT_S)

    def _delivered(self, error: KafkaError | None, message: Any) -> None:
        if error is not None:  # on the flushing thread; the GIL orders this with the readers of `_failed`
            self._failed += 1
            self._last_error = error

    def _require(self) -> Producer:
        if self._producer is None:
            raise KafkaException(KafkaError(KafkaError._STATE, "the history producer is not started"))
        return self._producer
