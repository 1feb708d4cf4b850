"""The changes topic's notices (`shared/windows/changes.py`), taken a batch at a time (up to NOTICE_BATCH notices or
NOTICE_WAIT_S):

* a group notice names groups whose commits changed: they are evaluated, known ones first (newcomers.py); one of a
  log probe's answers (reason "probe") is a refinement: its known groups are evaluated after the new ones;
* a log-end notice names topics whose log end moved: the groups reading them where the poll could flip a rule
  (`PartitionWatch.poll_could_flip`) are;
* a log-start notice names topics whose log start moved: the groups that retention closes in on are (`closing_in`).

A group of a partition taken over that this instance has not evaluated yet has no watch to tell: a topic notice
moves it to the front of the takeover's backlog (backlog.py), evaluated right after what the schedule says is due.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping

from redis.exceptions import RedisError

from lagwatch.services.evaluator.newcomers import Newcomers
from lagwatch.services.evaluator.next_change import PartitionWatch, closing_in
from lagwatch.services.evaluator.ownership import ChangesPartitions
from lagwatch.services.evaluator.runs import EvaluationRuns
from lagwatch.shared.protocol import keys
from lagwatch.shared.windows.changes import PROBE_REASON, decode_notice, groups_of
from lagwatch.shared.windows.stored_group import TopicPartition

log = logging.getLogger(__name__)
NOTICE_BATCH, NOTICE_WAIT_S = 1000, 0.05
Flips = Callable[[TopicPartition, PartitionWatch], bool]


class NoticesHandled:
    """How far the changes agent has handled each partition's notices (newcomers wait for it after an ingest's
    backlog: ingest_backlog.py)."""

    def __init__(self, partitions: ChangesPartitions) -> None:
        self.partitions = partitions
        self.next_offsets: dict[int, int] = {}  # partition -> the offset after the last notice handled

    def handled(self, events: Iterable) -> None:
        for event in events:
            message = event.message
            self.next_offsets[message.partition] = max(message.offset + 1, self.next_offsets.get(message.partition, 0))

    async def ends(self) -> Mapping[int, int]:
        return await self.partitions.ends()

    async def handled_through(self, ends: Mapping[int, int]) -> bool:
        """Every notice before `ends` handled; of a partition with none handled since the start, the consumer's
        position stands in (its notices, if any, were before where the group left off)."""
        for partition, end in ends.items():
            done = self.next_offsets.get(partition)
            if done is None:
                done = await self.partitions.position(partition)
            if done < end:
                return False
        return True


class ChangeNotices:
    def __init__(self, runs: EvaluationRuns, newcomers: Newcomers, handled: NoticesHandled | None = None) -> None:
        self.runs, self.newcomers, self.cluster, self.store = runs, newcomers, runs.cluster, runs.evaluator.store
        self.handled = handled

    async def take(self, stream) -> None:
        """The changes topic's Faust agent."""
        async for events in stream.take_events(NOTICE_BATCH, within=NOTICE_WAIT_S):
            groups, probed, ends, starts = self._sort(event.value for event in events)
            if groups:  # a notice names up to thousands of groups: known ones first, in bounded chunks
                await self._evaluate_known_first(sorted(groups))
            if refined := probed - groups:  # those a commit named too are evaluated already
                with contextlib.suppress(RedisError):  # a refinement: the next answer or commit brings it
                    await self.newcomers.after_new_ones(sorted(refined))
            if self.handled is not None:  # new ones queued: they no longer wait for these notices
                self.handled.handled(events)
            await self._evaluate_where(ends, "log-end", self._could_flip)
            await self._evaluate_where(starts, "log-start", self._closing_in)

    def _sort(self, values: Iterable[bytes]) -> tuple[set[str], set[str], set[str], set[str]]:
        """This cluster's notices: (groups named, groups a log probe's answer concerns, topics whose log end moved,
        topics whose log start moved)."""
        groups: set[str] = set()
        probed: set[str] = set()
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
                (probed if notice.get("reason") == PROBE_REASON else groups).update(groups_of(notice))
        return groups, probed, ends, starts

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
