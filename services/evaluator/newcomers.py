"""Groups the evaluator has no status for yet wait behind every group it has one for.

Any client that can commit offsets can write a hundred thousand new group names at once; evaluated in the order their
notices came, they would hold up a known group's REWIND for as long as the flood takes. So the groups with a recorded
status are evaluated at once, the worst first; the new ones queue here and are evaluated a chunk at a time whenever
nothing else waits (asyncio's lock is fair: a notice that arrives meanwhile waits for one chunk at most).

While an ingest worker reads a backlog of commits new groups wait for it (ingest_backlog.py).

A cap on the groups a cluster may have (`evaluator.max-groups`) keeps a flood of junk names from growing every store
without bound: past it, new groups are counted, skipped and their windows deleted (never a known group's) until the
count falls under it again (expiry, deletions).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Iterable, Sequence

from prometheus_client import Counter, Gauge
from redis.exceptions import RedisError

from lagwatch.services.evaluator.ingest_backlog import INGEST_POLL_S, IngestBacklog, NoticeProgress
from lagwatch.services.evaluator.runs import SWEEP_CHUNK, EvaluationRuns
from lagwatch.shared.protocol.types import Status
from lagwatch.shared.runtime.outage_log import OutageLog

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


def triage(groups: Sequence[str], statuses: Sequence[Status | None]) -> tuple[list[str], list[str]]:
    """(known groups, worst status first; new groups, in the order given)."""
    known = [(status, group) for group, status in zip(groups, statuses, strict=True) if status is not None]
    known.sort(key=lambda item: -item[0])
    new = [group for group, status in zip(groups, statuses, strict=True) if status is None]
    return [group for _, group in known], new


class NewcomerQueue:
    """Groups waiting for an evaluation behind the others, each once, oldest first."""

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
        self._waiting = self._waiting or {}  # emptied: a new dict, not the table of a cold start's every group
        return taken


def within_cap(new: Sequence[str], known_count: int, cap: int) -> tuple[list[str], list[str]]:
    """(the new groups that fit under `cap` with the `known_count` groups there are, the ones that do not)."""
    room = max(0, cap - known_count) if cap else len(new)
    return list(new[:room]), list(new[room:])


class Newcomers:
    """The queue of new groups and the task that evaluates them, behind everything else and under the cap."""

    def __init__(
        self, runs: EvaluationRuns, max_groups: int, ingest_wait_s: float = 0.0, notices: NoticeProgress | None = None
    ) -> None:
        self.runs, self.cap, self.cluster = runs, max_groups, runs.cluster
        self.statuses, self.store = runs.evaluator.statuses, runs.evaluator.store
        self.queue = NewcomerQueue()
        self.probed = NewcomerQueue()  # known groups a log probe's answer concerns (`after_new_ones`)
        self.ingest = IngestBacklog(runs.redis, self.cluster, ingest_wait_s, notices)
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

    async def after_new_ones(self, groups: list[str]) -> None:
        """Groups a log probe's answer concerns (their lag in seconds, a transaction's markers): a refinement, not a
        change of what they committed, so the known ones are evaluated behind the new ones, and the new ones queued
        (RedisError: none is)."""
        self.probed.add(await self.known_first(groups))
        self._waiting.set()

    async def run(self) -> None:
        """Evaluate queued new groups a chunk at a time, each chunk after whatever else waits for the lock; then the
        known groups a probe's answer concerns."""
        stopping = self.runs.stopping
        while not stopping.is_set():
            await self._waiting.wait()
            self._waiting.clear()
            while (self.queue or self.probed) and not stopping.is_set():
                if self.queue and not await self.ingest.holds():
                    await self._evaluate(self.queue.take(SWEEP_CHUNK))
                    NEW_GROUPS_WAITING.labels(self.cluster).set(len(self.queue))
                elif self.probed:
                    await self.runs.evaluate(self.probed.take(SWEEP_CHUNK), "probe")
                else:
                    await asyncio.sleep(INGEST_POLL_S)  # new groups wait for the ingest
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
