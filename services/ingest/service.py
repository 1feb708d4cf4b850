"""The ingest service (`lagwatch run ingest`; one worker process): the offsets topic in, per-partition windows in Redis
out.

Consumption is a Kafka consumer group, `lagwatch-ingest-<cluster>`: start several workers (`--workers N` starts N
processes) and they share the offsets topic's partitions. A consumer group's commits all land in one partition of
that topic, so each group's windows have a single writer at any time: the worker keeps its groups' windows in
memory (`window_cache.py`) and writes what a batch changed behind to Redis. On a rebalance the revoking worker
stores and commits its batch in flight first; the new owner loads the groups from Redis as their commits arrive.

The loop, per batch: fetch (up to `ingest.batch-size` records) -> decode -> apply to the windows in memory ->
write the changed windows to Redis -> commit the Kafka offsets (once the batch's commits are also on the history
topic, with `history.enabled`: `archive_queue.py`) -> report lagwatch's own position. Writing batch k overlaps with
fetching and decoding batch k+1 (two cores: Python and Redis). A failed write is retried with backoff and the
offsets are never committed past records not yet stored or archived (at-least-once; a re-read commit is a duplicate
by its `order`); a history topic that does not take commits holds only the offsets, not the windows.
SIGTERM/SIGINT: the batch in hand is finished and committed, then the worker leaves the group.

Records are read with librdkafka (`offsets_consumer.py`) rather than as a Faust stream: on this machine a Faust agent
moves 11-14k records/s (bench/bench_faust_stream.py); the other services, whose topics carry status changes rather
than every commit of every group, use Faust agents.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

from aiokafka.errors import KafkaError
from confluent_kafka import KafkaException
from redis.exceptions import RedisError

from lagwatch.services.ingest import metrics, own_progress, workers
from lagwatch.services.ingest.admin_offsets import AdminOffsets, offsets_topic_readable
from lagwatch.services.ingest.archive_queue import ArchiveQueue, Ticket
from lagwatch.services.ingest.broker_offsets import BrokerOffsets, LeadersUnreachable
from lagwatch.services.ingest.history_publisher import HistoryPublisher
from lagwatch.services.ingest.kafka_identity import KafkaIdentity
from lagwatch.services.ingest.new_protocol_groups import TopicIds
from lagwatch.services.ingest.offsets_consumer import OffsetsConsumer, ReadThrough
from lagwatch.services.ingest.pending_deletions import PendingDeletions
from lagwatch.services.ingest.processor import AppliedBatch, BatchProcessor, Flush
from lagwatch.services.ingest.records import RecordLike
from lagwatch.services.ingest.topic_retention import TopicRetentionReader
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.config import Config
from lagwatch.shared.runtime.health_server import HealthServer
from lagwatch.shared.runtime.kafka_client import client_kwargs, librdkafka_config
from lagwatch.shared.runtime.outage_log import OutageLog
from lagwatch.shared.runtime.presence import Presence
from lagwatch.shared.runtime.redis_client import connect, reply
from lagwatch.shared.runtime.redis_memory import takes_writes, warn_if_evicting
from lagwatch.shared.runtime.service_lifecycle import Backoff, pause, run_until_signalled
from lagwatch.shared.windows.changes import ChangePublisher
from lagwatch.shared.windows.ingest_totals import add_to_totals
from lagwatch.shared.windows.read_through_store import ReadThroughStore
from lagwatch.shared.windows.store import WindowStore

log = logging.getLogger(__name__)
T = TypeVar("T")
DELETIONS_EVERY_S = 1.0  # how often the api's topic deletions are looked for
DELETIONS_KEPT_MS = 60_000  # an entry no worker holds the group of is dropped after this
MAX_BACKOFF_S = 5.0
PURGE_CHUNK = 1000  # groups per round trip when deleting those the allow/deny lists exclude
GC_YOUNG_THRESHOLD = 50_000  # new tracked objects between collections (Python: 700); see _collect_garbage_less_often
GIL_SWITCH_INTERVAL_S = 0.0005  # Python: 0.005; see _switch_threads_sooner


def consumer_group(cluster: str) -> str:
    return f"lagwatch-ingest-{cluster}"


def self_group(cluster: str) -> str:
    """The consumer group under which lagwatch reports its own progress (Burrow's `burrow-<cluster>`)."""
    return f"lagwatch-{cluster}"


class IngestWorker:
    kafka_replaced = False  # set when the Kafka cluster behind the name changed while running: `run_ingest` starts over

    def __init__(self, config: Config, cluster: str, *, http_port: int | None = None) -> None:
        self.cluster = cluster
        cluster_config = config.cluster(cluster)
        self.topic = cluster_config.offsets_topic
        self.batch_size = config.ingest.batch_size
        self.session_timeout_ms = int(config.ingest.session_timeout * 1000)
        self.redis = connect(config.redis)
        self.presence = Presence(self.redis, cluster, "ingest")
        self.store = WindowStore(self.redis, config.window())
        self.read_through = ReadThroughStore(self.redis, cluster)
        kafka = client_kwargs(cluster_config, cluster)
        rdkafka = self._rdkafka = librdkafka_config(cluster_config, cluster)
        self.offsets_source = cluster_config.offsets_source
        self.admin_groups = tuple(cluster_config.admin_groups)
        self.offset_refresh = cluster_config.offset_refresh
        self.admin_mode = False  # commits come through the admin API (decided at start for `auto`)
        self.identity = KafkaIdentity(cluster, self.redis, rdkafka)
        self.history = self._history_publisher(config, rdkafka) if config.history.enabled else None
        self.broker_offsets = BrokerOffsets(
            cluster,
            self.store,
            kafka,
            offset_refresh=cluster_config.offset_refresh,
            topic_refresh=cluster_config.topic_refresh,
            history=self.history,
            retention=TopicRetentionReader(rdkafka),
        )
        self.processor = BatchProcessor(
            cluster,
            self.store,
            self.broker_offsets,
            config.group_filter(cluster),
            keep_commits=self.history is not None,
            topic_ids=TopicIds(rdkafka, lambda: self.broker_offsets.partition_counts),
        )
        self.changes = ChangePublisher(rdkafka, config.evaluator.changes_topic)
        publish = self.history.publish_commits if self.history is not None else None
        self.archive = ArchiveQueue(cluster, publish, self._commit_positions)  # between a batch's store and commit
        self.broker_offsets.changes = self.changes  # log-end notices: the evaluator re-checks groups on moved topics
        self._consumer_config = self._librdkafka_settings(rdkafka, cluster_config)
        self._inflight: asyncio.Task[bool] | None = None  # the batch being stored and committed
        self._announcing: asyncio.Future | None = None
        self.consumer = self._new_consumer()
        self.health = self._health_server(config, http_port)
        self.stopping = asyncio.Event()
        self.caught_up = asyncio.Event()  # every assigned partition read and stored up to its end (_caught_up)
        self.batches_done = 0
        self._last_self_report = self._deletions_checked = 0.0  # monotonic times they were last done
        self._positions: dict[int, int] = {}  # offsets-topic partition -> position stored (may be ahead of committed)
        self._known_topics: dict[str, int] = self.broker_offsets.partition_counts

    def _health_server(self, config: Config, http_port: int | None) -> HealthServer:
        port = config.ingest.http_port if http_port is None else http_port
        checks = {"redis": self._redis_ok, "kafka": self._kafka_ok}
        return HealthServer("ingest", checks, host=config.ingest.http_host, port=port)

    def _librdkafka_settings(self, connection: dict, cluster_config) -> dict:
        return {
            **connection,
            "group.id": consumer_group(self.cluster),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "latest" if cluster_config.start_latest else "earliest",
            "session.timeout.ms": self.session_timeout_ms,
            # a worker hears of a rebalance at its next heartbeat: the group waits for the slowest to hear it
            "heartbeat.interval.ms": max(100, min(1000, self.session_timeout_ms // 3)),
            "fetch.wait.max.ms": 100,  # an idle fetch costs little; a broker that holds fetches would cost latency
            # read-ahead while a batch is applied, bounded: librdkafka's defaults keep up to 64 MB per consumer, and
            # a couple of batches' worth keeps the worker as fast with far less memory; smaller bounds read slower
            # (bench/bench_vs_burrow.py)
            "fetch.max.bytes": 2 * 1024 * 1024,
            "queued.max.messages.kbytes": 1024,
            # a partition whose queue is over that bound is not fetched again for this long: librdkafka's 1 s default
            # left the worker idle once it had drained the queue; only full queues wait
            "fetch.queue.backoff.ms": 10,
        }

    def _new_consumer(self) -> OffsetsConsumer:
        return OffsetsConsumer(
            self._consumer_config,
            self.topic,
            on_assigned=self._on_assigned,
            on_revoked=self._on_revoked,
        )

    def _on_assigned(self, partitions: list[int]) -> None:
        log.info("ingest: assigned offsets-topic partitions %s", partitions)
        self.caught_up.clear()  # their commits since the last owner's last commit are still to be read
        self._announcing = asyncio.ensure_future(self._announce_behind())  # the poller must hear it now

    async def _announce_behind(self) -> None:
        try:
            await self.broker_offsets.announce(True)
        except (RedisError, OSError) as exc:  # the poller's next tick hears it instead
            log.debug("ingest %s: could not announce its commits behind (%s)", self.cluster, exc)

    async def _on_revoked(self, partitions: list[int]) -> None:
        """The batch in flight is stored and the batches sent archived (the consumer then commits their positions)
        before anyone takes over; then the partitions' groups leave memory."""
        await self._drain()
        await self.archive.hand_over()
        self.processor.forget_partitions(partitions)
        log.info("ingest: revoked offsets-topic partitions %s", sorted(partitions))

    def _history_publisher(self, config: Config, rdkafka: dict[str, Any]) -> HistoryPublisher:
        deletions = PendingDeletions(self.redis, self.cluster)  # kept there until the history topic took them
        return HistoryPublisher(self.cluster, rdkafka, config.history.topic, deletions)

    async def _redis_ok(self) -> bool:
        return await takes_writes(self.redis)

    async def _kafka_ok(self) -> bool:
        return self.broker_offsets.kafka_ok

    async def run(self) -> None:
        """Run until `stopping` is set; always cleans up."""
        await self.health.start()
        log.info("ingest %s: health and metrics on %s", self.cluster, self.health.url)
        await warn_if_evicting(self.redis, f"ingest {self.cluster}")
        if not self.processor.compiled:
            log.warning(
                "ingest %s: the compiled record loop and flush were not built (no C compiler at install): the "
                "same steps run in Python, about half as fast",
                self.cluster,
            )
        poller: asyncio.Task | None = None
        watcher: asyncio.Task | None = None
        self.presence.start(self.stopping)
        try:
            # Kafka down at start-up: the worker waits for it (health answering, /readyz not ready), not exits
            await self._retry("connecting to Kafka", self.broker_offsets.start)
            await self.changes.start()  # notices are best effort: a producer that cannot start is retried later
            await self._start_history()
            await self._retry("checking which Kafka cluster this is", self._verify_kafka)
            await self._first_broker_poll()
            await self._purge_excluded_groups()
            poller = asyncio.create_task(self.broker_offsets.run(self.stopping, self.caught_up))
            watcher = asyncio.create_task(self._watch_kafka_identity())
            await self._read_commits()
        finally:
            self.stopping.set()
            if poller is not None:
                await poller
            if watcher is not None:
                watcher.cancel()  # it may be waiting up to its request timeout for a broker
                await asyncio.wait({watcher})
            self.consumer.shutdown()
            await self.broker_offsets.stop()
            await self.changes.stop()
            await self.archive.stop()
            if self.history is not None:
                await self.history.stop()
            await self.health.stop()
            await self.presence.stop()
            await self.redis.aclose()

    async def _start_history(self) -> None:
        if self.history is not None:
            await self._retry("starting the history producer", self.history.start)

    async def _verify_kafka(self) -> None:
        await self.identity.verify(self._forget_kafka_data, self.stopping)

    async def _forget_kafka_data(self, recorded: str, seen: str) -> None:
        """The Kafka cluster behind the name was replaced (kafka_identity.py): forget the old one's groups and topics;
        the evaluator records the groups NOTFOUND, and the history's replay forgets the topics too."""
        groups, topics = await self.store.forget_kafka_data(self.cluster, PURGE_CHUNK)
        await self.changes.publish(self.cluster, [(g, "deleted") for g in groups])  # (notices hold 2,000 names each)
        if topics and self.history is not None:
            await self.history.publish_deletions(topics, now_ms())
        log.info(
            "ingest %s: forgot %d groups and %d topics of Kafka cluster %s",
            self.cluster,
            len(groups),
            len(topics),
            recorded,
        )

    async def _watch_kafka_identity(self) -> None:
        """Every offset-refresh: the Kafka cluster behind the name replaced while running ends this worker's run, to
        start over (`run_ingest`): its windows in memory belong to the old cluster."""
        while not self.stopping.is_set():
            await self._sleep(self.offset_refresh)
            if not self.stopping.is_set() and await self.identity.replaced():
                self.kafka_replaced = True
                self.stopping.set()
                return

    async def _first_broker_poll(self) -> None:
        """Know the log-end offsets before the first commit needs one (retrying while Kafka or Redis is down). Some
        leaders away (an offline partition, a broker down with replication 1) do not hold the start: the commits of
        their partitions find the last log end stored in Redis, or wait for theirs, and the others go on."""

        async def first_poll() -> None:
            try:
                await self.broker_offsets.tick()
            except LeadersUnreachable:  # which ones was said as a warning
                log.info("ingest %s: starting with the log ends of the leaders that answered", self.cluster)

        if not self.stopping.is_set():
            await self._retry("the first broker-offset poll", first_poll)

    async def _purge_excluded_groups(self) -> None:
        """Groups stored before the allow/deny lists changed to exclude them leave Redis at start-up: their windows
        would otherwise drift to STOP until `expire-group`. The evaluator, told they were deleted, records them
        NOTFOUND (it also drops excluded groups itself, should only its configuration have changed)."""
        group_filter = self.processor.group_filter
        if self.stopping.is_set() or not (group_filter.allowlist or group_filter.denylist):
            return
        groups = await self._retry("listing groups", lambda: self.store.list_groups(self.cluster))
        excluded = [g for g in groups or () if not group_filter.accepts(g)]

        async def delete(chunk: list[str]) -> bool:
            await self.store.delete_groups(self.cluster, chunk)
            return True

        for start in range(0, len(excluded), PURGE_CHUNK):
            chunk = excluded[start : start + PURGE_CHUNK]
            if not await self._retry("deleting excluded groups", functools.partial(delete, chunk)):
                return  # stopping
            await self.changes.publish(self.cluster, [(group, "deleted") for group in chunk])
        if excluded:
            log.info("ingest %s: deleted %d groups the allow/deny lists exclude", self.cluster, len(excluded))

    async def _consume_until_stopped(self) -> None:
        """Join the group and consume; a consumer that fails (a fatal Kafka error) is replaced after a pause.
        Records it had fetched but not committed are simply read again."""
        backoff = Backoff(0.5, MAX_BACKOFF_S)
        while not self.stopping.is_set():
            try:
                await self.consumer.start()
                await self._consume()
                backoff.reset()
            except (KafkaException, KafkaError) as exc:
                log.warning("ingest %s: consumer failed (%s); rejoining in %.1fs", self.cluster, exc, backoff.delay)
            finally:
                await self._drain()
                await self.archive.hand_over()
                await self.consumer.close()
            if not self.stopping.is_set():
                rewind = self.archive.rewind_due  # the history topic is back: read from the committed positions
                if not rewind:
                    await backoff.pause(self.stopping)
                self.consumer.shutdown()
                self.consumer = self._new_consumer()
                if rewind:
                    self.processor.read_again()
                    self.archive.rewound()

    async def _consume(self) -> None:
        while not self.stopping.is_set() and not self.archive.rewind_due:
            self.archive.watch()
            fetched = await self.consumer.fetch(self.batch_size, 0.2, want_ends=not self.caught_up.is_set())
            self._forget_deleted_topics()
            if fetched.records:
                records = cast("list[RecordLike]", fetched.records)
                if not await self._apply(records, fetched.at_end, fetched.read_through):
                    return  # stopping while Redis or Kafka was down: nothing more is committed
            else:
                if fetched.at_end and (self._inflight is None or self._inflight.done()):
                    self._caught_up(fetched.at_end)
                if fetched.read_through is not None and await self._drain():
                    await self._record_read_through(fetched.read_through)
            await self._apply_topic_deletions()
            await self._maybe_report_self()

    async def _apply(
        self, records: Sequence[RecordLike], at_end: dict[int, int] | None, read_through: ReadThrough | None = None
    ) -> bool:
        """Apply a batch to the windows in memory and start storing it, which overlaps the next fetch; False when a
        stop came while Redis or Kafka was down."""
        batch = self.processor.start(records)
        if batch.deferred:  # groups to load from Redis, log ends to ask Kafka for
            loaded = await self._retry("loading windows", lambda: self.processor.load_deferred(batch))
            if loaded is None:
                return False
        self.processor.finish(batch)  # the set-aside records, and the windows tombstones removed to the history
        if not await self._drain():
            return False
        flush = self.processor.take_flush(batch.observed_at)
        await self.archive.room()  # a bounded backlog on the history topic
        ticket = self.archive.send(batch.history)
        self._inflight = asyncio.create_task(self._store_and_commit(batch, flush, ticket, at_end, read_through))
        await asyncio.sleep(0)  # let it send its writes: Redis works on them while we fetch the next batch
        return True

    async def _apply_topic_deletions(self) -> None:
        """Topics the api deleted from groups (`store.delete_group_topic`) leave the windows in memory too, or the
        next write would bring them back. The worker holding the group takes the entry; one nobody holds is dropped
        after a minute (whoever loads the group later reads it without the topic). A commit of that topic applied
        before this check, after the deletion, goes with it. Each taken deletion goes to the history, for the replay
        (by every worker dropping one nobody held: the same deletion twice changes nothing there)."""
        now = time.monotonic()
        if now - self._deletions_checked < DELETIONS_EVERY_S:
            return
        self._deletions_checked = now
        key = keys.topic_deletions(self.cluster)
        try:
            entries = await reply(self.redis.hgetall(key))
            stale_before = now_ms() - DELETIONS_KEPT_MS
            taken = []
            for name, at in entries.items():
                group, _, topic = name.decode(errors="replace").rpartition("\n")  # a topic holds no newline
                deleted_at = _millis(at)  # None: not an entry lagwatch wrote, dropped rather than read every second
                stale = deleted_at is None or deleted_at < stale_before
                if self.processor.cache.delete_topic_of_group(group, topic) or stale:
                    taken.append(name)
                    if self.history is not None and deleted_at is not None:
                        await self.history.publish_deletions([topic], deleted_at, group)
            if taken:
                await reply(self.redis.hdel(key, *taken))
        except RedisError as exc:  # checked again in a second
            log.warning("ingest %s: could not read the api's topic deletions (%s)", self.cluster, exc)

    async def _read_commits(self) -> None:
        if await self._uses_admin_api():
            await self._poll_admin_until_stopped()
        else:
            await self._consume_until_stopped()

    async def _uses_admin_api(self) -> bool:
        if self.offsets_source != "auto":
            return self.offsets_source == "admin"
        probe = functools.partial(asyncio.to_thread, offsets_topic_readable, self._rdkafka, self.topic)
        readable = await self._retry("looking for the offsets topic", probe)
        if readable is False:
            log.warning(
                "ingest %s: the offsets topic %s is not readable here; reading commits through the admin API instead "
                "(offsets-source: auto)",
                self.cluster,
                self.topic,
            )
        return readable is False

    async def _poll_admin_until_stopped(self) -> None:
        """Admin mode (admin_offsets.py): every `offset-refresh`, the commits that changed, through the same path as
        records read from the topic; nothing to commit, no own position to report."""
        self.admin_mode = True
        self.archive.can_rewind = False  # the admin API tells what changed, never what was: nothing to read again
        admin = AdminOffsets(
            self._rdkafka,
            named_groups=self.admin_groups,
            group_filter=self.processor.group_filter,
            partition_counts=lambda: self.broker_offsets.partition_counts,
            shard=workers.worker_shard(),
        )
        log.info("ingest %s: reading commits through the admin API every %.1fs", self.cluster, self.offset_refresh)
        try:
            while not self.stopping.is_set():
                self.archive.watch()
                started, asked_at = time.monotonic(), now_ms()
                records = await self._retry("polling committed offsets", admin.poll)
                if records is None:
                    return  # stopping
                self._forget_deleted_topics()
                await self._apply_topic_deletions()
                if records and not await self._apply(records, None):
                    return
                if not await self._drain():
                    return
                self.caught_up.set()  # everything seen is stored: log-end samples may go on
                await self._record_admin_read_through(asked_at)
                await self._sleep(max(0.0, self.offset_refresh - (time.monotonic() - started)))
        finally:
            admin.close()

    async def _record_admin_read_through(self, asked_at: int) -> None:
        try:  # the poll that just stored its changes was asked at `asked_at` (a retried poll: later, still true)
            await self.read_through.record_admin(workers.worker_shard(), asked_at)
        except (RedisError, OSError) as exc:
            log.debug("ingest %s: could not record how far it read (%s)", self.cluster, exc)

    def _forget_deleted_topics(self) -> None:
        """The poller removed deleted topics (and re-created ones with fewer partitions) from Redis; their rings
        must leave memory too (or a later write would bring them back). Its topic table is replaced, never changed in
        place, so an identity check suffices."""
        current = self.broker_offsets.partition_counts
        if current is not self._known_topics:
            gone = {topic for topic, count in self._known_topics.items() if current.get(topic, 0) < count}
            if gone and current:
                self.processor.cache.forget_topics(gone)
            self._known_topics = current

    def _caught_up(self, positions: dict[int, int]) -> None:
        """Log-end polls may go on (the poller waits for this after an assignment), and lagwatch's own group gets
        every assigned partition's position, also of those with nothing new since the last owner (a restarted
        worker) — reported from `_positions` alone they would keep the last owner's final report, stale for good.
        Partitions that never held a record have no progress to report."""
        self._positions.update({partition: end for partition, end in positions.items() if end > 0})
        self.caught_up.set()

    async def _drain(self) -> bool:
        """Wait for the batch in flight; False when it was abandoned (stopping while Redis was down)."""
        inflight, self._inflight = self._inflight, None
        return True if inflight is None else await inflight

    async def _store_and_commit(
        self,
        batch: AppliedBatch,
        flush: Flush,
        ticket: Ticket,
        at_end: dict[int, int] | None,
        read_through: ReadThrough | None,
    ) -> bool:
        if not await self._store_with_retry(flush, batch.tally):
            return False  # left uncommitted: read again later
        if batch.touched:
            await self.changes.publish(self.cluster, batch.touched.items())  # the evaluator's trigger (best effort)
        self.archive.stored(ticket, batch.positions)  # committed once archived (archive_queue.py)
        self._positions.update(batch.positions)
        self.batches_done += 1
        if at_end:
            self._caught_up(at_end)
        if read_through is not None:
            await self._record_read_through(read_through)
        return True

    async def _record_read_through(self, read_through: ReadThrough) -> None:
        """Tell the evaluator and the api how far the commits are stored (shared/windows/read_through.py): the rules
        judge no later than that. Best effort: the next one, a quarter of a second on, says more."""
        try:
            await self.read_through.record_partitions(read_through.partitions, read_through.at_ms)
        except (RedisError, OSError) as exc:
            log.debug("ingest %s: could not record how far it read (%s)", self.cluster, exc)

    def _commit_positions(self, positions: dict[int, int]) -> None:
        """A batch stored and archived, and those before it: its positions are committed (topic mode)."""
        if not self.admin_mode:
            self.consumer.commit(positions)

    async def _retry(self, what: str, operation: Callable[[], Awaitable[T]]) -> T | None:
        """Run `operation` until it succeeds, backing off with jitter; None when a stop interrupted the retries."""
        backoff = Backoff(0.1, MAX_BACKOFF_S)
        outage = OutageLog(log, f"ingest {self.cluster}: {what} failed")
        while True:
            try:
                result = await operation()
                outage.ok()
                return result
            except (RedisError, KafkaError, KafkaException, OSError) as exc:
                self.caught_up.clear()  # commits wait: log-end samples must wait with them (see BrokerOffsets.run)
                metrics.RETRIES.labels(self.cluster).inc()
                outage.failed(exc, f"retrying in {backoff.delay:.1f}s")
                if self.stopping.is_set():
                    return None
                await backoff.pause(self.stopping)

    async def _store_with_retry(self, flush: Flush, tally: Counter[str]) -> bool:
        if await self._retry("storing a batch", lambda: self._write(flush)) is None:
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

    async def _maybe_report_self(self) -> None:
        if not self._positions:
            return
        now = time.monotonic()
        assigned = self.consumer.assigned
        positions = {p: pos for p, pos in self._positions.items() if p in assigned}
        log_ends = {p: self.broker_offsets.latest.get((self.topic, p)) for p in positions}
        if not own_progress.report_due(now - self._last_self_report, positions, log_ends):
            return  # records the poller saw are being stored (own_progress.py)
        self._last_self_report = now
        try:
            await self.processor.report_own_progress(self_group(self.cluster), self.topic, positions)
        except (RedisError, KafkaError, OSError, ValueError) as exc:  # ValueError: a position the store refuses
            log.warning("ingest %s: could not report own progress (%s)", self.cluster, exc)

    async def _sleep(self, seconds: float) -> None:
        await pause(self.stopping, seconds)


async def run_ingest(config: Config, cluster: str, *, http_port: int | None = None) -> None:
    """`lagwatch run ingest`: run one worker until SIGTERM or SIGINT."""
    _collect_garbage_less_often()
    _switch_threads_sooner()
    while True:
        worker = IngestWorker(config, cluster, http_port=http_port)
        await run_until_signalled(worker)
        if not worker.kafka_replaced:
            return
        log.warning("ingest %s: starting over on the new Kafka cluster", cluster)


def _collect_garbage_less_often() -> None:
    """Every batch brings thousands of records (objects the cyclic garbage collector tracks), so at Python's default
    (a collection every 700 new objects) the collector ran several times per batch and, now and then, walked every
    group held in memory, a large share of the worker's CPU. The worker makes few reference cycles; collecting every
    GC_YOUNG_THRESHOLD objects, with what was loaded at start-up frozen out of the collector's walks, costs far less
    (bench/bench_vs_burrow.py)."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 50, 100)


def _switch_threads_sooner() -> None:
    """The consumer's thread builds each fetched batch's records while the event loop's thread waits for them, and
    the event loop's thread applies a batch while the consumer's waits for the GIL to start the next fetch: at
    Python's default, a thread that wants the GIL waits up to 5 ms for the other to let go, each time; a shorter
    interval lets the two threads overlap (bench/bench_vs_burrow.py)."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)


def _millis(at: bytes) -> int | None:
    """A deletion entry's time (ms), or None when lagwatch did not write it."""
    try:
        return int(at)
    except ValueError:
        return None
