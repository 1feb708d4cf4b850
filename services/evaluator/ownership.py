"""The groups of the changes-topic partitions this instance holds (a group belongs to the instance holding its
partition). When partitions come (a start, a restart, a rebalance) their schedule is resumed at once, as the evaluator
before left it in Redis, and their groups wait in a backlog (backlog.py) that is worked off a chunk at a time whenever
nothing is due, known groups first (new ones queue behind everything, newcomers.py). Groups are evaluated when the
schedule says they are due (a loop sleeps until the earliest instant of the partitions' schedules; idle, it costs
one small Redis read every SCHEDULE_IDLE_S), and at every sweep (`evaluator.sweep-interval`: a safety net for lost
notices, not the way statuses are found)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import faust
from faust.exceptions import ConsumerNotStarted
from faust.types import TP
from prometheus_client import Gauge
from redis.exceptions import RedisError

from lagwatch.services.evaluator.backlog import TOPICS_PAGE
from lagwatch.services.evaluator.newcomers import Newcomers
from lagwatch.services.evaluator.runs import SWEEP_CHUNK, EvaluationRuns
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.heap import give_back_free_memory
from lagwatch.shared.runtime.outage_log import OutageLog
from lagwatch.shared.runtime.service_lifecycle import pause
from lagwatch.shared.windows.changes import partition_of

log = logging.getLogger(__name__)
# For alerts on a late safety net or schedule (deploy/prometheus/lagwatch-rules.yml): this instance's own view.
SWEEP_INTERVAL = Gauge(
    "lagwatch_evaluator_sweep_interval_seconds", "The configured evaluator.sweep-interval", ["cluster"]
)
LAST_SWEEP = Gauge(
    "lagwatch_evaluator_last_sweep_timestamp_seconds",
    "When this instance last finished a sweep (its start, before the first)",
    ["cluster"],
)
SCHEDULE_DELAY = Gauge(
    "lagwatch_evaluator_schedule_delay_seconds",
    "How overdue the most overdue scheduled evaluation was when last looked at (0: nothing overdue)",
    ["cluster"],
)
DELAY_SAMPLE_MS = 1000  # the schedule's delay is looked up at most this often while evaluations are due
SCHEDULE_IDLE_S = 2.0  # longest sleep of the schedule loop (it also wakes when an evaluation schedules sooner)


class ChangesPartitions:
    def __init__(self, app: faust.App, topic: faust.TopicT, cluster: str) -> None:
        self.app, self.topic, self.cluster = app, topic, cluster
        self._count = 1  # the topic's partitions, as last known

    def owned(self) -> set[int] | None:
        """The partitions this instance holds; None before its consumer runs or while it has none."""
        try:
            assignment = self.app.consumer.assignment()
        except ConsumerNotStarted:
            return None
        return {tp.partition for tp in assignment if tp.topic == self.topic.get_topic_name()} or None

    async def ends(self) -> dict[int, int]:
        """The end offsets of the partitions this instance holds, asked of the brokers now."""
        tps = [tp for tp in self.app.consumer.assignment() if tp.topic == self.topic.get_topic_name()]
        return {tp.partition: int(end) for tp, end in (await self.app.consumer.highwaters(*tps)).items()} if tps else {}

    async def position(self, partition: int) -> int:
        """Where this instance's consumer reads the partition next (what it fetched, handled or not)."""
        return int(await self.app.consumer.position(TP(self.topic.get_topic_name(), partition)) or 0)

    def count(self) -> int:
        """The topic's partition count: the consumer's, else the last it told (1 before it ever has)."""
        with contextlib.suppress(ConsumerNotStarted, AttributeError):  # created, not joined: no coordinator yet
            self._count = self.app.consumer.topic_partitions(self.topic.get_topic_name()) or self._count
        return self._count

    def placing(self) -> Callable[[str], int]:
        """Each group's partition, at the partition count of now."""
        count = self.count()
        return lambda group: partition_of(self.cluster, group, count)


class OwnedGroups:
    def __init__(
        self, runs: EvaluationRuns, newcomers: Newcomers, partitions: ChangesPartitions, sweep_s: float
    ) -> None:
        self.runs, self.newcomers, self.partitions = runs, newcomers, partitions
        self.cluster, self.evaluator, self.schedule = runs.cluster, runs.evaluator, runs.schedule
        self.stopping = runs.stopping
        # partitions whose schedule this instance runs since they were assigned (their groups not evaluated here yet
        # wait in `runs.backlog`)
        self.taken_over: set[int] = set()
        self.sweeps_done = 0
        self._delay_sampled_at = 0
        self._bursting = False  # a takeover's or new groups' burst of work since the heap was last given back
        SWEEP_INTERVAL.labels(self.cluster).set(sweep_s)
        LAST_SWEEP.labels(self.cluster).set_to_current_time()
        SCHEDULE_DELAY.labels(self.cluster).set(0)

    async def run_schedule(self) -> None:
        outage = OutageLog(log, f"evaluator {self.cluster}: schedule unreadable")
        while not self.stopping.is_set():
            try:
                await self._schedule_round()
                outage.ok()
            except RedisError as exc:
                outage.failed(exc)
                await pause(self.stopping, 1.0)
            except Exception:  # never let the loop die silently: the sweep alone would be far too slow
                log.exception("evaluator %s: schedule round failed; retrying", self.cluster)
                await pause(self.stopping, 1.0)

    async def _schedule_round(self) -> None:
        """Take over newly assigned partitions, else evaluate the groups that are due, else a step of the takeover's
        backlog, else (no new group waiting) draw owed sparklines, else sleep until a group is due."""
        owned = self.partitions.owned()
        if owned is None:
            await pause(self.stopping, 0.1)
        elif owned != self.taken_over:
            await self.take_over(owned)
        elif due := await self.schedule.due(owned, now := now_ms()):
            await self._sample_delay(owned, now)
            await self.runs.in_chunks(due, "schedule")
        elif self.runs.backlog:
            self._bursting = True
            await self._catch_up()
        elif self.evaluator.sparklines.owed and not self.newcomers.queue:
            # nothing due, no new group waiting: draw the sparklines a takeover or new groups left for later
            self._bursting = True
            async with self.runs.lock:
                await self.evaluator.sparklines.draw_owed(SWEEP_CHUNK)
        else:
            await self._idle(owned, now)

    async def _idle(self, owned: set[int], now: int) -> None:
        """Sleep until a group is due. Once a burst is over (caught up, new groups and owed sparklines done), the heap
        gives back what it freed first: a dict's table of every group, the chunks' buffers, none needed again."""
        if self._bursting and not self.newcomers.queue:
            self._bursting = False
            give_back_free_memory()
        SCHEDULE_DELAY.labels(self.cluster).set(0)
        earliest = await self.schedule.earliest(owned)
        wait = SCHEDULE_IDLE_S if earliest is None else max(0.0, (earliest - now) / 1000)
        await self.runs.alarm.sleep(min(SCHEDULE_IDLE_S, wait))

    async def _catch_up(self) -> None:
        """One step of the backlog, taken when nothing was due: list the groups of the partitions taken over (known
        ones, the worst first; new ones are queued behind everything, newcomers.py), else read the topics of a page
        of them (from their stored results, so that a log-end notice can bring them forward), else evaluate a chunk
        of them."""
        backlog = self.runs.backlog
        if backlog.unlisted:
            partitions = set(backlog.unlisted)
            if (groups := await self._groups_of(partitions, "takeover")) is None:
                await pause(self.stopping, 1.0)
                return
            backlog.listed(partitions, groups)
        elif unread := backlog.unread(TOPICS_PAGE):
            backlog.read(unread, await self.evaluator.results.topics_of(self.cluster, unread))
        else:
            await self.runs.evaluate(backlog.take(SWEEP_CHUNK), "takeover")

    async def _sample_delay(self, owned: set[int], now: int) -> None:
        if now - self._delay_sampled_at >= DELAY_SAMPLE_MS:
            self._delay_sampled_at = now
            oldest = await self.schedule.earliest(owned)
            SCHEDULE_DELAY.labels(self.cluster).set(0 if oldest is None else max(0, now - oldest) / 1000)

    async def take_over(self, owned: set[int]) -> None:
        """Partitions came or went: run the new ones' schedule from now on and catch up on their groups (`_catch_up`);
        forget the groups of those handed away, evaluated or still waiting."""
        gone, new = self.taken_over - owned, owned - self.taken_over
        place, backlog = self.partitions.placing(), self.runs.backlog

        def elsewhere(group: str) -> bool:
            return place(group) not in owned

        self.evaluator.forget(self.runs.index.drop(elsewhere))
        backlog.drop(elsewhere)
        backlog.take_over(new, owned)
        if new:
            log.info("evaluator %s: taking over changes partitions %s", self.cluster, sorted(new))
        if gone:
            log.info("evaluator %s: handed over changes partitions %s", self.cluster, sorted(gone))
        self.taken_over = set(owned)

    async def sweep(self) -> None:
        owned = self.partitions.owned()
        if owned is None:
            return  # not assigned yet (or rebalancing): the next sweep will do
        if await self.evaluate(owned, "sweep"):
            self.sweeps_done += 1
            LAST_SWEEP.labels(self.cluster).set_to_current_time()
            await self.runs.count("sweeps", 1)

    async def evaluate(self, partitions: set[int], trigger: str) -> bool:
        """Evaluate every group of these partitions, known ones first; False when Redis could not list them."""
        groups = await self._groups_of(partitions, trigger)
        if groups is None:
            return False
        await self.runs.in_chunks(groups, trigger, read_ahead=True)
        return True

    async def _groups_of(self, partitions: set[int], trigger: str) -> list[str] | None:
        """The groups of these partitions with a recorded status, the worst first (the new ones are queued behind
        everything, newcomers.py); None when Redis could not list them."""
        place, evaluator = self.partitions.placing(), self.evaluator
        try:
            groups = (
                set(await evaluator.store.reads.list_groups(self.cluster))
                | set(await evaluator.statuses.known_groups(self.cluster))
                | set(await evaluator.results.groups(self.cluster))
            )
            return await self.newcomers.known_first(sorted(g for g in groups if place(g) in partitions))
        except RedisError as exc:
            log.warning("evaluator %s: %s skipped, Redis unavailable (%s)", self.cluster, trigger, exc)
            return None
