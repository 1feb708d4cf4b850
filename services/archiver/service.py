"""The archiver service: consumes the history topic (`history.topic`) and writes its records to Parquet files
partitioned by cluster and date under `history.path` (`shared/store/history_files.py`).

Memory is bounded by `history.flush-rows`: at that many records buffered (checked after each message, which holds
at most `history.MESSAGE_BYTES` of records), or every `history.flush-interval` seconds, the buffer is written and
only then the consumer's position committed, so a
crash loses nothing (the records after the last commit are read again; a duplicate commit is harmless to the replay,
which drops repeated `order`s). Records that are not history records are counted
(`lagwatch_archiver_records_total{outcome="bad"}`) and skipped. Several archivers share the topic's partitions as
one consumer group; each writes its own files.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from prometheus_client import Counter

from lagwatch.shared.config import Config
from lagwatch.shared.domain.history import HistoryRecordInvalid, decode, records_of
from lagwatch.shared.kafka.kafka_client import client_kwargs
from lagwatch.shared.runtime.health_server import HealthServer
from lagwatch.shared.runtime.service_lifecycle import Backoff, run_until_signalled
from lagwatch.shared.store.history_files import HistoryFileWriter

log = logging.getLogger(__name__)
RECORDS = Counter("lagwatch_archiver_records_total", "History records read", ["cluster", "outcome"])
FILES = Counter("lagwatch_archiver_files_total", "Parquet files written", ["cluster"])
MAX_BACKOFF_S = 30.0


def consumer_group(cluster: str) -> str:
    return f"lagwatch-archiver-{cluster}"


class _FlushBeforeRevoke(ConsumerRebalanceListener):
    """Records of partitions about to move are written (and their positions committed) first, so the next owner
    does not write them again."""

    def __init__(self, archiver: Archiver) -> None:
        self.archiver = archiver

    async def on_partitions_revoked(self, revoked) -> None:
        await self.archiver.flush()

    async def on_partitions_assigned(self, assigned) -> None:
        return None


class Archiver:
    def __init__(self, config: Config, cluster: str, *, http_port: int | None = None) -> None:
        self.cluster = cluster
        self.settings = config.history
        self.writer = HistoryFileWriter(self.settings.path, flush_rows=self.settings.flush_rows)
        self._kafka = client_kwargs(config.cluster(cluster), cluster)
        self.consumer = self._new_consumer()
        self.health = HealthServer(
            "archiver",
            {"kafka": self._kafka_ok},
            host=self.settings.http_host,
            port=self.settings.http_port if http_port is None else http_port,
        )
        self.stopping = asyncio.Event()
        self.positions: dict = {}  # next offsets to commit once the buffer is written
        self._last_flush = time.monotonic()
        self._kafka_up = False
        self._flush_lock = asyncio.Lock()

    def _new_consumer(self) -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(
            **self._kafka,
            group_id=consumer_group(self.cluster),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=min(10_000, self.settings.flush_rows),
            fetch_max_wait_ms=500,
        )
        consumer.subscribe([self.settings.topic], listener=_FlushBeforeRevoke(self))
        return consumer

    async def _kafka_ok(self) -> bool:
        return self._kafka_up

    async def run(self) -> None:
        await self.health.start()
        log.info(
            "archiver %s: %s -> %s; health on %s",
            self.cluster,
            self.settings.topic,
            self.settings.path,
            self.health.url,
        )
        backoff = Backoff(0.5, MAX_BACKOFF_S)
        try:
            while not self.stopping.is_set():
                try:
                    await self.consumer.start()
                    self._kafka_up = True
                    await self._consume()
                    backoff.reset()
                except (KafkaError, OSError) as exc:
                    log.warning(
                        "archiver %s: consumer failed (%s); retrying in %.1fs", self.cluster, exc, backoff.delay
                    )
                finally:
                    self._kafka_up = False
                    await self.flush()
                    await self.consumer.stop()
                if not self.stopping.is_set():
                    await backoff.pause(self.stopping)
                    self.consumer = self._new_consumer()
        finally:
            await self.health.stop()

    async def _consume(self) -> None:
        interval = self.settings.flush_interval
        while not self.stopping.is_set():
            fetched = await self.consumer.getmany(timeout_ms=500)
            for tp, messages in fetched.items():
                for message in messages:  # a message holds many records: the bound is checked after each
                    full = self.writer.add(self._decoded(message))  # at `flush-rows` records buffered
                    self.positions[tp] = message.offset + 1
                    if full:
                        await self.flush()
            if time.monotonic() - self._last_flush >= interval:
                await self.flush()

    def _decoded(self, message):
        """Every record of a message (one or more, one per line); a bad one is counted and skipped, the message's
        other records kept."""
        for line, value in enumerate(records_of(message.value or b""), 1):
            try:
                record = decode(value)
            except HistoryRecordInvalid as exc:
                RECORDS.labels(self.cluster, "bad").inc()
                log.warning(
                    "archiver %s: skipped record %d of the message at %s:%s (%s)",
                    self.cluster,
                    line,
                    message.partition,
                    message.offset,
                    exc,
                )
                continue
            RECORDS.labels(self.cluster, "archived").inc()
            yield record

    async def flush(self) -> None:
        """Write the buffer (in a thread: Parquet encoding is CPU and disk), then commit the positions it covers.
        A write that fails keeps the buffer and the positions: the next flush tries again."""
        async with self._flush_lock:
            self._last_flush = time.monotonic()
            if self.writer.buffered:
                try:
                    written = await asyncio.to_thread(self.writer.flush)
                except OSError as exc:
                    log.error(
                        "archiver %s: writing files under %s failed (%s); will retry",
                        self.cluster,
                        self.settings.path,
                        exc,
                    )
                    return
                FILES.labels(self.cluster).inc(len(written))
            if self.positions:
                positions, self.positions = self.positions, {}
                try:
                    await self.consumer.commit(positions)
                except KafkaError as exc:  # written already: re-reading them only makes duplicates
                    log.warning(
                        "archiver %s: commit failed (%s); some records may be archived twice", self.cluster, exc
                    )


async def run_archiver(config: Config, cluster: str, *, http_port: int | None = None) -> None:
    await run_until_signalled(Archiver(config, cluster, http_port=http_port))
