"""The offsets topic, read in batches by librdkafka (confluent-kafka, faster than aiokafka) on a thread of its own.

Every call on the blocking consumer runs on one dedicated thread. Rebalances call back on it: a revocation waits for
the worker's `on_revoked` (the batch in flight stored), then commits its positions synchronously, so the next owner
starts exactly where this worker's windows end. Commits are only sent from that thread (`commit` queues them): a
librdkafka call from the event loop's thread while a rebalance callback waits for the loop deadlocks.

How far the commits are read (`ReadThrough`, shared/windows/read_through.py) is measured against high watermarks asked
of the brokers, never librdkafka's cache: after a lost connection the cache still says what the log ends were.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, Message, TopicPartition

from lagwatch.shared.runtime.clock import now_ms

log = logging.getLogger(__name__)
T = TypeVar("T")
WATERMARK_TIMEOUT_S = 2.0
COMMITTED_TIMEOUT_S = 10.0
READ_THROUGH_EVERY_S = 0.25  # how often the brokers are asked how far the partitions go (windows/read_through.py)
OFFSET_LATEST = -1  # ListOffsets' "latest": the high watermark
# how long a batch short of full waits for more records: a short wait makes batches (each with fixed costs) far
# fewer at a steady rate without adding to the commit -> status latency
FETCH_LINGER_S = 0.02


@dataclass(slots=True)
class Fetched:
    records: list[Message]  # without error events; only of partitions still assigned
    at_end: dict[int, int] | None  # every assigned partition's position, when each has been read to its end
    read_through: ReadThrough | None = None  # these records and those before hold every commit made before then


@dataclass(frozen=True, slots=True)
class ReadThrough:
    """Every commit appended to these partitions before `at_ms` has been read (shared/windows/read_through.py)."""

    at_ms: int
    partitions: frozenset[int]


@dataclass(slots=True)
class _Mark:
    """The partitions' high watermarks as the brokers answered them at `asked_at_ms`: once the consumer's positions
    reach them, everything appended before then has been read."""

    asked_at_ms: int
    highs: dict[int, int]
    revocations: int  # the assignment it was taken under


class OffsetsConsumer:
    def __init__(
        self,
        config: dict[str, Any],
        topic: str,
        *,
        on_assigned: Callable[[list[int]], None],
        on_revoked: Callable[[list[int]], Coroutine[Any, Any, None]],
    ) -> None:
        self.topic = topic
        self._config = config
        self._starts_latest = config.get("auto.offset.reset") == "latest"
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._consumer: Consumer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="offsets-consumer")
        self.assigned: frozenset[int] = frozenset()
        self._revocations = 0  # partitions taken away so far (revoked or lost)
        self._pending: dict[int, int] = {}  # positions stored in Redis, to commit (see `commit`)
        self._lock = threading.Lock()
        self._mark: _Mark | None = None  # high watermarks being read up to (`_read_through`)
        self._marked_at = 0.0  # monotonic time of the last watermark request
        self._committed: dict[int, int] = {}  # committed offsets of this assignment's partitions, as asked

    # --- life cycle -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._call(self._create)

    def _create(self) -> None:
        self._consumer = Consumer(self._config, logger=log)
        self._consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost)

    async def close(self) -> None:
        """Leave the group (a last revocation runs first) and free the client."""
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            try:
                await self._call(self._close, consumer)
            except (KafkaException, RuntimeError) as exc:
                log.warning("offsets consumer: close failed (%s)", exc)
        self.assigned = frozenset()

    def _close(self, consumer: Consumer) -> None:
        self._send_commits(consumer, wait=True)  # what was stored last, before the group hears we leave
        consumer.close()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False)

    # --- reading ---------------------------------------------------------------------------------------------

    async def fetch(self, max_records: int, timeout: float, want_ends: bool) -> Fetched:
        """Up to `max_records` records, waiting at most `timeout` s; with `want_ends`, say whether every assigned
        partition has been read to its high watermark."""
        return await self._call(self._fetch, max_records, timeout, want_ends)

    def _fetch(self, max_records: int, timeout: float, want_ends: bool) -> Fetched:
        consumer = self._require()
        self._send_commits(consumer)
        revocations = self._revocations
        messages = self._arrived(consumer, max_records, timeout)
        records = [m for m in messages if m.error() is None]
        if len(records) < len(messages):
            for m in messages:
                error = m.error()
                if error is not None and error.fatal():
                    raise KafkaException(error)
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    log.warning("offsets consumer: %s", error)
        if revocations != self._revocations:  # records of partitions revoked meanwhile are not ours to store
            assigned = self.assigned
            records = [m for m in records if m.partition() in assigned]
        return Fetched(records, self._ends() if want_ends else None, self._read_through(consumer))

    @staticmethod
    def _arrived(consumer: Consumer, max_records: int, timeout: float) -> list[Message]:
        """Up to `max_records` records: those already here, else the first to arrive within `timeout`, then those in
        the next FETCH_LINGER_S (librdkafka's `consume(n, timeout)` holds fewer than n for the whole timeout)."""
        messages = consumer.consume(max_records, 0)
        if not messages:
            first = consumer.poll(timeout)
            if first is None:
                return []
            messages = [first]
        if len(messages) < max_records:
            messages += consumer.consume(max_records - len(messages), FETCH_LINGER_S)
        return messages

    def _read_through(self, consumer: Consumer) -> ReadThrough | None:
        """Every READ_THROUGH_EVERY_S, ask the brokers for the assigned partitions' high watermarks (one request per
        leader); when the positions reach them, everything appended before the question has been read."""
        mark = self._mark
        if mark is not None and mark.revocations != self._revocations:
            mark = self._mark = None  # the assignment changed under it
        if mark is None:
            if not self.assigned or time.monotonic() - self._marked_at < READ_THROUGH_EVERY_S:
                return None
            mark = self._mark = self._ask_highs(consumer)
            if mark is None:
                return None
        positions = self._positions(consumer, mark.highs)
        if any(positions[p] < high for p, high in mark.highs.items() if high > 0):
            return None
        self._mark = None
        return ReadThrough(mark.asked_at_ms, frozenset(mark.highs))

    def _ask_highs(self, consumer: Consumer) -> _Mark | None:
        self._marked_at = time.monotonic()
        revocations, partitions = self._revocations, sorted(self.assigned)
        asked_at = now_ms()
        try:
            answer = consumer.offsets_for_times(
                [TopicPartition(self.topic, p, OFFSET_LATEST) for p in partitions], timeout=WATERMARK_TIMEOUT_S
            )
        except KafkaException as exc:  # out of reach: how far we read stays where it was
            log.debug("offsets consumer: high watermarks unknown (%s)", exc)
            return None
        if any(tp.error is not None or tp.offset < 0 for tp in answer):
            return None
        return _Mark(asked_at, {tp.partition: tp.offset for tp in answer}, revocations)

    def _ends(self) -> dict[int, int] | None:
        """Every assigned partition's position when each has been read to its (cached) high watermark, else None."""
        consumer = self._require()
        highs = {}
        for p in sorted(self.assigned):
            high = consumer.get_watermark_offsets(TopicPartition(self.topic, p), cached=True)[1]
            if high < 0:  # nothing fetched from it yet
                return None
            highs[p] = high
        if not highs:
            return None
        positions = self._positions(consumer, highs)
        return None if any(positions[p] < high for p, high in highs.items()) else positions

    def _positions(self, consumer: Consumer, highs: dict[int, int]) -> dict[int, int]:
        """Where the consumer reads each of these partitions next: its position; with nothing consumed since the
        assignment, where the group left off (asked once per assignment: nothing consumed, nothing committed since);
        where it never committed, where it starts: the log start, or with start-latest the end (`highs`)."""
        asked = consumer.position([TopicPartition(self.topic, p) for p in highs])
        positions = {tp.partition: tp.offset for tp in asked}
        unread = [
            TopicPartition(self.topic, p)
            for p, offset in positions.items()
            if offset == OFFSET_INVALID and p not in self._committed
        ]
        if unread:
            answer = consumer.committed(unread, timeout=COMMITTED_TIMEOUT_S)
            self._committed.update({tp.partition: tp.offset for tp in answer})
        for p, offset in positions.items():
            if offset != OFFSET_INVALID:
                continue
            offset = self._committed[p]
            low = consumer.get_watermark_offsets(TopicPartition(self.topic, p), cached=True)[0]
            # never committed, or the log start (retention, compaction) moved past where the group left off: the
            # consumer starts where auto.offset.reset puts it (else that partition would never read as read through,
            # and the rules' clock, the slowest partition's, would stop for the whole cluster)
            if offset < 0 or 0 <= offset < low:
                offset = highs[p] if self._starts_latest else low
            positions[p] = offset
        return positions

    # --- committing ------------------------------------------------------------------------------------------

    def commit(self, positions: dict[int, int]) -> None:
        """Queue positions for committing: the consumer's thread sends them (asynchronously) before its next fetch.
        librdkafka calls made from another thread while a rebalance callback waits on the event loop deadlock."""
        with self._lock:
            self._pending.update(positions)

    def _send_commits(self, consumer: Consumer, *, wait: bool = False) -> None:
        """On the consumer's thread: commit what `commit` queued (a failure means records are read again)."""
        with self._lock:
            pending, self._pending = self._pending, {}
        offsets = [TopicPartition(self.topic, p, o) for p, o in pending.items() if p in self.assigned]
        if offsets:
            try:
                if wait:
                    consumer.commit(offsets=offsets, asynchronous=False)
                else:
                    consumer.commit(offsets=offsets, asynchronous=True)
            except KafkaException as exc:
                log.warning("offsets consumer: commit failed (%s); records will be read again", exc)

    # --- rebalance callbacks (on the consumer's thread) --------------------------------------------------------

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        added = frozenset(tp.partition for tp in partitions)
        self.assigned = added  # an (eager) assignment replaces the last one
        self._committed = {}
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._on_assigned, sorted(added))

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = [tp.partition for tp in partitions]
        self._revocations += 1
        assert self._loop is not None
        try:
            asyncio.run_coroutine_threadsafe(self._on_revoked(revoked), self._loop).result()
            self._send_commits(consumer, wait=True)  # the drained batch's positions, before the next owner reads
        except Exception as exc:  # the next owner re-reads from the last commit: duplicates, which `order` drops
            log.warning("offsets consumer: handing over partitions %s failed (%s)", revoked, exc)
        finally:
            self.assigned = self.assigned - set(revoked)

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Taken away without a revocation (session timed out): nothing can be committed for them any more."""
        lost = [tp.partition for tp in partitions]
        self._revocations += 1
        self.assigned = self.assigned - set(lost)
        assert self._loop is not None
        try:
            asyncio.run_coroutine_threadsafe(self._on_revoked(lost), self._loop).result()
        except Exception as exc:
            log.warning("offsets consumer: dropping lost partitions %s failed (%s)", lost, exc)

    # --- plumbing ---------------------------------------------------------------------------------------------

    def _require(self) -> Consumer:
        if self._consumer is None:
            raise KafkaException(KafkaError(KafkaError._STATE, "the offsets consumer is closed"))
        return self._consumer

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        assert self._loop is not None
        return await self._loop.run_in_executor(self._executor, fn, *args)
