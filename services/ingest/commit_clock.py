"""Whose clock: how far each coordinator's commit timestamps are from lagwatch's clock, and how late the ingest
stores commits.

A commit's timestamp is its group coordinator's clock (the broker leading the group's offsets partition); "now" and
the log-end samples are lagwatch's. A commit read at the end of its offsets partition was appended moments before, so
`observed_at - timestamp` is the clocks' offset plus the ingest's own delay, never less: the smallest over the last
minutes is the offset (shared/windows/clock_offset.py), the rest per batch the delay. One offset per offsets
partition, since brokers' clocks differ: one broker off by an hour must not move the groups the others coordinate.
The offsets place commits on lagwatch's clock (window.commit_made_at). Only fresh batches count
(`BatchPipeline.caught_up`, commits read for the first time): a re-read of hours of history would make the offset
look hours large. Admin mode stamps its commits itself: no offset.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from lagwatch.services.ingest import metrics
from lagwatch.services.ingest.processor import AppliedBatch
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.redis_client import reply
from lagwatch.shared.windows.clock_offset import (
    OFFSET_FIELD_PREFIX,
    PARTITIONS_FIELD,
    ClockOffset,
    CoordinatorClocks,
)

log = logging.getLogger(__name__)
# how often the offsets go to Redis: their readers want them seconds fresh, and a write per batch would cost the
# steady path a round trip
WRITE_EVERY_MS = 5_000


class CommitClock:
    def __init__(self, cluster: str, redis: Redis, offsets_partitions: Callable[[], int | None]) -> None:
        self.cluster, self.redis = cluster, redis
        self.offsets_partitions = offsets_partitions  # the offsets topic's partition count, when known
        self._offsets: dict[int, ClockOffset] = {}  # offsets partition -> its coordinator's offset
        self._written_at = 0
        self._written: set[int | str] = set()  # the partitions (and PARTITIONS_FIELD) written so far
        self._load = True  # read the offsets stored by earlier owners before the next batch

    @property
    def offsets_ms(self) -> dict[int, int]:
        """The estimates per offsets partition; a partition without a fresh batch read (or an offset stored before)
        is absent."""
        return {partition: clock.ms for partition, clock in self._offsets.items() if clock.ms is not None}

    @property
    def applied_ms(self) -> dict[int, int]:
        """The offsets the rules apply (clock_offset.applied_offset), per offsets partition."""
        return {p: clock.applied_ms for p, clock in self._offsets.items() if clock.applied_ms is not None}

    async def offsets(self) -> dict[int, int]:
        """`applied_ms`, at first with those stored by the partitions' last owners (a worker that takes partitions
        over re-reads their commits before it has a fresh batch of its own, and their lags want the offset)."""
        if self._load:
            self._load = False
            try:
                stored = CoordinatorClocks.parse(await reply(self.redis.hgetall(keys.commit_clock(self.cluster))))
            except (RedisError, OSError) as exc:
                log.debug("ingest %s: could not read the commit clocks (%s)", self.cluster, exc)
                stored = CoordinatorClocks()
            for partition, offset in stored.offsets_ms.items():
                if partition not in self._offsets:
                    self._offsets[partition] = clock = ClockOffset()
                    clock.add(now_ms(), offset)
        return self.applied_ms

    def assigned(self) -> None:
        """New partitions: their stored offsets are read before the next batch."""
        self._load = True

    def revoked(self, partitions: Iterable[int]) -> None:
        """Their next owner goes on from the stored offsets; this worker stops exporting them."""
        for partition in partitions:
            if self._offsets.pop(partition, None) is not None:
                with contextlib.suppress(KeyError):  # never exported: no fresh batch read from it
                    metrics.CLOCK_OFFSET.remove(self.cluster, str(partition))

    async def forget(self) -> bool:
        """Admin mode: the poller stamps commits itself, and offsets stored while the topic was read would shift
        the rules' clock (shared/statuses/verdicts.py) for nothing."""
        self._load = False
        self._offsets.clear()
        await reply(self.redis.delete(keys.commit_clock(self.cluster)))
        return True

    def applied(self, batch: AppliedBatch, *, fresh: bool) -> None:
        if not fresh:
            return
        for partition, (_, newest) in batch.commit_times.items():
            clock = self._offsets.setdefault(partition, ClockOffset())
            clock.add(batch.observed_at, batch.observed_at - newest)
            metrics.CLOCK_OFFSET.labels(self.cluster, str(partition)).set(clock.ms / 1000)  # type: ignore[operator]

    def stored(self, batch: AppliedBatch) -> None:
        """The batch's largest delay, its oldest commit to now, each commit on lagwatch's clock by its coordinator's
        applied offset (a delay lasting minutes is in the estimate, not in the applied offset)."""
        offsets, now = self.applied_ms, now_ms()
        delays = [now - (oldest + offsets[p]) for p, (oldest, _) in batch.commit_times.items() if p in offsets]
        if delays:
            metrics.COMMIT_DELAY.labels(self.cluster).observe(max(0, max(delays)) / 1000)

    async def export(self) -> None:
        """The offsets to Redis, every WRITE_EVERY_MS at most, at once when one is new (best effort: the next write
        says it again)."""
        offsets, now, partitions = self.offsets_ms, now_ms(), self.offsets_partitions()
        fields: set[int | str] = {*offsets, PARTITIONS_FIELD} if partitions else set(offsets)
        if not offsets or (now - self._written_at < WRITE_EVERY_MS and fields <= self._written):
            return
        self._written_at, self._written = now, fields
        mapping = {f"{OFFSET_FIELD_PREFIX}{partition}": offset for partition, offset in offsets.items()}
        mapping["at_ms"] = now
        if partitions:
            mapping[PARTITIONS_FIELD] = partitions
        try:
            await reply(self.redis.hset(keys.commit_clock(self.cluster), mapping=mapping))
        except (RedisError, OSError) as exc:
            log.debug("ingest %s: could not store the commit clocks (%s)", self.cluster, exc)
