"""The archiver service: consumes the history topic (`history.topic`) and writes its records to Parquet files
partitioned by cluster and date under `history.path` (`shared/records/history_files.py`).

Memory is bounded by `history.flush-rows`: at that many records buffered (checked after each message, which holds at
most `history.MESSAGE_BYTES` of records), or every `history.flush-interval` seconds, the buffer is written and only
then the consumer's position committed, so a crash loses nothing (the records after the last commit are read again;
the replay drops repeated `order`s). A write that fails (the path unwritable, the disk full, the object store away)
keeps the buffer; once it is full, fetching stops (the partitions are paused and wound back to the first message not
buffered) and the write is retried with back-off, so memory stays bounded and no position is committed past a record
not written. Meanwhile `/readyz` says `history_path: false` and `lagwatch_archiver_write_failures_total` counts the
failures; records count as `archived` once written. At start-up a probe file is written and deleted under the path
(retried like a write until it works), so an unwritable path shows in `/readyz` before any record arrives.
Records that are not history records are counted (`lagwatch_archiver_records_total{outcome="bad"}`) and skipped.
Several archivers share the topic's partitions as one consumer group; each writes its own files.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pyarrow as pa
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from prometheus_client import Counter

from lagwatch.shared.records.history import HistoryRecordInvalid, decode, records_of
from lagwatch.shared.records.history_files import HistoryFileWriter
from lagwatch.shared.runtime.config import Config
from lagwatch.shared.runtime.health_server import LivenessCheck, ReadinessCheck
from lagwatch.shared.runtime.kafka_client import client_kwargs
from lagwatch.shared.runtime.kafka_probe import KafkaProbe
from lagwatch.shared.runtime.outage_log import OutageLog
from lagwatch.shared.runtime.service import Service
from lagwatch.shared.runtime.service_lifecycle import Backoff, run_until_signalled

log = logging.getLogger(__name__)
RECORDS = Counter(
    "lagwatch_archiver_records_total", "History records: archived (written to a file) or bad", ["cluster", "outcome"]
)
FILES = Counter("lagwatch_archiver_files_total", "Parquet files written", ["cluster"])
WRITE_FAILURES = Counter(
    "lagwatch_archiver_write_failures_total", "Writes under history.path that failed (retried)", ["cluster"]
)
MAX_BACKOFF_S = 30.0
WRITE_BACKOFF_CAP_S = 10.0  # a path writable again is written within this (read at construction: tests shorten it)


class _FlushBeforeRevoke(ConsumerRebalanceListener):
    """Records of partitions about to move are written (and their positions committed) first, so the next owner
    does not write them again."""

    def __init__(self, archiver: Archiver) -> None:
        self.archiver = archiver

    async def on_partitions_revoked(self, revoked) -> None:
        await self.archiver.flush()

    async def on_partitions_assigned(self, assigned) -> None:
        return None


class Archiver(Service):
    def __init__(self, config: Config, cluster: str, *, http_port: int | None = None) -> None:
        self.settings = settings = config.history
        port = settings.http_port if http_port is None else http_port
        super().__init__("archiver", cluster, host=settings.http_host, port=port)
        self.writer = HistoryFileWriter(settings.path, flush_rows=settings.flush_rows)
        self._kafka = client_kwargs(config.cluster(cluster), cluster)
        self.kafka_probe = KafkaProbe(config.clusters)
        self.consumer = self._new_consumer()
        # not a background task of the base (cancelled at a stop): it ends at `stopping`, writing what it holds
        self._consuming: asyncio.Task[None] | None = None
        self.positions: dict = {}  # next offsets to commit once the buffer is written
        self._last_flush = time.monotonic()
        self._kafka_up = False
        self._flush_lock = asyncio.Lock()
        self._write_failing = False  # the last write failed: the buffer waits for the next try
        self._write_backoff = Backoff(0.5, WRITE_BACKOFF_CAP_S)
        self._path_writable = False  # a probe or a write under history.path succeeded since start-up
        self._probe_backoff = Backoff(0.5, WRITE_BACKOFF_CAP_S)

    def _new_consumer(self) -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(
            **self._kafka,
            group_id=f"lagwatch-archiver-{self.cluster}",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=min(10_000, self.settings.flush_rows),
            fetch_max_wait_ms=500,
        )
        consumer.subscribe([self.settings.topic], listener=_FlushBeforeRevoke(self))
        return consumer

    @property
    def pending_rows(self) -> int:  # records read and not yet written (what the memory bound holds)
        return self.writer.buffered

    def readiness(self) -> dict[str, ReadinessCheck]:
        return {"kafka": self._kafka_ok, "history_path": self._history_path_ok}

    def liveness(self) -> dict[str, LivenessCheck]:
        return {"consumer": lambda: self.dead_work() is None}

    def dead_work(self) -> str | None:
        task = self._consuming
        if task is None or not task.done() or task.cancelled() or task.exception() is None:
            return None
        return f"consuming failed: {task.exception()!r}"

    async def _kafka_ok(self) -> bool:
        # The consumer does not fail while the brokers are away (it only fetches nothing): ask them too.
        return self._kafka_up and await self.kafka_probe.reachable(self.cluster)

    async def _history_path_ok(self) -> bool:
        return self._path_writable and not self._write_failing

    def _held_back(self) -> bool:
        """The buffer is full and could not be written: read nothing more until it is."""
        return self._write_failing and self.writer.buffered >= self.settings.flush_rows

    async def start_work(self) -> None:
        log.info("%s: %s -> %s", self.label, self.settings.topic, self.settings.path)
        self.spawn(self._probe_until_writable())
        self._consuming = asyncio.create_task(self._consume_until_stopped())

    async def stop_work(self) -> None:
        if self._consuming is not None:  # a failure of it is `dead_work`'s to report
            await asyncio.wait([self._consuming])
        await self.consumer.stop()  # closed already unless the start failed before it ran (else "Unclosed")

    async def _consume_until_stopped(self) -> None:
        """Consume, starting again after a failure (Kafka away) with a fresh consumer, until `stopping` is set."""
        backoff = Backoff(0.5, MAX_BACKOFF_S)
        while not self.stopping.is_set():
            try:
                await self.consumer.start()
                self._kafka_up = True
                await self._consume()
                backoff.reset()
            except (KafkaError, OSError) as exc:
                log.warning("%s: consumer failed (%s); retrying in %.1fs", self.label, exc, backoff.delay)
            finally:
                self._kafka_up = False
                await self.flush()
                await self.consumer.stop()
            if not self.stopping.is_set():
                await backoff.pause(self.stopping)
            if not self.stopping.is_set():  # (one made and never closed is "Unclosed" at exit)
                self.consumer = self._new_consumer()

    async def _probe_until_writable(self) -> None:
        """Probe history.path until it takes a file: without records to write, an unwritable path would otherwise
        go unseen (and `/readyz` say ready) until the first write. Retried like a write; consuming goes on meanwhile."""
        path, label = self.settings.path, self.label
        outage = OutageLog(log, f"{label}: cannot write under history.path {path}", ended=f"{label}: {path} works now")
        while not self._path_writable and not self.stopping.is_set():
            try:
                await asyncio.to_thread(self.writer.probe)
            except (OSError, pa.ArrowException) as exc:
                WRITE_FAILURES.labels(self.cluster).inc()
                outage.failed(exc, "not ready until it can, retrying")
                await self._probe_backoff.pause(self.stopping)
                continue
            outage.ok()
            self._path_writable = True

    async def _consume(self) -> None:
        interval = self.settings.flush_interval
        while not self.stopping.is_set():
            if self._held_back():
                await self._retry_write()
                continue
            paused = self.consumer.paused()
            if paused:
                self.consumer.resume(*paused)
            await self._add(await self.consumer.getmany(timeout_ms=500))
            if time.monotonic() - self._last_flush >= interval:
                await self.flush()

    async def _add(self, fetched) -> None:
        """Buffer the fetched messages, writing at `flush-rows` records (checked after each message: a message holds
        many records). Once a write fails with the buffer full, each partition is wound back to its first message
        not buffered: it is read again after the write succeeds, and memory stays bounded meanwhile."""
        # under the flush lock: a rebalance's flush (on aiokafka's task) writes the buffer in a thread, and a record
        # added to a file's rows meanwhile would be dropped with them, its position committed by that flush
        async with self._flush_lock:
            for tp, messages in fetched.items():
                for message in messages:
                    if self._held_back():
                        if tp in self.consumer.assignment():  # else its new owner reads it
                            self.consumer.seek(tp, message.offset)
                        break
                    full = self.writer.add(self._decoded(message))
                    self.positions[tp] = message.offset + 1
                    if full:
                        await self._flush_locked()

    async def _retry_write(self) -> None:
        """Paused partitions fetch nothing; the poll keeps this consumer in its group (`max.poll.interval.ms`)
        while the write is retried. What it returns anyway (a partition assigned meanwhile, not yet paused) is wound
        back by `_add`, not dropped."""
        self.consumer.pause(*self.consumer.assignment())
        await self._add(await self.consumer.getmany(timeout_ms=0))
        await self._write_backoff.pause(self.stopping)
        if not self.stopping.is_set():
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
                    "%s: skipped record %d of the message at %s:%s (%s)",
                    self.label,
                    line,
                    message.partition,
                    message.offset,
                    exc,
                )
                continue
            yield record

    async def flush(self) -> None:
        """Write the buffer, then commit the positions it covers. A write that fails keeps the buffer and the
        positions: the next flush tries again."""
        async with self._flush_lock:
            await self._flush_locked()

    async def _flush_locked(self) -> None:
        self._last_flush = time.monotonic()
        if self.writer.buffered and not await self._write():
            return
        if self.positions:
            positions, self.positions = self.positions, {}
            try:
                await self.consumer.commit(positions)
            except KafkaError as exc:  # written already: re-reading them only makes duplicates
                first_line = (str(exc).strip().splitlines() or [""])[0]  # aiokafka's CommitFailedError spans lines
                log.warning(
                    "%s: commit failed (%s: %s); some records may be archived twice",
                    self.label,
                    type(exc).__name__,
                    first_line,
                )

    async def _write(self) -> bool:
        """Write the buffer (in a thread: Parquet encoding is CPU and disk); False when that failed."""
        before = self.writer.rows_written
        try:
            written = await asyncio.to_thread(self.writer.flush)
        except OSError as exc:
            self._write_failing = True
            WRITE_FAILURES.labels(self.cluster).inc()
            log.error(
                "%s: writing files under %s failed (%s); will retry (%d records held)",
                self.label,
                self.settings.path,
                exc,
                self.writer.buffered,
            )
            return False
        finally:  # archived means in a file: a failed write may still have written some (cluster, date) files
            RECORDS.labels(self.cluster, "archived").inc(self.writer.rows_written - before)
        FILES.labels(self.cluster).inc(len(written))
        if self._write_failing:
            log.info("%s: writing under %s works again", self.label, self.settings.path)
        self._write_failing = False
        self._path_writable = True  # as good as a probe: the probe loop ends
        self._write_backoff.reset()
        return True


async def run_archiver(config: Config, cluster: str, *, http_port: int | None = None) -> None:
    await run_until_signalled(Archiver(config, cluster, http_port=http_port))
