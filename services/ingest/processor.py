"""One batch of offsets-topic records: decoded, applied to the in-memory windows in record order, written behind.

Three steps, so the worker can overlap them (decoding the next batch while Redis stores this one):
`prepare` (decode, CPU only), `apply` (load unknown groups and log-end offsets, then change the windows in memory)
and `write` (the changed windows and the batch's rebalances to Redis). `apply` and `write` raise on Redis or Kafka
failures and may be retried: `apply` changes nothing before its reads succeed, and `write` is idempotent.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from lagwatch.services.ingest import metrics
from lagwatch.services.ingest.broker_offsets import BrokerOffsets
from lagwatch.services.ingest.records import (
    DecodedBatch,
    GroupDeletion,
    GroupRebalance,
    KeyCache,
    RecordTuple,
    decode_batch,
)
from lagwatch.services.ingest.window_cache import WindowCache
from lagwatch.shared.group_filter import GroupFilter
from lagwatch.shared.store.redis_store import GroupMetadataUpdate, WindowStore
from lagwatch.shared.store.window_writer import GroupWrite, WindowWriter
from lagwatch.shared.window import Commit


@dataclass(slots=True)
class PreparedBatch:
    decoded: DecodedBatch
    tally: Counter[str]
    observed_at: int


@dataclass(slots=True)
class Flush:
    """What one batch changed, ready to write (immutable snapshots: later batches may change the cache)."""

    writes: list[GroupWrite] = field(default_factory=list)
    rebalances: list[GroupMetadataUpdate] = field(default_factory=list)
    now_ms: int = 0


class BatchProcessor:
    def __init__(
        self,
        cluster: str,
        store: WindowStore,
        broker_offsets: BrokerOffsets,
        group_filter: GroupFilter,
    ) -> None:
        self.cluster = cluster
        self.store = store
        self.broker_offsets = broker_offsets
        self.group_filter = group_filter
        self.keys = KeyCache(group_filter)
        self.cache = WindowCache(store.redis, cluster, store.config)
        self.writer = WindowWriter(store.redis)
        self._rebalances: list[GroupMetadataUpdate] = []  # applied in memory, not yet written

    def prepare(self, records: Iterable[RecordTuple]) -> PreparedBatch:
        now = int(time.time() * 1000)
        records = records if isinstance(records, list) else list(records)
        decoded = decode_batch(records, observed_at=now, key_cache=self.keys)
        tally = Counter(decoded.counts)
        tally["records"] += len(records)
        tally["batches"] += 1
        return PreparedBatch(decoded, tally, now)

    async def apply(self, batch: PreparedBatch) -> Counter[str]:
        """Change the in-memory windows; returns the batch's tally (outcomes included)."""
        decoded = batch.decoded
        await self.cache.load(decoded.groups)
        latest = await self._latest_broker_offsets(decoded)
        tally = Counter(batch.tally)
        for step in decoded.steps:
            if isinstance(step, list):
                self.cache.add_commits(step, latest, batch.observed_at, batch.observed_at, tally)
            elif isinstance(step, GroupRebalance):
                self._rebalances.append(GroupMetadataUpdate(step.group, step.generation, step.started_at, step.owners))
            elif isinstance(step, GroupDeletion):
                self.cache.delete_group(step.group, decoded.groups[step.group])
                self._rebalances = [r for r in self._rebalances if r.group != step.group]  # deleted with it
                tally["group_deleted"] += 1
        return tally

    async def _latest_broker_offsets(self, decoded: DecodedBatch) -> dict[tuple[str, int], int | None]:
        """The log-end offsets the commits' lags are measured against; unknown partitions are asked for first."""
        latest = self.broker_offsets.latest
        partitions = {record[0].topic_partition for step in decoded.steps if isinstance(step, list) for record in step}
        missing = {tp for tp in partitions if tp not in latest}
        if missing:
            await self.broker_offsets.lookup(missing)
        return self.broker_offsets.latest

    def take_flush(self, now_ms: int) -> Flush:
        flush = Flush(self.cache.take_writes(), self._rebalances, now_ms)
        self._rebalances = []
        return flush

    async def write(self, flush: Flush) -> None:
        started = time.perf_counter()
        deleted_meanwhile = await self.writer.write(self.cluster, flush.writes)
        if flush.rebalances:
            await self.store.set_groups_metadata(self.cluster, flush.rebalances, flush.now_ms)
        for group in deleted_meanwhile:  # deleted through the api while this worker held it: stay deleted
            self.cache.forget_group(group)
            await self.store.delete_group(self.cluster, group)
        metrics.BATCH_SECONDS.labels(self.cluster).observe(time.perf_counter() - started)

    async def process(self, records: Iterable[RecordTuple]) -> Counter[str]:
        """Every step at once (tests and simple callers)."""
        batch = self.prepare(records)
        tally = await self.apply(batch)
        await self.write(self.take_flush(batch.observed_at))
        return tally

    def forget_partitions(self, partitions: Iterable[int]) -> None:
        """Offsets-topic partitions this worker no longer owns: their groups leave memory (flushed before)."""
        gone = set(partitions)
        self.cache.forget_partitions(gone)

    async def report_own_progress(self, group: str, topic: str, positions: dict[int, int]) -> None:
        """lagwatch's own consumption, stored as a consumer group like any other (Burrow reports `burrow-<name>`):
        a stuck ingest then raises its own alert. `order` = the position itself, which only grows. The allow/deny
        regexes apply to it as to any group. Every worker writes its own partitions' fields of that one group, so
        this goes through the store's atomic script, not the single-writer cache."""
        if not positions or not self.group_filter.accepts(group):
            return
        now = int(time.time() * 1000)
        commits = [Commit(group, topic, p, pos, now, pos, now) for p, pos in positions.items()]
        latest = await self.broker_offsets.lookup({(topic, p) for p in positions})
        await self.store.add_commits(self.cluster, commits, now, broker_offsets=latest)
