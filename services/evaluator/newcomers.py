"""Groups the evaluator has no status for yet wait behind every group it has one for.

Any client that can commit offsets can write a hundred thousand new group names at once; evaluated in the order their
notices came, they would hold up a known group's REWIND for as long as the flood takes. So the groups with a recorded
status are evaluated at once, the worst first; the new ones queue here and are evaluated a chunk at a time whenever
nothing else waits (asyncio's lock is fair: a notice that arrives meanwhile waits for one chunk at most).

While an ingest worker reads a backlog of commits (its start on a cold Redis, a takeover of offsets-topic partitions:
it says so in `keys.ingest_behind` until it has read every assigned partition to its end), new groups wait for it, at
most `evaluator.new-groups-wait` seconds: a group evaluated before its later commits are read is evaluated again when
they are, and the evaluations would take the CPU the read needs. A first status never pages, so waiting costs no
alert; known groups are evaluated as ever.

A cap on the groups a cluster may have (`evaluator.max-groups`) keeps a flood of junk names from growing every store
without bound: past it, new groups are counted, skipped and their windows deleted (never a known group's) until the
count falls under it again (expiry, deletions).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Iterable, Sequence

from prometheus_client import Counter, Gauge
from redis.asyncio import Redis
from redis.exceptions import RedisError

from lagwatch.services.evaluator.runs import SWEEP_CHUNK, EvaluationRuns
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Status
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.outage_log import OutageLog
from lagwatch.shared.runtime.redis_client import reply

log = logging.getLogger(__name__)
NEW_GROUPS = Counter(
    "lagwatch_evaluator_new_groups_total",
    "Groups with no status yet, queued behind the known ones for their first evaluation",
    ["cluster"],
)
NEW_GROUPS_WAITING = Gauge(
    "lagwatch_evaluator_new_groups_waiting", "New groups queued for their first evaluation", ["cluster"]
)
OVER_CAP = Counter(
    "lagwatch_evaluator_groups_over_cap_total",
    "New groups skipped because the cluster has evaluator.max-groups groups already",
    ["cluster"],
)
MAX_GROUPS = Gauge("lagwatch_evaluator_max_groups", "The configured evaluator.max-groups (0: no cap)", ["cluster"])
WAITING_FOR_INGEST = Gauge(
    "lagwatch_evaluator_new_groups_waiting_for_ingest",
    "1 while new groups' first evaluations wait for an ingest worker reading a backlog of commits",
    ["cluster"],
)
INGEST_POLL_S = 0.25  # how often a wait for the ingest looks again


def triage(groups: Sequence[str], statuses: Sequence[Status | None]) -> tuple[list[str], list[str]]:
    """(known groups, worst status first; new groups, in the order given)."""
    known = [(status, group) for group, status in zip(groups, statuses, strict=True) if status is not None]
    known.sort(key=lambda item: -item[0])
    new = [group for group, status in zip(groups, statuses, strict=True) if status is None]
    return [group for _, group in known], new


class NewcomerQueue:
    """New groups waiting for their first evaluation, each once, oldest first."""

    def __init__(self) -> None:
        self._waiting: dict[str, None] = {}  # an ordered set

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, groups: Iterable[str]) -> int:
        """Queue these groups; how many were not waiting already."""
        before = len(self._waiting)
        self._waiting.update(dict.fromkeys(groups))
        return len(self._waiting) - before

    def take(self, n: int) -> list[str]:
        """The `n` oldest, out of the queue."""
        taken = list(itertools.islice(self._waiting, n))
        for group in taken:
            del self._waiting[group]
        return taken


def within_cap(new: Sequence[str], known_count: int, cap: int) -> tuple[list[str], list[str]]:
    """(the new groups that fit under `cap` with the `known_count` groups there are, the ones that do not)."""
    room = max(0, cap - known_count) if cap else len(new)
    return list(new[:room]), list(new[room:])


class IngestBacklog:
    """Whether an ingest worker says it is reading a backlog of commits (`keys.ingest_behind`: worker -> until when its
    word holds), and how long new groups have waited for it: at most `wait_s` per stretch of waiting groups."""

    def __init__(self, redis: Redis, cluster: str, wait_s: float) -> None:
        self.redis, self.key, self.cluster = redis, keys.ingest_behind(cluster), cluster
        self.wait_s = wait_s
        self._since: float | None = None  # monotonic: when this stretch of new groups began to wait
        self._holding = False
        WAITING_FOR_INGEST.labels(self.cluster).set(0)

    async def holds(self) -> bool:
        """True while new groups should wait: an ingest worker behind, and the wait not used up."""
        if self.wait_s <= 0 or (self._since is not None and time.monotonic() - self._since >= self.wait_s):
            return self._hold(False)
        try:
            words = await reply(self.redis.hvals(self.key))
        except RedisError:
            return self._hold(False)  # the evaluation retries until Redis is back
        now = now_ms()
        return self._hold(any(word.isdigit() and int(word) > now for word in words))

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
        self._since = None


class Newcomers:
    """The queue of new groups and the task that evaluates them, behind everything else and under the cap."""

    def __init__(self, runs: EvaluationRuns, max_groups: int, ingest_wait_s: float = 0.0) -> None:
        self.runs, self.cap, self.cluster = runs, max_groups, runs.cluster
        self.statuses, self.store = runs.evaluator.statuses, runs.evaluator.store
        self.queue = NewcomerQueue()
        self.ingest = IngestBacklog(runs.redis, self.cluster, ingest_wait_s)
        self._waiting = asyncio.Event()
        self._over_cap_log = OutageLog(log, f"evaluator {self.cluster}: over evaluator.max-groups")
        MAX_GROUPS.labels(self.cluster).set(max_groups)
        NEW_GROUPS_WAITING.labels(self.cluster).set(0)
        NEW_GROUPS.labels(self.cluster)  # exported at 0 from the start: the rules' increase() sees the first ones
        OVER_CAP.labels(self.cluster)

    async def known_first(self, groups: list[str]) -> list[str]:
        """The groups with a recorded status, the worst first; the new ones are queued (RedisError: none is)."""
        known, new = triage(groups, await self.statuses.statuses_of(self.cluster, groups))
        if new:
            NEW_GROUPS.labels(self.cluster).inc(self.queue.add(new))
            NEW_GROUPS_WAITING.labels(self.cluster).set(len(self.queue))
            self._waiting.set()
        return known

    async def run(self) -> None:
        """Evaluate queued new groups a chunk at a time, each chunk after whatever else waits for the lock."""
        stopping = self.runs.stopping
        while not stopping.is_set():
            await self._waiting.wait()
            self._waiting.clear()
            while self.queue and not stopping.is_set():
                if await self.ingest.holds():
                    await asyncio.sleep(INGEST_POLL_S)
                    continue
                await self._evaluate(self.queue.take(SWEEP_CHUNK))
                NEW_GROUPS_WAITING.labels(self.cluster).set(len(self.queue))
            self.ingest.done()

    async def _evaluate(self, chunk: list[str]) -> None:
        """A chunk of new groups, those that fit under `evaluator.max-groups` (the rest counted and skipped)."""
        try:
            count = await self.statuses.count(self.cluster) if self.cap else 0
        except RedisError:
            count = 0  # the evaluation below retries until Redis is back; the cap is looked at again next chunk
        fits, over = within_cap(chunk, count, self.cap)
        if over:
            await self._skip_over_cap(over)
        elif self.cap:
            self._over_cap_log.ok()
        if fits:
            await self.runs.evaluate(fits, "new")

    async def _skip_over_cap(self, over: list[str]) -> None:
        """Counted, and their windows deleted (a flood of junk names must not fill Redis for `expire-group`): the
        ingest forgets a group deleted under it, and a real group's next commit after there is room starts it
        afresh. A group that got a status meanwhile is kept."""
        OVER_CAP.labels(self.cluster).inc(len(over))
        self._over_cap_log.failed(f"{len(over)} new groups skipped", f"evaluator.max-groups is {self.cap}")
        with contextlib.suppress(RedisError):  # left to expire: the next chunk looks at the cap again
            still_new = triage(over, await self.statuses.statuses_of(self.cluster, over))[1]
            await self.store.deletions.delete_groups(self.cluster, still_new)
