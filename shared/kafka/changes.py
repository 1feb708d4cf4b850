"""The group-changes topic (`lagwatch.changes` by default): "group G of cluster C changed, evaluate it now".

The ingest publishes one notice per group touched by a batch (new commits, a rebalance, a deletion), the api one
per group it deletes. The evaluator consumes the topic as a Kafka consumer group: a group's notices all land in one
partition (key `<cluster>/<group>`, Kafka's default murmur2 partitioning), so the evaluator instance holding that
partition owns the group, and evaluator instances scale out by sharing partitions. Notices are triggers, not data:
one that is lost only delays an evaluation until the evaluator's next sweep.

Value: JSON {"cluster", "group", "reason": "commits" | "rebalance" | "deleted", "at": epoch ms}.

Log-end notices: the ingest's broker-offset poller names the topics whose log end moved in a poll,
{"cluster", "topics": [...], "reason": "log-end", "at"}, sent to every partition of the topic (no key), since
every evaluator instance has groups reading them. They are triggers too: one lost delays a re-evaluation until the
next poll that moves the topic, or the sweep. With `"reason": "log-start"` they name the topics whose log start
moved (retention deleted from the front, polled every topic-refresh): the groups retention closes in on are
re-evaluated, their retention risk having changed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from lagwatch.shared.clock import now_ms
from lagwatch.shared.kafka.kafka_batches import partition_for, send_keyed

log = logging.getLogger(__name__)
_json_string = json.encoder.encode_basestring_ascii  # json.dumps' own C string encoder
DEFAULT_TOPIC = "lagwatch.changes"
RESTART_AFTER_S = 5.0  # a producer that could not start is tried again at most this often
LOG_END_TOPICS_PER_NOTICE = 2000  # topic names per log-end notice (a notice stays far below Kafka's record limit)


def notice_key(cluster: str, group: str) -> bytes:
    return f"{cluster}/{group}".encode()


def partition_of(cluster: str, group: str, partitions: int) -> int:
    """The partition Kafka's default partitioner gives the group's key (so the sweep knows what it owns)."""
    return partition_for(notice_key(cluster, group), partitions)


def encode_notice(cluster: str, group: str, reason: str, at: int) -> bytes:
    # what json.dumps gives for this dict, built without it: the ingest sends one per touched group per batch
    return (
        f'{{"cluster": {_json_string(cluster)}, "group": {_json_string(group)}, '
        f'"reason": {_json_string(reason)}, "at": {int(at)}}}'
    ).encode()


def encode_log_end_notice(cluster: str, topics: list[str], at: int, reason: str = "log-end") -> bytes:
    return json.dumps({"cluster": cluster, "topics": topics, "reason": reason, "at": at}).encode()


def decode_notice(value: bytes | None) -> dict[str, Any] | None:
    """The notice (a group's, or a log-end notice with `topics`), or None for anything that is not one (counted by
    the caller and skipped)."""
    try:
        notice = json.loads(value or b"")
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(notice, dict) or not isinstance(notice.get("cluster"), str):
        return None
    topics = notice.get("topics")
    if isinstance(topics, list):
        return notice if all(isinstance(t, str) for t in topics) else None
    return notice if isinstance(notice.get("group"), str) else None


class ChangePublisher:
    """Best-effort notices: a failure is logged and counted, never raised (the evaluator's sweep catches up)."""

    def __init__(self, kafka_kwargs: dict[str, Any], topic: str = DEFAULT_TOPIC) -> None:
        self.topic = topic
        self.failures = 0
        self._kafka_kwargs = kafka_kwargs
        self._producer = self._new_producer()
        self._started = False
        self._tried_at = float("-inf")  # monotonic time of the last attempt to start the producer

    def _new_producer(self) -> AIOKafkaProducer:
        return AIOKafkaProducer(**self._kafka_kwargs, acks=1, linger_ms=5)

    async def start(self) -> None:
        """Start the producer; when Kafka cannot be reached, notices are dropped (counted) and starting is tried
        again at most every RESTART_AFTER_S, on the next notice: Kafka down when a service starts must not turn its
        notices off for good (the evaluator would hear of changes only at its sweeps)."""
        self._tried_at = time.monotonic()
        try:
            await self._producer.start()
            self._started = True
        except (KafkaError, OSError) as exc:
            log.warning("change notices paused: cannot start a producer (%s); trying again later", exc)
            with contextlib.suppress(Exception):
                await self._producer.stop()
            self._producer = self._new_producer()  # a producer whose start failed is not started twice

    async def _ready(self) -> bool:
        if not self._started and time.monotonic() - self._tried_at >= RESTART_AFTER_S:
            await self.start()
        return self._started

    async def stop(self) -> None:
        if self._started:
            await self._producer.stop()

    async def publish(self, cluster: str, groups: Iterable[tuple[str, str]]) -> None:
        """Queue a notice per (group, reason), one record batch per partition (a batch of the ingest can touch
        thousands of groups: sending them one by one cost more than storing them). Does not wait for the broker:
        a notice is a trigger, and a failure is logged and counted."""
        if not await self._ready():
            return
        now = now_ms()
        records = ((notice_key(cluster, g), encode_notice(cluster, g, reason, now)) for g, reason in groups)
        try:
            for future in await send_keyed(self._producer, self.topic, records):
                future.add_done_callback(self._check)
        except (KafkaError, OSError) as exc:
            self._failed(exc)

    async def publish_log_ends(self, cluster: str, topics: Iterable[str], reason: str = "log-end") -> None:
        """A log-end notice naming `topics`, to every partition of the changes topic (every evaluator instance has
        groups that may read them), in chunks of LOG_END_TOPICS_PER_NOTICE. Best effort, like `publish`."""
        if not await self._ready():
            return
        names = sorted(topics)
        now = now_ms()
        try:
            for partition in sorted(await self._producer.partitions_for(self.topic)):
                for i in range(0, len(names), LOG_END_TOPICS_PER_NOTICE):
                    value = encode_log_end_notice(cluster, names[i : i + LOG_END_TOPICS_PER_NOTICE], now, reason)
                    future = await self._producer.send(self.topic, value, partition=partition)
                    future.add_done_callback(self._check)
        except (KafkaError, OSError) as exc:
            self._failed(exc)

    def _check(self, future: Any) -> None:
        if not future.cancelled() and future.exception() is not None:
            self._failed(future.exception())

    def _failed(self, exc: BaseException) -> None:
        self.failures += 1
        log.warning("change notices not published (%s); the evaluator's sweep catches up", exc)
