"""The changes topic's notices (`shared/windows/changes.py`), taken a batch at a time (up to NOTICE_BATCH notices or
NOTICE_WAIT_S):

* a group notice names groups whose commits changed: they are evaluated, known ones first (newcomers.py);
* a log-end notice names topics whose log end moved: the groups reading them where the poll could flip a rule
  (`PartitionWatch.poll_could_flip`) are;
* a log-start notice names topics whose log start moved: the groups that retention closes in on are (`closing_in`).

A group of a partition taken over that this instance has not evaluated yet has no watch to tell: a topic notice
moves it to the front of the takeover's backlog (backlog.py), evaluated right after what the schedule says is due.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from redis.exceptions import RedisError

from lagwatch.services.evaluator.newcomers import Newcomers
from lagwatch.services.evaluator.next_change import PartitionWatch, closing_in
from lagwatch.services.evaluator.runs import EvaluationRuns
from lagwatch.shared.protocol import keys
from lagwatch.shared.windows.changes import decode_notice, groups_of
from lagwatch.shared.windows.stored_group import TopicPartition

log = logging.getLogger(__name__)
NOTICE_BATCH, NOTICE_WAIT_S = 1000, 0.05
Flips = Callable[[TopicPartition, PartitionWatch], bool]


class ChangeNotices:
    def __init__(self, runs: EvaluationRuns, newcomers: Newcomers) -> None:
        self.runs, self.newcomers, self.cluster, self.store = runs, newcomers, runs.cluster, runs.evaluator.store

    async def take(self, stream) -> None:
        """The changes topic's Faust agent."""
        async for events in stream.take_events(NOTICE_BATCH, within=NOTICE_WAIT_S):
            groups, ends, starts = self._sort(event.value for event in events)
            if groups:  # a notice names up to thousands of groups: known ones first, in bounded chunks
                await self._evaluate_known_first(sorted(groups))
            await self._evaluate_where(ends, "log-end", self._could_flip)
            await self._evaluate_where(starts, "log-start", self._closing_in)

    def _sort(self, values: Iterable[bytes]) -> tuple[set[str], set[str], set[str]]:
        """This cluster's notices: (groups named, topics whose log end moved, topics whose log start moved)."""
        groups: set[str] = set()
        ends: set[str] = set()
        starts: set[str] = set()
        for value in values:
            notice = decode_notice(value)
            if notice is None:
                log.warning("evaluator %s: skipped a malformed change notice", self.cluster)
            elif notice["cluster"] != self.cluster:
                continue
            elif "topics" in notice:
                (starts if notice.get("reason") == "log-start" else ends).update(notice["topics"])
            else:
                groups.update(groups_of(notice))
        return groups, ends, starts

    async def _evaluate_known_first(self, groups: list[str]) -> None:
        try:
            known = await self.newcomers.known_first(groups)
        except RedisError:
            known = groups  # their evaluation retries until Redis is back
        await self.runs.in_chunks(known, "notice")

    async def _evaluate_where(
        self, topics: set[str], trigger: str, reading: Callable[[set[TopicPartition]], Awaitable[Flips]]
    ) -> None:
        """Re-evaluate the groups reading these topics where what `reading` reads of their partitions says so."""
        self.runs.backlog.promote(topics)
        partitions = self.runs.index.partitions(topics)
        if not partitions:
            return
        try:
            flips = await reading(partitions)
        except RedisError as exc:
            log.warning("evaluator %s: %s notice skipped, Redis unavailable (%s)", self.cluster, trigger, exc)
            return
        due = sorted({group for group, tp, watched in self.runs.index.watched(topics) if flips(tp, watched)})
        await self.runs.in_chunks(due, trigger)

    async def _could_flip(self, partitions: set[TopicPartition]) -> Flips:
        """Where the new log end could flip a rule."""
        ends, rules = await self.store.reads.latest_broker_offsets(self.cluster, partitions), self.runs.evaluator.rules
        return lambda tp, watched: (end := ends.get(tp)) is not None and watched.poll_could_flip(end, rules)

    async def _closing_in(self, partitions: set[TopicPartition]) -> Flips:
        """Where retention closes in (`closing_in`); a caught-up group's risk only matters once it falls that far."""
        starts, ends = await asyncio.gather(
            self.store.reads.offset_histories(self.cluster, partitions, keys.log_start_history),
            self.store.reads.latest_broker_offsets(self.cluster, partitions),
        )
        return lambda tp, watched: (
            bool(starts.get(tp))
            and (end := ends.get(tp)) is not None
            and closing_in(watched, starts[tp][-1].offset, end)
        )
