"""The ingest service (`lagwatch run ingest`; one worker process): the offsets topic in, per-partition windows in Redis
out. Commits come in through `commit_readers.py`; each batch goes through `batch_pipeline.py`; one worker polls the
brokers' log ends (`broker_offsets.py`). SIGTERM/SIGINT: the batch in hand is finished and committed, then the
worker leaves the group. Records are read with librdkafka, far faster than a Faust stream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from aiokafka.errors import KafkaError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from lagwatch.services.ingest import own_progress, workers
from lagwatch.services.ingest.archive_queue import ArchiveQueue
from lagwatch.services.ingest.batch_pipeline import BatchPipeline, Retrying
from lagwatch.services.ingest.broker_offsets import BrokerOffsets
from lagwatch.services.ingest.commit_readers import AdminReader, TopicReader, consumer_settings, reads_admin_api
from lagwatch.services.ingest.history_publisher import HistoryPublisher
from lagwatch.services.ingest.kafka_identity import KafkaIdentity
from lagwatch.services.ingest.log_probe import LogProbe
from lagwatch.services.ingest.new_protocol_groups import TopicIds
from lagwatch.services.ingest.offsets_consumer import OffsetsConsumer
from lagwatch.services.ingest.pending_deletions import PendingDeletions
from lagwatch.services.ingest.probe_schedule import ProbeSchedule, probes_per_tick
from lagwatch.services.ingest.processor import BatchProcessor
from lagwatch.services.ingest.start_up import StartUp
from lagwatch.services.ingest.topic_deletions import TopicDeletions
from lagwatch.services.ingest.topic_retention import TopicRetentionReader
from lagwatch.shared.runtime.config import Config
from lagwatch.shared.runtime.health_server import ReadinessCheck
from lagwatch.shared.runtime.heap import give_back_free_memory
from lagwatch.shared.runtime.kafka_client import client_kwargs, librdkafka_config
from lagwatch.shared.runtime.redis_client import connect
from lagwatch.shared.runtime.service import Service
from lagwatch.shared.runtime.service_lifecycle import pause, run_until_signalled
from lagwatch.shared.windows.changes import ChangePublisher
from lagwatch.shared.windows.store import WindowStore

log = logging.getLogger(__name__)
BACKLOG_CHECK_S = 1.0  # how often the worker looks whether it has caught up (to give back memory)
GIVE_BACK_EVERY_S = 30.0  # then how often it gives back free memory (a trim costs a walk of the heap's free blocks)


def consumer_group(cluster: str) -> str:
    return f"lagwatch-ingest-{cluster}"


def self_group(cluster: str) -> str:
    """The consumer group under which lagwatch reports its own progress (Burrow's `burrow-<cluster>`)."""
    return f"lagwatch-{cluster}"


class IngestWorker(Service):
    kafka_replaced = False  # set when the Kafka cluster behind the name changed while running: `run_ingest` starts over

    def __init__(self, config: Config, cluster: str, *, http_port: int | None = None) -> None:
        port = config.ingest.http_port if http_port is None else http_port
        redis = connect(config.redis)
        super().__init__("ingest", cluster, host=config.ingest.http_host, port=port, redis=redis, announce=True)
        self.cluster_config = cluster_config = config.cluster(cluster)
        self.topic = cluster_config.offsets_topic
        self.caught_up = asyncio.Event()  # every assigned partition read and stored up to its end
        self.admin_mode = False  # commits come through the admin API (decided at start for `auto`)
        self.rdkafka = rdkafka = librdkafka_config(cluster_config, cluster)
        self.store = WindowStore(redis, config.window())
        self.identity = KafkaIdentity(cluster, redis, rdkafka)
        self.history = (
            HistoryPublisher(cluster, rdkafka, config.history.topic, PendingDeletions(redis, cluster))
            if config.history.enabled
            else None
        )
        self.broker_offsets = BrokerOffsets(
            cluster,
            self.store,
            client_kwargs(cluster_config, cluster),
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
        self.changes = self.broker_offsets.changes = ChangePublisher(rdkafka, config.evaluator.changes_topic)
        self._assemble(config, redis)

    def _assemble(self, config: Config, redis: Redis) -> None:
        """The steps from a record to its commit, on the stage objects above."""
        publish = self.history.publish_commits if self.history is not None else None
        self.archive = ArchiveQueue(self.cluster, publish, self._commit_positions)  # between a batch's store and commit
        self.retry = Retrying(self.cluster, self.stopping, self.caught_up)
        self.pipeline = BatchPipeline(self.processor, self.archive, self.changes, redis, self.retry, self.topic)
        self.deletions = TopicDeletions(redis, self.processor, self.broker_offsets, self.history)
        self.start_up = StartUp(
            self.identity, self.broker_offsets, self.changes, self.history, self.processor.group_filter, self.retry
        )
        settings = consumer_settings(
            self.rdkafka, consumer_group(self.cluster), config.ingest.session_timeout, self.cluster_config.start_latest
        )
        self.topic_reader = TopicReader(
            settings, self.topic, config.ingest.batch_size, self.pipeline, self.deletions, self._maybe_report_self
        )
        self.probes = (
            ProbeSchedule(
                self.cluster,
                LogProbe(self.rdkafka),
                self.processor.cache,
                lambda: self.broker_offsets.latest,
                redis,
                self.changes,
                self.cluster_config.offset_refresh,
                config.window().lag_history_ms,
                self.history,
                lambda: probes_per_tick(
                    config.ingest.log_probe_rate, self.cluster_config.offset_refresh, self._share_of_cluster()
                ),
            )
            if config.ingest.log_probe
            else None
        )
        if self.probes is not None:  # fed what changed: stored commits and moved log ends
            self.pipeline.stored_groups = self.probes.touched
            self.broker_offsets.moves = self.probes.moves
        self._reader: asyncio.Task[None] | None = None  # reading commits, until a stop
        self._poller: asyncio.Task[None] | None = None  # the log-end poller, which ends at a stop by itself
        self._last_self_report = 0.0  # monotonic

    @property
    def consumer(self) -> OffsetsConsumer:
        return self.topic_reader.consumer

    @property
    def batches_done(self) -> int:
        return self.pipeline.batches_done

    def readiness(self) -> dict[str, ReadinessCheck]:
        async def kafka_ok() -> bool:
            return self.broker_offsets.kafka_ok

        return {"kafka": kafka_ok}

    async def start_work(self) -> None:
        if not self.processor.compiled:
            log.warning(
                "ingest %s: the compiled record loop and flush were not built (no C compiler at install): the "
                "same steps run in Python (the reference), several times slower",
                self.cluster,
            )
        # Kafka down at start-up: the worker waits for it (health answering, /readyz not ready), not exits
        if not await self.start_with_retries(self.broker_offsets.start, "the broker-offsets client"):
            return
        await self.changes.start()  # notices are best effort: a producer that cannot start is retried later
        history = self.history
        if history is not None and not await self.start_with_retries(history.start, "the history producer"):
            return
        await self.start_up.run()
        if self.stopping.is_set():
            return
        self._poller = asyncio.create_task(self.broker_offsets.run(self.stopping, self.caught_up))
        self.spawn(self._end_if_kafka_replaced())  # cancelled at the stop: it may wait for a broker's answer
        self._reader = asyncio.create_task(self._read_commits())
        if self.probes is not None:
            self.spawn(self.probes.run(self.stopping))
        self.spawn(give_back_memory_after_backlogs(self.caught_up, self.stopping, give_back_free_memory))

    async def _read_commits(self) -> None:
        try:
            source = self.cluster_config.offsets_source
            if await reads_admin_api(source, self.rdkafka, self.topic, self.retry):
                self.admin_mode = True
                await self.retry("forgetting the commit clock", self.pipeline.clock.forget)
                await AdminReader(self.rdkafka, self.cluster_config, self.pipeline, self.deletions).run()
            else:
                await self.topic_reader.run()
        finally:
            self.stopping.set()  # a reader that failed ends the run, and `stop_work` raises its error

    async def _end_if_kafka_replaced(self) -> None:
        if await self.identity.watch(self.stopping, self.cluster_config.offset_refresh):
            self.kafka_replaced = True
            self.stopping.set()

    async def stop_work(self) -> None:
        self.stopping.set()
        try:
            if self._reader is not None:
                await self._reader  # the batch in hand is stored and committed, then the group left
        finally:
            if self._poller is not None:
                await self._poller
            self.consumer.shutdown()
            await self.broker_offsets.stop()
            if self.probes is not None:
                self.probes.close()
            await self.changes.stop()
            await self.archive.stop()
            if self.history is not None:
                await self.history.stop()

    def _share_of_cluster(self) -> float:
        """This worker's part of the cluster's work: its share of the offsets topic's partitions (topic mode), of the
        groups (admin mode: `--workers N` splits them)."""
        if self.admin_mode:
            return 1 / workers.worker_shard()[1]
        total = self.broker_offsets.partition_counts.get(self.topic)
        return len(self.consumer.assigned) / total if total else 1.0

    def _commit_positions(self, positions: dict[int, int]) -> None:
        """A batch stored and archived, and those before it: its positions are committed (topic mode)."""
        if not self.admin_mode:
            self.consumer.commit(positions)

    async def _maybe_report_self(self) -> None:
        if not self.pipeline.positions:
            return
        now = time.monotonic()
        assigned = self.consumer.assigned
        positions = {p: pos for p, pos in self.pipeline.positions.items() if p in assigned}
        log_ends = {p: self.broker_offsets.latest.get((self.topic, p)) for p in positions}
        if not own_progress.report_due(now - self._last_self_report, positions, log_ends):
            return  # records the poller saw are being stored (own_progress.py)
        self._last_self_report = now
        try:
            await self.processor.report_own_progress(self_group(self.cluster), self.topic, positions)
        except (RedisError, KafkaError, OSError, ValueError) as exc:  # ValueError: a position the store refuses
            log.warning("ingest %s: could not report own progress (%s)", self.cluster, exc)


async def give_back_memory_after_backlogs(
    caught_up: asyncio.Event, stopping: asyncio.Event, give_back: Callable[[], None]
) -> None:
    """`give_back` as soon as the worker has caught up with its commits (its start's backlog, or one after an outage),
    then every GIVE_BACK_EVERY_S while it stays caught up: reading a backlog, and the probe schedule's first judging
    of every ring after it, leave freed buffers in the heap that steady reading does not need again."""
    given_back_at: float | None = None  # monotonic; None: not since the worker last fell behind
    while not stopping.is_set():
        now = time.monotonic()
        if not caught_up.is_set():
            given_back_at = None
        elif given_back_at is None or now - given_back_at >= GIVE_BACK_EVERY_S:
            give_back()
            given_back_at = now
        await pause(stopping, BACKLOG_CHECK_S)


async def run_ingest(config: Config, cluster: str, *, http_port: int | None = None) -> None:
    """`lagwatch run ingest`: run one worker until SIGTERM or SIGINT."""
    workers.collect_garbage_less_often()
    workers.switch_threads_sooner()
    while True:
        worker = IngestWorker(config, cluster, http_port=http_port)
        await run_until_signalled(worker)
        if not worker.kafka_replaced:
            return
        log.warning("ingest %s: starting over on the new Kafka cluster", cluster)
