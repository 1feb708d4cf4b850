"""The group-changes topic (`lagwatch.changes` by default): "group G of cluster C changed, evaluate it now".

The ingest names every group a batch touched (new commits, a rebalance, a deletion), the api each group it
deletes. The evaluator consumes the topic as a Kafka consumer group: a group is always named in one partition (the
one Kafka's default murmur2 partitioning gives the key `<cluster>/<group>`), so the evaluator instance holding that
partition owns the group, and evaluator instances scale out by sharing partitions. Notices are triggers, not data:
one that is lost only delays an evaluation until the evaluator's next sweep.

Value: JSON {"cluster", "groups": [...], "reason": "commits" | "rebalance" | "deleted" | "probe", "at": epoch ms}
("probe": the ingest's log probe answered for the groups' committed offsets, a refinement of their lag): the groups
of one publish whose keys fall in the partition the notice is sent to (so one produce covers many groups: the ingest
touches thousands of groups a second). The evaluator also reads the single-group form {"cluster", "group", ...},
which the publisher sends, keyed `<cluster>/<group>`, while it does not know the topic's partition count yet.

Log-end notices: the ingest's broker-offset poller names the topics whose log end moved in a poll,
{"cluster", "topics": [...], "reason": "log-end", "at"}, sent to every partition of the topic (no key), since
every evaluator instance has groups reading them. They are triggers too: one lost delays a re-evaluation until the
next poll that moves the topic, or the sweep. With `"reason": "log-start"` they name the topics whose log start
moved (retention deleted from the front, polled every topic-refresh): the groups retention closes in on are
re-evaluated, their retention risk having changed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.partitioner import ANY_PARTITION, PartitionCache, PartitionCount, partition_for

log = logging.getLogger(__name__)
_json_string = json.encoder.encode_basestring_ascii  # json.dumps' own C string encoder
DEFAULT_TOPIC = "lagwatch.changes"
MESSAGE_TIMEOUT_MS = 30_000  # a notice not sent by then is dropped and counted (the sweep catches up)
STOP_FLUSH_S = 5.0
PURGED = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)
FAILURES_LOGGED_EVERY_S = 10.0  # Kafka away: every queued notice fails, thousands a second; one warning says so
LOG_END_TOPICS_PER_NOTICE = 2000  # topic names per log-end notice (a notice stays far below Kafka's record limit)
PROBE_REASON = "probe"  # a log probe answered for the groups' committed offsets (shared/windows/log_probes.py)
GROUPS_PER_NOTICE = 2000  # group names per notice, for the same reason


def notice_key(cluster: str, group: str) -> bytes:
    return f"{cluster}/{group}".encode()


def partition_of(cluster: str, group: str, partitions: int) -> int:
    """The partition Kafka's default partitioner gives the group's key: so the sweep knows what it owns, and a
    notice naming the group goes where its owner reads."""
    return partition_for(notice_key(cluster, group), partitions)


def encode_notice(cluster: str, group: str, reason: str, at: int) -> bytes:
    # what json.dumps gives for this dict, built without it: sent per touched group until the partition count is known
    return (
        f'{{"cluster": {_json_string(cluster)}, "group": {_json_string(group)}, '
        f'"reason": {_json_string(reason)}, "at": {int(at)}}}'
    ).encode()


def encode_groups_notice(cluster: str, groups: list[str], reason: str, at: int) -> bytes:
    return json.dumps({"cluster": cluster, "groups": groups, "reason": reason, "at": at}).encode()


def encode_log_end_notice(cluster: str, topics: list[str], at: int, reason: str = "log-end") -> bytes:
    return json.dumps({"cluster": cluster, "topics": topics, "reason": reason, "at": at}).encode()


def decode_notice(value: bytes | None) -> dict[str, Any] | None:
    """The notice (naming `groups` or a `group`, or a log-end notice naming `topics`), or None for anything that is
    not one (counted by the caller and skipped): names present in any other shape than a list of strings too, or
    the evaluator would take a string for its characters."""
    try:
        notice = json.loads(value or b"")
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(notice, dict) or not isinstance(notice.get("cluster"), str):
        return None
    for field in ("topics", "groups"):
        if field in notice:
            names = notice[field]
            return notice if isinstance(names, list) and all(isinstance(name, str) for name in names) else None
    return notice if isinstance(notice.get("group"), str) else None


def groups_of(notice: dict[str, Any]) -> list[str]:
    """The groups a decoded group notice names (either form)."""
    return notice["groups"] if "groups" in notice else [notice["group"]]


class ChangePublisher:
    """Best-effort notices: a failure is logged and counted, never raised (the evaluator's sweep catches up).

    Sent with librdkafka (confluent-kafka), a notice per partition and reason: the ingest touches thousands of groups
    a second. librdkafka connects in the background, so Kafka down when a service starts leaves notices queued (up
    to MESSAGE_TIMEOUT_MS, then counted as failed), not turned off. Partitions are murmur2's (`partition_of`)."""

    def __init__(self, kafka_config: dict[str, Any], topic: str = DEFAULT_TOPIC) -> None:
        self.topic = topic
        self.failures = 0
        self._config = {
            "acks": 1,
            "linger.ms": 5,
            "message.timeout.ms": MESSAGE_TIMEOUT_MS,
            **kafka_config,
            "partitioner": "murmur2_random",  # a key's partition as Kafka's default partitioner gives it
            "delivery.report.only.error": True,  # a callback per failed notice only
            "on_delivery": self._delivered,
            "error_cb": self._client_error,
        }
        self._producer: Producer | None = None
        self._logged_at = float("-inf")  # monotonic time of the last failure warning
        self._partition_count = PartitionCount(topic)
        # per cluster, keyed by group: a (cluster, group) tuple per group would cost memory in proportion to the
        # groups the ingest holds
        self._group_partitions: dict[str, PartitionCache[str]] = {}

    async def start(self) -> None:
        """Create the producer (it connects in the background; notices queue until it has) and start reading the
        topic's partition count."""
        if self._producer is None:
            self._producer = Producer(self._config, logger=log)
            self._partition_count.current(self._producer)

    async def stop(self) -> None:
        """Send what is queued (for at most STOP_FLUSH_S), then let go of the producer."""
        producer, self._producer = self._producer, None
        self._partition_count.cancel()
        if producer is not None:
            left = await asyncio.to_thread(producer.flush, STOP_FLUSH_S)
            if left:
                self._failed(f"{left} notices not sent before stopping", left)
            # What is left goes no more, and its reports are served now: each unserved report holds this publisher
            # (its callback), which kept the producer alive, retrying its brokers, long after the stop.
            producer.purge()
            producer.poll(0)

    async def publish(self, cluster: str, groups: Iterable[tuple[str, str]]) -> None:
        """Queue notices naming these (group, reason)s: one per partition and reason they fall in, or one per group
        while the partition count is unknown. Does not wait for the broker: a notice is a trigger."""
        producer = self._producer
        if producer is None:
            return
        count = self._partition_count.current(producer)
        now = now_ms()
        notices: Iterator[tuple[bytes, bytes | None, int]]
        if count is None:  # librdkafka's partitioner places each group's key
            notices = ((encode_notice(cluster, g, r, now), notice_key(cluster, g), ANY_PARTITION) for g, r in groups)
        else:
            notices = self._notices_by_partition(cluster, groups, count, now)
        produce, topic = producer.produce, self.topic
        try:
            for value, key, partition in notices:
                produce(topic, value, key, partition)
        except (BufferError, KafkaException) as exc:  # BufferError: the queue is full (Kafka away for long)
            self._failed(exc, 1 + sum(1 for _ in notices))  # this notice and those after it
        producer.poll(0)  # delivery reports of earlier notices (failures only)

    def _notices_by_partition(
        self, cluster: str, groups: Iterable[tuple[str, str]], count: int, now: int
    ) -> Iterator[tuple[bytes, bytes | None, int]]:
        cache = self._group_partitions.get(cluster) or self._group_partitions.setdefault(cluster, PartitionCache())
        known, by_partition = cache.lookup(count), dict[tuple[int, str], list[str]]()
        for group, reason in groups:
            partition = known.get(group)
            if partition is None:
                partition = known[group] = partition_of(cluster, group, count)
            by_partition.setdefault((partition, reason), []).append(group)
        for (partition, reason), names in by_partition.items():
            for i in range(0, len(names), GROUPS_PER_NOTICE):
                yield encode_groups_notice(cluster, names[i : i + GROUPS_PER_NOTICE], reason, now), None, partition

    @property
    def partitions(self) -> int | None:
        """The topic's partition count, once read (None: notices go one per group, keyed)."""
        return self._partition_count.known

    async def publish_log_ends(self, cluster: str, topics: Iterable[str], reason: str = "log-end") -> None:
        """A log-end notice naming `topics`, to every partition of the changes topic (every evaluator instance has
        groups that may read them), in chunks of LOG_END_TOPICS_PER_NOTICE. Best effort, like `publish`."""
        producer = self._producer
        if producer is None:
            return
        names = sorted(topics)
        now = now_ms()
        try:
            for partition in await self._partition_count.partitions(producer):
                for i in range(0, len(names), LOG_END_TOPICS_PER_NOTICE):
                    value = encode_log_end_notice(cluster, names[i : i + LOG_END_TOPICS_PER_NOTICE], now, reason)
                    producer.produce(self.topic, value, partition=partition)
        except (BufferError, KafkaException) as exc:
            self._failed(exc)
        producer.poll(0)

    def _delivered(self, error: KafkaError | None, _message: Any) -> None:
        if error is not None and error.code() not in PURGED:  # purged at stop: counted there
            self._failed(error)

    def _client_error(self, error: KafkaError) -> None:
        log.debug("change notices: %s", error)  # librdkafka retries connections itself; failures are counted above

    def _failed(self, exc: object, count: int = 1) -> None:
        self.failures += count
        now = time.monotonic()
        if now - self._logged_at >= FAILURES_LOGGED_EVERY_S:
            self._logged_at = now
            log.warning(
                "change notices not published (%s; %d failed so far); the evaluator's sweep catches up",
                str(exc),  # not the exception: a record kept (a queued handler, a test's capture) held its frames
                self.failures,
            )
