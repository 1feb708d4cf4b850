"""The two ways commits come in, each feeding the batch pipeline (batch_pipeline.py) until a stop.

Topic mode (`TopicReader`): the offsets topic read in the consumer group `lagwatch-ingest-<cluster>`. A group's
commits all land in one partition of that topic, so each group's windows have a single writer at any time; on a
rebalance the revoking worker stores and commits its batch in flight first. A consumer that fails is replaced after
a pause; records it had fetched but not committed are read again.

Admin mode (`AdminReader`, admin_offsets.py): where the offsets topic is not readable, the admin API is asked every
`offset-refresh` for the commits that changed; nothing to commit, no own position to report.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from aiokafka.errors import KafkaError
from confluent_kafka import KafkaException
from redis.exceptions import RedisError

from lagwatch.services.ingest import workers
from lagwatch.services.ingest.admin_offsets import AdminOffsets, offsets_topic_readable
from lagwatch.services.ingest.batch_pipeline import MAX_BACKOFF_S, BatchPipeline, Retrying
from lagwatch.services.ingest.offsets_consumer import OffsetsConsumer
from lagwatch.services.ingest.records import RecordLike
from lagwatch.services.ingest.topic_deletions import TopicDeletions
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.config import ClusterConfig
from lagwatch.shared.runtime.service_lifecycle import Backoff, pause

log = logging.getLogger(__name__)


def consumer_settings(connection: dict[str, Any], group: str, session_timeout_s: float, start_latest: bool) -> dict:
    session_timeout_ms = int(session_timeout_s * 1000)
    return {
        **connection,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "latest" if start_latest else "earliest",
        "session.timeout.ms": session_timeout_ms,
        # a worker hears of a rebalance at its next heartbeat: the group waits for the slowest to hear it
        "heartbeat.interval.ms": max(100, min(1000, session_timeout_ms // 3)),
        "fetch.wait.max.ms": 100,  # an idle fetch costs little; a broker that holds fetches would cost latency
        # read-ahead while a batch is applied, a couple of batches' worth (librdkafka's default: up to 64 MB)
        "fetch.max.bytes": 2 * 1024 * 1024,
        "queued.max.messages.kbytes": 1024,
        # a partition whose queue is over that bound waits this long (librdkafka's 1 s left the worker idle)
        "fetch.queue.backoff.ms": 10,
    }


class TopicReader:
    def __init__(
        self,
        settings: dict[str, Any],
        topic: str,
        batch_size: int,
        pipeline: BatchPipeline,
        deletions: TopicDeletions,
        after_batch: Callable[[], Awaitable[None]],
    ) -> None:
        self.settings, self.topic, self.batch_size = settings, topic, batch_size
        self.pipeline, self.deletions, self.broker_offsets = pipeline, deletions, deletions.broker_offsets
        self.after_batch = after_batch  # lagwatch's own progress, reported between batches
        self.cluster, self.stopping = pipeline.cluster, pipeline.retry.stopping
        self._announcing: asyncio.Future | None = None
        self._said_behind = False
        self.consumer = self._new_consumer()

    def _new_consumer(self) -> OffsetsConsumer:
        return OffsetsConsumer(self.settings, self.topic, on_assigned=self._on_assigned, on_revoked=self._on_revoked)

    def _on_assigned(self, partitions: list[int]) -> None:
        log.info("ingest: assigned offsets-topic partitions %s", partitions)
        self.pipeline.caught_up.clear()  # their commits since the last owner's last commit are still to be read
        self.pipeline.clock.assigned()
        self._announce(behind=True)  # the poller must hear it now

    def _announce(self, *, behind: bool) -> None:
        """Say now, after what was said before, whether this worker's commits are behind: the poller holds its samples
        and the evaluator new groups' first evaluations meanwhile (the poller's tick would say it up to a tick late)."""
        self._said_behind = behind
        previous = self._announcing
        self._announcing = asyncio.ensure_future(self._announce_after(previous, behind))

    async def _announce_after(self, previous: asyncio.Future | None, behind: bool) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        try:
            await self.broker_offsets.lease.announce(behind)
        except (RedisError, OSError) as exc:  # the poller's next tick says it instead
            log.debug("ingest %s: could not announce whether its commits are behind (%s)", self.cluster, exc)

    async def _on_revoked(self, partitions: list[int]) -> None:
        """The batch in flight is stored and the batches sent archived (the consumer then commits their positions)
        before anyone takes over; then the partitions' groups leave memory."""
        await self.pipeline.drain()
        await self.pipeline.archive.hand_over()
        self.pipeline.processor.cache.forget_partitions(partitions)  # flushed before
        self.pipeline.clock.revoked(partitions)
        log.info("ingest: revoked offsets-topic partitions %s", sorted(partitions))

    async def run(self) -> None:
        """Join the group and consume until a stop; rejoin after a failure, or to read again after a history-topic
        outage (archive_queue.py)."""
        backoff, archive = Backoff(0.5, MAX_BACKOFF_S), self.pipeline.archive
        while not self.stopping.is_set():
            try:
                await self.consumer.start()
                await self._consume()
                backoff.reset()
            except (KafkaException, KafkaError) as exc:
                log.warning("ingest %s: consumer failed (%s); rejoining in %.1fs", self.cluster, exc, backoff.delay)
            finally:
                await self.pipeline.drain()
                await archive.hand_over()
                await self.consumer.close()
            if not self.stopping.is_set():
                rewind = archive.rewind_due  # the history topic is back: read from the committed positions
                if not rewind:
                    await backoff.pause(self.stopping)
                self.consumer.shutdown()
                self.consumer = self._new_consumer()
                if rewind:
                    self.pipeline.processor.read_again()
                    archive.rewound()

    async def _consume(self) -> None:
        pipeline, archive = self.pipeline, self.pipeline.archive
        while not self.stopping.is_set() and not archive.rewind_due:
            archive.watch()
            fetched = await self.consumer.fetch(self.batch_size, 0.2, want_ends=not pipeline.caught_up.is_set())
            self.deletions.forget_deleted()
            if fetched.records:
                records = cast("list[RecordLike]", fetched.records)
                if not await pipeline.apply(records, fetched.at_end, fetched.read_through):
                    return  # stopping while Redis or Kafka was down: nothing more is committed
            else:
                await pipeline.fetched_nothing(fetched.at_end, fetched.read_through)
            if self._said_behind and pipeline.caught_up.is_set():  # set here or by the batch stored meanwhile
                self._announce(behind=False)
            await self.deletions.apply_api_deletions()
            await self.after_batch()


async def reads_admin_api(source: str, rdkafka: dict[str, Any], topic: str, retry: Retrying) -> bool:
    """Whether commits are read through the admin API: `offsets-source` says, or with `auto` whether the offsets
    topic is readable here."""
    if source != "auto":
        return source == "admin"
    probe = functools.partial(asyncio.to_thread, offsets_topic_readable, rdkafka, topic)
    readable = await retry("looking for the offsets topic", probe)
    if readable is False:
        log.warning(
            "ingest %s: the offsets topic %s is not readable here; reading commits through the admin API instead "
            "(offsets-source: auto)",
            retry.cluster,
            topic,
        )
    return readable is False


class AdminReader:
    def __init__(
        self, rdkafka: dict[str, Any], cluster: ClusterConfig, pipeline: BatchPipeline, deletions: TopicDeletions
    ) -> None:
        self.rdkafka, self.named_groups, self.every = rdkafka, tuple(cluster.admin_groups), cluster.offset_refresh
        self.pipeline, self.deletions, self.broker_offsets = pipeline, deletions, deletions.broker_offsets
        self.cluster, self.retry, self.stopping = pipeline.cluster, pipeline.retry, pipeline.retry.stopping

    async def run(self) -> None:
        """Poll until a stop (or a stop while Redis or Kafka was down)."""
        self.pipeline.archive.can_rewind = False  # the admin API tells what changed, never what was: nothing to read
        admin = AdminOffsets(
            self.rdkafka,
            named_groups=self.named_groups,
            group_filter=self.pipeline.processor.group_filter,
            partition_counts=lambda: self.broker_offsets.partition_counts,
            shard=workers.worker_shard(),
        )
        log.info("ingest %s: reading commits through the admin API every %.1fs", self.cluster, self.every)
        try:
            while not self.stopping.is_set():
                started = time.monotonic()
                if not await self._poll(admin):
                    return
                await pause(self.stopping, max(0.0, self.every - (time.monotonic() - started)))
        finally:
            admin.close()

    async def _poll(self, admin: AdminOffsets) -> bool:
        """One round: what changed, applied and stored; False when a stop came meanwhile."""
        self.pipeline.archive.watch()
        asked_at = now_ms()
        records = await self.retry("polling committed offsets", admin.poll)
        if records is None:
            return False  # stopping
        self.deletions.forget_deleted()
        await self.deletions.apply_api_deletions()
        if records and not await self.pipeline.apply(records, None):
            return False
        if not await self.pipeline.drain():
            return False
        self.pipeline.caught_up.set()  # everything seen is stored: log-end samples may go on
        try:  # the poll that just stored its changes was asked at `asked_at` (a retried poll: later, still true)
            await self.pipeline.read_through.record_admin(workers.worker_shard(), asked_at)
        except (RedisError, OSError) as exc:
            log.debug("ingest %s: could not record how far it read (%s)", self.cluster, exc)
        return True
