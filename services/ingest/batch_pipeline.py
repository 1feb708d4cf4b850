"""A batch from its records to its commit: applied to the windows in memory, written behind to Redis while the next
batch is fetched (two cores: Python and Redis), announced to the evaluator, then committed once it is also on the
history topic (`archive_queue.py`). A failed write is retried with backoff (`Retrying`) and the offsets are never
committed past records not yet stored (at-least-once; a re-read commit is a duplicate by its `order`)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TypeVar

from aiokafka.errors import KafkaError
from confluent_kafka import KafkaException
from redis.asyncio import Redis
from redis.exceptions import RedisError

from lagwatch.services.ingest import metrics
from lagwatch.services.ingest.archive_queue import ArchiveQueue, Ticket
from lagwatch.services.ingest.commit_clock import CommitClock
from lagwatch.services.ingest.offsets_consumer import ReadThrough
from lagwatch.services.ingest.processor import AppliedBatch, BatchProcessor, Flush
from lagwatch.services.ingest.records import AdminStep, RecordLike
from lagwatch.shared.runtime.outage_log import OutageLog
from lagwatch.shared.runtime.service_lifecycle import Backoff
from lagwatch.shared.windows.changes import ChangePublisher
from lagwatch.shared.windows.ingest_totals import add_to_totals
from lagwatch.shared.windows.read_through_store import ReadThroughStore

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_BACKOFF_S = 5.0


class Retrying:
    """How the ingest waits out Redis or Kafka: a step is tried again, backing off with jitter, until it succeeds or
    a stop is asked. Commits wait meanwhile, so the log-end samples wait with them (`caught_up` cleared: see
    `BrokerOffsets.run`)."""

    def __init__(self, cluster: str, stopping: asyncio.Event, caught_up: asyncio.Event) -> None:
        self.cluster, self.stopping, self.caught_up = cluster, stopping, caught_up

    async def __call__(self, what: str, operation: Callable[[], Awaitable[T]]) -> T | None:
        """Run `operation` until it succeeds; None when a stop interrupted the retries."""
        backoff = Backoff(0.1, MAX_BACKOFF_S)
        outage = OutageLog(log, f"ingest {self.cluster}: {what} failed")
        while True:
            try:
                result = await operation()
            except (RedisError, KafkaError, KafkaException, OSError) as exc:
                self.caught_up.clear()
                metrics.RETRIES.labels(self.cluster).inc()
                outage.failed(exc, f"retrying in {backoff.delay:.1f}s")
                if self.stopping.is_set():
                    return None
                await backoff.pause(self.stopping)
            else:
                outage.ok()
                return result


class BatchPipeline:
    def __init__(
        self,
        processor: BatchProcessor,
        archive: ArchiveQueue,
        changes: ChangePublisher,
        redis: Redis,
        retry: Retrying,
        offsets_topic: str,
    ) -> None:
        self.cluster = archive.cluster
        self.processor, self.archive, self.changes, self.redis, self.retry = processor, archive, changes, redis, retry
        self.read_through = ReadThroughStore(redis, self.cluster)
        offsets = processor.broker_offsets  # knows the offsets topic's partition count from its topic refresh
        self.clock = CommitClock(self.cluster, redis, lambda: offsets.partition_counts.get(offsets_topic))
        self.caught_up = retry.caught_up  # every assigned partition read and stored up to its end (`reached_ends`)
        self.positions: dict[int, int] = {}  # offsets-topic partition -> position stored (may be ahead of committed)
        self.batches_done = 0
        self.stored_groups: Callable[[Iterable[str]], None] | None = None  # told each batch's groups once stored
        self._inflight: asyncio.Task[bool] | None = None  # the batch being stored and committed

    async def apply(
        self,
        records: Sequence[RecordLike | AdminStep],
        at_end: dict[int, int] | None,
        read_through: ReadThrough | None = None,
    ) -> bool:
        """Apply a batch to the windows in memory and start storing it, which overlaps the next fetch; False when a
        stop came while Redis or Kafka was down."""
        fresh = self.caught_up.is_set()  # read at the log end: these commits tell the commit clock (commit_clock.py)
        self.processor.clock_offsets = await self.clock.offsets()
        batch = self.processor.start(records)
        deferred = batch.deferred  # groups to load from Redis, log ends to ask Kafka for
        if deferred and await self.retry("loading windows", lambda: self.processor.load_deferred(batch)) is None:
            return False
        self.processor.finish(batch)  # the set-aside records, and the windows tombstones removed to the history
        self.clock.applied(batch, fresh=fresh)
        if not await self.drain():
            return False
        flush = self.processor.take_flush(batch.observed_at)
        await self.archive.room()  # a bounded backlog on the history topic
        ticket = self.archive.send(batch.history)
        self._inflight = asyncio.create_task(self._store_and_commit(batch, flush, ticket, at_end, read_through))
        await asyncio.sleep(0)  # let it send its writes: Redis works on them while we fetch the next batch
        return True

    async def fetched_nothing(self, at_end: dict[int, int] | None, read_through: ReadThrough | None) -> None:
        """An empty fetch still says how far the partitions are read, once the batch in flight is stored."""
        if at_end and (self._inflight is None or self._inflight.done()):
            self.reached_ends(at_end)
        if read_through is not None and await self.drain():
            await self.record_read_through(read_through)

    async def drain(self) -> bool:
        """Wait for the batch in flight; False when it was abandoned (stopping while Redis was down)."""
        inflight, self._inflight = self._inflight, None
        return True if inflight is None else await inflight

    def reached_ends(self, positions: dict[int, int]) -> None:
        """Log-end polls may go on, and lagwatch's own group gets every assigned partition's position, also of those
        with nothing new since the last owner (else its final report stays, stale for good)."""
        self.positions.update({partition: end for partition, end in positions.items() if end > 0})
        self.caught_up.set()

    async def record_read_through(self, read_through: ReadThrough) -> None:
        """Tell the evaluator and the api how far the commits are stored (shared/windows/read_through.py): the rules
        judge no later than that. Best effort: the next one, a quarter of a second on, says more."""
        try:
            await self.read_through.record_partitions(read_through.partitions, read_through.at_ms)
        except (RedisError, OSError) as exc:
            log.debug("ingest %s: could not record how far it read (%s)", self.cluster, exc)

    async def _store_and_commit(
        self,
        batch: AppliedBatch,
        flush: Flush,
        ticket: Ticket,
        at_end: dict[int, int] | None,
        read_through: ReadThrough | None,
    ) -> bool:
        if not await self._store(flush, batch.tally):
            return False  # left uncommitted: read again later
        self.clock.stored(batch)
        if batch.touched:
            if self.stored_groups is not None:
                self.stored_groups(batch.touched)
            await self.changes.publish(self.cluster, batch.touched.items())  # the evaluator's trigger (best effort)
        self.archive.stored(ticket, batch.positions)  # committed once archived (archive_queue.py)
        self.positions.update(batch.positions)
        self.batches_done += 1
        if at_end:
            self.reached_ends(at_end)
        if read_through is not None:
            await self.record_read_through(read_through)
        await self.clock.export()
        return True

    async def _store(self, flush: Flush, tally: Counter[str]) -> bool:
        if await self.retry("storing a batch", lambda: self._write(flush)) is None:
            return False
        metrics.observe(self.cluster, tally)
        try:
            await add_to_totals(self.redis, self.cluster, tally)
        except RedisError as exc:  # counters are best effort; the windows are already stored
            log.warning("ingest %s: could not add to the stats totals (%s)", self.cluster, exc)
        return True

    async def _write(self, flush: Flush) -> bool:
        await self.processor.write(flush)
        return True
