"""New groups wait while an ingest worker reads a backlog of commits, and until this instance has read the notices
the read published.

An ingest worker that reads a backlog (its start on a cold Redis, a takeover of offsets-topic partitions) says so in
`keys.ingest_behind` until it has read every assigned partition to its end. A new group evaluated meanwhile is
evaluated again when its later commits are read, and those evaluations take the CPU the read needs; a group evaluated
before this instance read the notices of the read's last batches is evaluated again by those notices. So new groups
wait for both, at most `evaluator.new-groups-wait` seconds per stretch of waiting. A first status never pages, so the
wait costs no alert; known groups never wait.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Protocol

from prometheus_client import Gauge
from redis.asyncio import Redis
from redis.exceptions import RedisError

from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.redis_client import reply

log = logging.getLogger(__name__)
WAITING_FOR_INGEST = Gauge(
    "lagwatch_evaluator_new_groups_waiting_for_ingest",
    "1 while new groups' first evaluations wait for an ingest worker reading a backlog of commits",
    ["cluster"],
)
INGEST_POLL_S = 0.25  # how often a wait for the ingest looks again


class NoticeProgress(Protocol):
    """How far this instance has read the changes topic (notices.py)."""

    async def ends(self) -> Mapping[int, int]:
        """The end offsets of the changes partitions it holds, now."""
        ...

    async def handled_through(self, ends: Mapping[int, int]) -> bool:
        """Whether every notice before these offsets has been handled."""
        ...


class IngestBacklog:
    """Whether new groups should wait: an ingest worker says its commits are behind (`keys.ingest_behind`: worker ->
    until when its word holds), or it said so and this instance has not read the notices published until it stopped
    saying it; at most `wait_s` per stretch of waiting groups."""

    def __init__(self, redis: Redis, cluster: str, wait_s: float, notices: NoticeProgress | None = None) -> None:
        self.redis, self.key, self.cluster = redis, keys.ingest_behind(cluster), cluster
        self.wait_s, self.notices = wait_s, notices
        self._since: float | None = None  # monotonic: when this stretch of new groups began to wait
        self._holding = False
        self._ingest_was_behind = False
        self._notice_ends: Mapping[int, int] | None = None  # the changes topic's ends once the ingest read through
        WAITING_FOR_INGEST.labels(self.cluster).set(0)

    async def holds(self) -> bool:
        """True while new groups should wait."""
        if self.wait_s <= 0 or (self._since is not None and time.monotonic() - self._since >= self.wait_s):
            return self._hold(False)
        if await self._ingest_behind():
            self._ingest_was_behind, self._notice_ends = True, None
            return self._hold(True)
        return self._hold(self._ingest_was_behind and not await self._notices_read())

    async def _ingest_behind(self) -> bool:
        try:
            words = await reply(self.redis.hvals(self.key))
        except RedisError:
            return False  # the evaluation retries until Redis is back
        now = now_ms()
        return any(word.isdigit() and int(word) > now for word in words)

    async def _notices_read(self) -> bool:
        """This instance has handled the notices published until the ingest read through (unknown: yes)."""
        if self.notices is None:
            return True
        try:
            if self._notice_ends is None:
                self._notice_ends = await self.notices.ends()
            return await self.notices.handled_through(self._notice_ends)
        except Exception as exc:  # Kafka away, a rebalance under way: a first status is not worth waiting for
            log.debug("evaluator %s: how far the notices are read is unknown (%s)", self.cluster, exc)
            return True

    def _hold(self, holding: bool) -> bool:
        if holding and not self._holding:
            self._since = self._since or time.monotonic()
            log.info("evaluator %s: new groups wait while the ingest reads a backlog of commits", self.cluster)
        elif self._holding and not holding:
            waited = time.monotonic() - (self._since or time.monotonic())
            log.info("evaluator %s: new groups evaluated after waiting %.1fs for the ingest", self.cluster, waited)
        self._holding = holding
        WAITING_FOR_INGEST.labels(self.cluster).set(int(holding))
        return holding

    def done(self) -> None:
        """No new group waits any more: the next ones may wait again."""
        self._since, self._ingest_was_behind, self._notice_ends = None, False, None
