"""One batch of offsets-topic records, decoded and applied to the window store in record order."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from lagwatch.services.ingest import metrics
from lagwatch.services.ingest.broker_offsets import BrokerOffsets
from lagwatch.services.ingest.records import DecodedBatch, GroupDeletion, GroupRebalance, RecordLike, decode_batch
from lagwatch.shared.group_filter import GroupFilter
from lagwatch.shared.store.redis_store import WindowStore
from lagwatch.shared.window import Commit


@dataclass(slots=True)
class PreparedBatch:
    decoded: DecodedBatch
    tally: Counter[str]
    observed_at: int


class BatchProcessor:
    """Decodes a batch (`prepare`, CPU only) and stores it (`store`). `store` raises on Redis or Kafka failures: the
    caller retries it, which is harmless (a commit's `order` makes a re-applied commit a duplicate)."""

    def __init__(self, cluster: str, store: WindowStore, broker_offsets: BrokerOffsets, group_filter: GroupFilter):
        self.cluster = cluster
        self.store = store
        self.broker_offsets = broker_offsets
        self.group_filter = group_filter

    def prepare(self, records: Sequence[RecordLike]) -> PreparedBatch:
        now = int(time.time() * 1000)
        decoded = decode_batch(records, observed_at=now, group_filter=self.group_filter)
        tally = Counter(decoded.counts)
        tally["records"] += len(records)
        tally["batches"] += 1
        return PreparedBatch(decoded, tally, now)

    async def store_batch(self, batch: PreparedBatch) -> Counter[str]:
        started = time.perf_counter()
        tally = Counter(batch.tally)
        now = batch.observed_at
        commits = batch.decoded.commits
        latest = await self.broker_offsets.lookup({(c.topic, c.partition) for c in commits}) if commits else {}
        for step in batch.decoded.steps:
            if isinstance(step, list):
                outcomes = await self.store.add_commits(self.cluster, step, now, broker_offsets=latest)
                for outcome, n in Counter(outcomes).items():
                    tally[f"outcome:{outcome.name.lower()}"] += n
            elif isinstance(step, GroupRebalance):
                await self.store.set_group_metadata(
                    self.cluster,
                    step.group,
                    generation=step.generation,
                    started_at=step.started_at,
                    owners=step.owners,
                    now_ms=now,
                )
            elif isinstance(step, GroupDeletion):
                await self.store.delete_group(self.cluster, step.group)
                tally["group_deleted"] += 1
        metrics.BATCH_SECONDS.labels(self.cluster).observe(time.perf_counter() - started)
        return tally

    async def process(self, records: Sequence[RecordLike]) -> Counter[str]:
        """Both steps at once (tests and simple callers)."""
        return await self.store_batch(self.prepare(records))

    async def report_own_progress(self, group: str, topic: str, positions: dict[int, int]) -> None:
        """lagwatch's own consumption, stored as a consumer group like any other (Burrow reports `burrow-<name>`):
        a stuck ingest then raises its own alert. `order` = the position itself, which only grows. The allow/deny
        regexes apply to it as to any group."""
        if not positions or not self.group_filter.accepts(group):
            return
        now = int(time.time() * 1000)
        commits = [Commit(group, topic, p, pos, now, pos, now) for p, pos in positions.items()]
        latest = await self.broker_offsets.lookup({(topic, p) for p in positions})
        await self.store.add_commits(self.cluster, commits, now, broker_offsets=latest)
