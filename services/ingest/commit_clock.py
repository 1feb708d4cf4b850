"""Whose clock: how far a cluster's commit timestamps are from lagwatch's clock, and how late the ingest stores commits.

A commit's timestamp is the group coordinator's clock; "now" and the log-end samples are lagwatch's. A commit read
at the end of its offsets partition was appended moments before, so `observed_at - timestamp` is the clocks' offset
plus the ingest's own delay, never less: the smallest over the last minutes is the offset
(shared/windows/clock_offset.py), the rest per batch the delay. The offset places commits on lagwatch's clock
(window.commit_made_at). Only fresh batches count (`BatchPipeline.caught_up`, commits read for the first time): a
re-read of hours of history would make the offset look hours large. Admin mode stamps its commits itself: no offset.
"""

from __future__ import annotations

import logging

from redis.asyncio import Redis
from redis.exceptions import RedisError

from lagwatch.services.ingest import metrics
from lagwatch.services.ingest.processor import AppliedBatch
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.redis_client import reply
from lagwatch.shared.windows.clock_offset import ClockOffset

log = logging.getLogger(__name__)
# how often the offset goes to Redis: its readers want it seconds fresh, and a write per batch would cost the
# steady path a round trip
WRITE_EVERY_MS = 5_000


class CommitClock:
    def __init__(self, cluster: str, redis: Redis) -> None:
        self.cluster, self.redis = cluster, redis
        self._offset = ClockOffset()
        self._written_at = 0
        self._loaded = False

    @property
    def offset_ms(self) -> int | None:
        """None until a fresh batch was read (or an offset stored by the last worker)."""
        return self._offset.ms

    async def offset(self) -> int | None:
        """`offset_ms`, at first the one stored by the last worker (a restarted worker re-reads commits before it
        has a fresh batch of its own, and their lags want the offset)."""
        if not self._loaded:
            self._loaded = True
            try:
                stored = await reply(self.redis.hget(keys.commit_clock(self.cluster), "offset_ms"))
            except (RedisError, OSError) as exc:
                log.debug("ingest %s: could not read the commit clock's offset (%s)", self.cluster, exc)
                stored = None
            if stored is not None and self._offset.ms is None:
                self._offset.add(now_ms(), int(stored))
        return self.offset_ms

    async def forget(self) -> bool:
        """Admin mode: the poller stamps commits itself, and an offset stored while the topic was read would shift
        the rules' clock (shared/statuses/verdicts.py) for nothing."""
        self._loaded = True
        await reply(self.redis.delete(keys.commit_clock(self.cluster)))
        return True

    def applied(self, batch: AppliedBatch, *, fresh: bool) -> None:
        if not fresh or batch.newest_commit_ms < 0:
            return
        self._offset.add(batch.observed_at, batch.observed_at - batch.newest_commit_ms)
        metrics.CLOCK_OFFSET.labels(self.cluster).set(self._offset.ms / 1000)  # type: ignore[operator]

    def stored(self, batch: AppliedBatch) -> None:
        offset = self.offset_ms
        if offset is not None and batch.newest_commit_ms >= 0:
            delay_ms = now_ms() - (batch.oldest_commit_ms + offset)
            metrics.COMMIT_DELAY.labels(self.cluster).observe(max(0, delay_ms) / 1000)

    async def export(self) -> None:
        """The offset to Redis, every WRITE_EVERY_MS at most (best effort: the next write says it again)."""
        offset, now = self.offset_ms, now_ms()
        if offset is None or now - self._written_at < WRITE_EVERY_MS:
            return
        self._written_at = now
        try:
            await reply(self.redis.hset(keys.commit_clock(self.cluster), mapping={"offset_ms": offset, "at_ms": now}))
        except (RedisError, OSError) as exc:
            log.debug("ingest %s: could not store the commit clock's offset (%s)", self.cluster, exc)
