"""The log probe: is there anything a `read_committed` consumer would still receive past its committed offset?

Offsets alone cannot say. A consumer of transactional topics that has read everything commits last record + 1, but
the high watermark lies past the transaction markers (control records no consumer ever receives), so committed and
log end differ by one forever (Burrow reads such a consumer as stalled too); aborted records between the two are
never received either. The probe reads the log itself: it assigns each partition at the committed offset on a
`read_committed` consumer with `enable.partition.eof` and takes the first event of that partition:

- a record: that is the first unread record, its timestamp how old the consumer's lag is (exact at any age);
- end of partition at or past the high watermark asked when the probe started: nothing readable lies between,
  only markers and aborted records (the consumer is caught up whatever the offsets say);
- end of partition short of that high watermark: librdkafka stops a `read_committed` fetch at the last stable
  offset, so a transaction is still open there; what it holds is not readable yet, nor known to be aborted, and
  the probe answers a failure (`open-transaction`) for the caller to keep its offsets' answer.

The same clients serve every call, on a thread of their own (each librdkafka call blocks); they join no group
(`assign`, never `subscribe`), commit nothing, and a batch of partitions is probed in one assignment, so 100
partitions cost one ListOffsets request per leader and a few fetches, not 100 probes in sequence. Broker trouble
never raises: each request gets a `ProbeAnswer` or a `ProbeFailure` with a short reason.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from lagwatch.shared.runtime.clock import now_ms

log = logging.getLogger(__name__)

PROBE_GROUP = "lagwatch-log-probe"  # never joined, never committed to: librdkafka wants a group.id on a consumer
OFFSET_LATEST = -1  # ListOffsets' "latest": the high watermark
CONSUME_BATCH = 1000  # events taken off librdkafka's queue at once
# Settings the probe depends on, laid over the cluster's connection settings.
PROBE_SETTINGS: dict[str, Any] = {
    "group.id": PROBE_GROUP,
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "isolation.level": "read_committed",
    "enable.partition.eof": True,
    # a committed offset outside the log must come back as an error, not be moved to one of its ends
    "auto.offset.reset": "error",
    # a fetch at the end of the log waits at the broker this long for data: the probe's end-of-partition answer
    # comes one such wait after the assignment (Kafka's 500 ms default would make each batch half a second)
    "fetch.wait.max.ms": 20,
    # a few records per partition are enough: keep librdkafka from prefetching megabytes of each
    "max.partition.fetch.bytes": 64 * 1024,
    "fetch.max.bytes": 4 * 1024 * 1024,
    "queued.min.messages": 10,
    # with that many queued, librdkafka waits this long before fetching the partition again (1 s by default), and
    # the wait outlives an unassignment: the next probe of the partition would wait for it
    "fetch.queue.backoff.ms": 10,
    # a fetch error (a leader moving) is retried after this (500 ms by default): the probe has two seconds at most
    "fetch.error.backoff.ms": 100,
    "queued.max.messages.kbytes": 8 * 1024,
}
TIMESTAMP_TYPES = {TIMESTAMP_CREATE_TIME: "create", TIMESTAMP_LOG_APPEND_TIME: "log-append"}
UNKNOWN_CODES = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC}
OUT_OF_RANGE_CODES = {KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET}
TIMEOUT_CODES = {KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT}
UNREACHABLE_CODES = {KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT}

Key = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True, slots=True)
class ProbeAnswer:
    """What a `read_committed` consumer at `committed` would receive next, as the log said at `probed_at`."""

    topic: str
    partition: int
    committed: int  # the offset probed from
    log_end: int  # the high watermark when probed
    readable_end: int  # `committed` when nothing readable lies before `log_end`; else the first readable record
    first_unread_ms: int | None  # that record's timestamp (None when nothing is unread)
    timestamp_type: str | None  # "create" or "log-append" for that timestamp
    probed_at: int  # lagwatch's clock, ms
    # a readable record was found (at `readable_end`, which may be `committed` itself; a record of the message
    # format before Kafka 0.10 has no timestamp, so `first_unread_ms` alone cannot tell)
    found_unread: bool = False

    @property
    def caught_up(self) -> bool:
        """Nothing readable between the committed offset and the log end (only markers or aborted records)."""
        return not self.found_unread


@dataclass(frozen=True, slots=True)
class ProbeFailure:
    topic: str
    partition: int
    committed: int
    # a short label for /metrics: "timeout", "unreachable" (no broker answers), "unknown-partition",
    # "out-of-range", "open-transaction", "invalid-offset" (a negative committed offset), "broker-error"
    reason: str


ProbeResult = ProbeAnswer | ProbeFailure


def probe_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The cluster's librdkafka settings (`librdkafka_config`: bootstrap, TLS, SASL) with the probe's over them."""
    return {**settings, **PROBE_SETTINGS}


def failure_reason(error: KafkaError) -> str:
    code = error.code()
    if code in UNKNOWN_CODES:
        return "unknown-partition"
    if code in OUT_OF_RANGE_CODES:
        return "out-of-range"
    if code in TIMEOUT_CODES:
        return "timeout"
    if code in UNREACHABLE_CODES:
        return "unreachable"
    return "broker-error"


def in_rounds(requests: Sequence[tuple[str, int, int]]) -> list[dict[Key, int]]:
    """The requests as assignments, each naming a partition once: a partition asked from two offsets in one call
    (rare) is probed again in a next round, since one assignment holds one position per partition."""
    rounds: list[dict[Key, int]] = []
    for topic, partition, committed in requests:
        key = (topic, partition)
        free = next((r for r in rounds if key not in r), None)
        if free is None:
            free = {}
            rounds.append(free)
        free[key] = committed
    return rounds


class LogProbe:
    """Probes partitions' logs past committed offsets; see the module's docstring."""

    def __init__(self, settings: dict[str, Any], *, timeout_s: float = 2.0) -> None:
        self._settings = settings
        self.timeout_s = timeout_s
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="log-probe")
        self._clients: ProbeClients | None = None  # made on the probe's thread at the first call
        self._closed = False

    async def probe(self, requests: Sequence[tuple[str, int, int]]) -> list[ProbeResult]:
        """An answer or a failure for each (topic, partition, committed offset), in the order asked, all within
        `timeout_s`."""
        if self._closed:
            raise RuntimeError("the log probe is closed")
        if not requests:
            return []
        asked = list(requests)
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._probe_all, asked)

    def close(self) -> None:
        """Free the clients on their thread, without waiting for a probe in flight (nor making the caller wait)."""
        if self._closed:
            return
        self._closed = True
        self._executor.submit(self._drop_clients)
        self._executor.shutdown(wait=False)

    # --- on the probe's thread ---------------------------------------------------------------------------------

    def _probe_all(self, requests: list[tuple[str, int, int]]) -> list[ProbeResult]:
        results: dict[tuple[str, int, int], ProbeResult] = {}
        deadline = time.monotonic() + self.timeout_s  # for the whole call: rounds share it
        for assignment in in_rounds(requests):
            for result in self._probe_round(assignment, deadline):
                results[(result.topic, result.partition, result.committed)] = result
        # every partition asked is answered; should a broker's answer leave one out, it fails rather than raising
        return [results.get(request) or ProbeFailure(*request, "broker-error") for request in requests]

    def _probe_round(self, committed: dict[Key, int], deadline: float) -> list[ProbeResult]:
        if self._clients is None:
            self._clients = ProbeClients(self._settings)
        probed_at = now_ms()
        ends = LogEnds.ask(self._clients.ends, committed, deadline)
        results, to_read = ends.settle(committed, probed_at)
        if to_read:
            read = BatchRead(self._clients.reader, to_read, ends.highs, probed_at)
            results += read.run(deadline)
            if read.fatal:
                self._drop_clients()
        return results

    def _drop_clients(self) -> None:
        clients, self._clients = self._clients, None
        if clients is not None:
            clients.close()


class ProbeClients:
    """The probe's two librdkafka consumers. The reader reads `read_committed`; the log ends come from one reading
    `read_uncommitted`, because librdkafka asks ListOffsets at its client's isolation level and a `read_committed`
    "latest" is the last stable offset, not the high watermark: an open transaction would hide in it."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.reader = Consumer(probe_settings(settings), logger=log)
        self.ends = Consumer({**probe_settings(settings), "isolation.level": "read_uncommitted"}, logger=log)

    def close(self) -> None:
        for consumer in (self.reader, self.ends):
            try:
                consumer.close()
            except (KafkaException, RuntimeError) as exc:
                log.debug("log probe: closing a client failed (%s)", exc)


@dataclass(slots=True)
class LogEnds:
    """The partitions' high watermarks when a probe starts (one ListOffsets request per leader), and failures of
    the partitions that have none."""

    highs: dict[Key, int]
    failures: list[ProbeFailure]

    @classmethod
    def ask(cls, consumer: Consumer, committed: dict[Key, int], deadline: float) -> LogEnds:
        ends = cls({}, [])
        try:
            answer = cls._latest(consumer, committed, deadline)
        except KafkaException as exc:
            error = exc.args[0]
            if failure_reason(error) != "unknown-partition":
                ends.fail(committed, failure_reason(error))
                return ends
            # librdkafka refuses the whole request for one partition its metadata lacks: set those apart, once
            known = ends.known_only(consumer, committed, deadline)
            try:
                answer = cls._latest(consumer, known, deadline)
            except KafkaException as again:
                ends.fail(known, failure_reason(again.args[0]))
                return ends
        for tp in answer:
            ends.take(tp, committed[(tp.topic, tp.partition)])
        return ends

    @staticmethod
    def _latest(consumer: Consumer, committed: dict[Key, int], deadline: float) -> list[TopicPartition]:
        if not committed:
            return []
        asked = [TopicPartition(topic, partition, OFFSET_LATEST) for topic, partition in committed]
        remaining = max(deadline - time.monotonic(), 0.001)
        answer: list[TopicPartition] = consumer.offsets_for_times(asked, timeout=remaining)
        return answer

    def take(self, tp: TopicPartition, committed: int) -> None:
        if tp.error is not None:
            self.failures.append(ProbeFailure(tp.topic, tp.partition, committed, failure_reason(tp.error)))
        elif tp.offset < 0:
            self.failures.append(ProbeFailure(tp.topic, tp.partition, committed, "broker-error"))
        else:
            self.highs[(tp.topic, tp.partition)] = tp.offset

    def known_only(self, consumer: Consumer, committed: dict[Key, int], deadline: float) -> dict[Key, int]:
        """The partitions the cluster's metadata holds; the others fail as unknown (only after a refusal: the
        metadata of every topic is one large answer on a big cluster)."""
        try:
            metadata = consumer.list_topics(timeout=max(deadline - time.monotonic(), 0.001))
        except KafkaException as exc:
            self.fail(committed, failure_reason(exc.args[0]))
            return {}
        topics = metadata.topics
        known = {k: o for k, o in committed.items() if k[0] in topics and k[1] in topics[k[0]].partitions}
        self.fail({k: o for k, o in committed.items() if k not in known}, "unknown-partition")
        return known

    def settle(self, committed: dict[Key, int], probed_at: int) -> tuple[list[ProbeResult], dict[Key, int]]:
        """What the log ends decide alone (failures, nothing past the committed offset), and what is left to read."""
        results: list[ProbeResult] = list(self.failures)
        to_read: dict[Key, int] = {}
        for key, high in self.highs.items():
            offset = committed[key]
            if offset < 0:
                results.append(ProbeFailure(*key, offset, "invalid-offset"))
            elif offset > high:
                results.append(ProbeFailure(*key, offset, "out-of-range"))
            elif offset == high:  # nothing at all past it: no read needed
                results.append(ProbeAnswer(*key, offset, high, offset, None, None, probed_at))
            else:
                to_read[key] = offset
        return results, to_read

    def fail(self, committed: dict[Key, int], reason: str) -> None:
        self.failures += [
            ProbeFailure(topic, partition, offset, reason) for (topic, partition), offset in committed.items()
        ]


class BatchRead:
    """One assignment of partitions at their committed offsets, read until each has given its first event."""

    def __init__(self, consumer: Consumer, committed: dict[Key, int], highs: dict[Key, int], probed_at: int):
        self._consumer = consumer
        self._committed = committed
        self._highs = highs
        self._probed_at = probed_at
        self._open = set(committed)  # partitions still without an answer
        self._errors: dict[Key, KafkaError] = {}  # each open partition's last passing error (a leader moving, ...)
        self.results: list[ProbeResult] = []
        self.fatal = False  # the client is broken for good: make another for the next call

    def run(self, deadline: float) -> list[ProbeResult]:
        try:
            self._consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in self._committed.items()])
            while self._open and not self.fatal and (remaining := deadline - time.monotonic()) > 0:
                for message in self._arrived(remaining):
                    self._take(message)
        except KafkaException as exc:  # the client itself failed (closed under it, destroyed): make another
            log.warning("log probe: %s", exc)
            self.fatal = True
        finally:
            self._end_assignment()
        for key in sorted(self._open):
            error = self._errors.get(key)
            reason = "broker-error" if self.fatal or error is not None else "timeout"
            self._fail(key, reason)
        return self.results

    def _end_assignment(self) -> None:
        partitions = [TopicPartition(*key) for key in self._committed]
        try:
            # a paused partition stays paused in the client across assignments: resume before the next one
            self._consumer.resume(partitions)
            self._consumer.unassign()  # stops every fetch; librdkafka drops what was queued for the assignment
        except KafkaException as exc:
            log.debug("log probe: ending the assignment failed (%s)", exc)
            self.fatal = True

    def _arrived(self, remaining: float) -> list[Message]:
        """What is queued now, else the first event within `remaining` s (`consume(n, timeout)` would wait the
        whole timeout for n events)."""
        messages: list[Message] = self._consumer.consume(CONSUME_BATCH, 0)
        if messages:
            return messages
        first = self._consumer.poll(remaining)
        return [] if first is None else [first]

    def _take(self, message: Message) -> None:
        error = message.error()
        if error is not None and error.fatal():
            log.warning("log probe: %s", error)
            self.fatal = True
            return
        key = (message.topic(), message.partition())
        if key not in self._open:  # an error of no partition (a connection lost), or a partition answered already
            if error is not None:
                log.debug("log probe: %s", error)
            return
        if error is None:
            self._record(key, message)
        elif error.code() == KafkaError._PARTITION_EOF:
            self._end(key, message.offset())
        elif failure_reason(error) in ("unknown-partition", "out-of-range"):
            self._fail(key, failure_reason(error))
        else:
            self._errors[key] = error  # librdkafka retries by itself; said only if the deadline comes first

    def _record(self, key: Key, message: Message) -> None:
        offset = message.offset()
        if offset is None or offset < self._committed[key]:  # cannot be after an assignment at committed: be sure
            return
        kind, timestamp = message.timestamp()
        known = kind in TIMESTAMP_TYPES
        self._settle(
            key,
            ProbeAnswer(
                *key,
                self._committed[key],
                self._highs[key],
                offset,
                timestamp if known else None,
                TIMESTAMP_TYPES.get(kind),
                self._probed_at,
                found_unread=True,
            ),
        )

    def _end(self, key: Key, position: int | None) -> None:
        """End of partition at `position`: at or past the high watermark, nothing readable was on the way; short
        of it, a `read_committed` fetch stopped at the last stable offset before an open transaction."""
        committed, high = self._committed[key], self._highs[key]
        if position is None or position < high:
            self._fail(key, "open-transaction")
        else:
            self._settle(key, ProbeAnswer(*key, committed, high, committed, None, None, self._probed_at))

    def _fail(self, key: Key, reason: str) -> None:
        self._settle(key, ProbeFailure(*key, self._committed[key], reason))

    def _settle(self, key: Key, result: ProbeResult) -> None:
        self.results.append(result)
        self._open.discard(key)
        if not self.fatal:  # no more fetches for it (the assignment ends with the batch)
            self._consumer.pause([TopicPartition(*key)])
