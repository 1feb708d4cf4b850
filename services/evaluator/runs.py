"""The service's evaluations, whatever asks for them (a notice, the schedule, a takeover, the sweep, a newcomer):
one at a time in this instance, retried while Redis or Kafka fail, and a group whose stored data cannot be read
skipped without holding back the others. Each report's instants go to the schedule, its partitions to the log-end
index (`WatchIndex`), its groups out of the takeover's backlog (backlog.py), its figures to the metrics and to Redis
(the api's /metrics)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from prometheus_client import Counter, Gauge, Histogram
from redis.exceptions import RedisError

from lagwatch.services.evaluator.backlog import TakeoverBacklog
from lagwatch.services.evaluator.evaluation import EvaluationReport, GroupEvaluator
from lagwatch.services.evaluator.next_change import GroupWatch, PartitionWatch, unpacked_watches, watched_partitions
from lagwatch.services.evaluator.schedule_store import ScheduleStore
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.outage_log import OutageLog
from lagwatch.shared.runtime.service_lifecycle import Backoff
from lagwatch.shared.windows.stored_group import TopicPartition

log = logging.getLogger(__name__)
EVALUATIONS = Counter("lagwatch_evaluations_total", "Group evaluations", ["cluster", "trigger"])
TRANSITIONS = Counter("lagwatch_status_transitions_total", "Status changes recorded", ["cluster"])
UNEVALUABLE = Counter(
    "lagwatch_evaluator_unreadable_groups_total",
    "Evaluations skipped: the group's stored data could not be read",
    ["cluster"],
)
UNEVALUABLE_RETRY_MS = 60_000  # a group whose stored data cannot be evaluated is looked at again this much later
CLOCK_HELD = Gauge(
    "lagwatch_evaluator_clock_held_seconds",
    "How far the rules' clock was held behind the wall clock at the last evaluation, because the ingest had not read "
    "the offsets topic that far (shared/windows/read_through.py)",
    ["cluster"],
)
EVALUATION_SECONDS = Histogram(
    "lagwatch_evaluation_seconds",
    "Time to evaluate one batch of groups",
    ["cluster", "trigger"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
# triggers whose groups' sparklines (dashboard only) are owed and drawn when nothing else waits: at a start or a
# takeover, and for a flood of new groups, every group's status comes before any sparkline
SPARKLINES_LATER = frozenset({"takeover", "new"})
SWEEP_CHUNK = 500  # groups per evaluation when there are many: one Redis read each, memory bounded
Placing = Callable[[], Callable[[str], int]]  # each group's changes-topic partition, at the partition count of now
T = TypeVar("T")


async def to_its_end(work: Coroutine[Any, Any, T]) -> T:
    """`work` carried to its end even when the caller is cancelled meanwhile (a service's stop cancels its tasks): an
    evaluation records its transitions, publishes their events, then takes them out of the outbox; cut between the
    publish and the outbox, its events would be published again by whoever evaluates the groups next. The cancel is
    raised once `work` is done (one chunk: every Redis and Kafka wait in it is bounded)."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):  # its failure is moot: the caller stops
            await task
        raise


def _drop(read: asyncio.Future | None) -> None:
    """A read started ahead that no evaluation will use: cancelled, or its failure taken (never logged as lost)."""
    if read is not None and not read.cancel() and not read.cancelled():  # cancel(): False once it is done
        read.exception()


class WatchIndex:
    """What the log-end and log-start notices need, in memory: topic -> the groups reading it, each with its partitions
    of the topic as its last evaluation saw them (`next_change.GroupWatch`), and group -> the topics it reads (one
    topic as it is: most groups read one, and a tuple of one costs more than the name it holds)."""

    def __init__(self) -> None:
        self.readers: dict[str, dict[str, bytes]] = {}
        self.topics: dict[str, str | tuple[str, ...]] = {}

    def remember(self, watches: Mapping[str, GroupWatch | None]) -> None:
        """What an evaluation saw of its groups (None: NOTFOUND, nothing to watch)."""
        for group, watched in watches.items():
            self._unwatch(group)
            if watched:
                for topic, rows in watched.items():
                    self.readers.setdefault(topic, {})[group] = rows
                self.topics[group] = next(iter(watched)) if len(watched) == 1 else tuple(watched)

    def drop(self, gone: Callable[[str], bool]) -> list[str]:
        """Forget the groups `gone` says left this instance; returns them."""
        dropped = [group for group in self.topics if gone(group)]
        for group in dropped:
            self._unwatch(group)
        return dropped

    def watched(self, topics: Iterable[str]) -> Iterator[tuple[str, TopicPartition, PartitionWatch]]:
        """(group, partition, watch) for each watched partition of these topics."""
        for topic in topics:
            for group, rows in self.readers.get(topic, {}).items():
                for partition, watch in unpacked_watches(rows):
                    yield group, (topic, partition), watch

    def partitions(self, topics: Iterable[str]) -> set[TopicPartition]:
        """The watched partitions of these topics (`watched` without making the watches)."""
        return {
            (topic, partition)
            for topic in topics
            for rows in self.readers.get(topic, {}).values()
            for partition in watched_partitions(rows)
        }

    def _unwatch(self, group: str) -> None:
        read = self.topics.pop(group, ())
        for topic in (read,) if isinstance(read, str) else read:
            del self.readers[topic][group]
            if not self.readers[topic]:
                del self.readers[topic]


class Alarm:
    """Cuts the schedule loop's sleep short when an evaluation schedules something sooner than it sleeps until."""

    def __init__(self) -> None:
        self._rung = asyncio.Event()
        self._until = 0.0

    def ring_before(self, instants: Iterable[int | None]) -> None:
        soonest = min((at for at in instants if at is not None), default=None)
        if soonest is not None and soonest / 1000 < self._until:
            self._rung.set()

    async def sleep(self, seconds: float) -> None:
        self._until = time.time() + seconds
        self._rung.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._rung.wait(), timeout=seconds)


class EvaluationRuns:
    def __init__(
        self, evaluator: GroupEvaluator, schedule: ScheduleStore, placing: Placing, stopping: asyncio.Event
    ) -> None:
        self.cluster, self.redis = evaluator.cluster, evaluator.store.redis
        self.evaluator, self.schedule, self.placing, self.stopping = evaluator, schedule, placing, stopping
        self.index = WatchIndex()
        self.backlog = TakeoverBacklog(self.cluster)
        self.alarm = Alarm()
        self.lock = asyncio.Lock()  # one evaluation at a time in this instance: notices and sweeps interleave
        # one for all evaluations: they fail together while Redis is away (and none is made per evaluation)
        self._outage = OutageLog(log, f"evaluator {self.cluster}: evaluation failed")

    async def evaluate(
        self, groups: list[str], trigger: str, read: asyncio.Future | None = None
    ) -> EvaluationReport | None:
        """Evaluate (retrying while Redis or Kafka fail); `read`: the groups' reads, started ahead."""
        backoff = Backoff()
        while not self.stopping.is_set():
            try:
                report = await to_its_end(self._evaluate_once(groups, trigger, read))
                self._outage.ok()
            except (RedisError, OSError) as exc:
                read = None  # read again
                self._outage.failed(exc, f"retrying in {backoff.delay:.1f}s")
                await backoff.pause(self.stopping)
                continue
            except Exception as exc:  # a group's stored data lagwatch cannot read: the others go on
                if len(groups) > 1:
                    return await self._evaluate_each(groups, trigger)
                await self._skip_unreadable(groups[0], exc)
                return None
            await self._observe(trigger, report)
            return report
        return None

    async def _evaluate_once(self, groups: list[str], trigger: str, read: asyncio.Future | None) -> EvaluationReport:
        async with self.lock:  # a takeover's and new groups' sparklines wait until their statuses are out
            report = await self.evaluator.evaluate(groups, sparklines=trigger not in SPARKLINES_LATER, read=read)
            await self.schedule.set(report.next_at, self.placing())
            self.index.remember(report.watches)
            self.backlog.done(groups)
            self.alarm.ring_before(report.next_at.values())
        return report

    async def in_chunks(self, groups: list[str], trigger: str, *, read_ahead: bool = False) -> None:
        """Many groups, SWEEP_CHUNK at a time; `read_ahead`: Redis reads the next chunk while one is evaluated. A stop
        ends it between two chunks (nothing more is read)."""
        chunks = [groups[i : i + SWEEP_CHUNK] for i in range(0, len(groups), SWEEP_CHUNK)]
        ahead: asyncio.Future | None = None
        try:
            for i, chunk in enumerate(chunks):
                if self.stopping.is_set():
                    break
                read, ahead = ahead, None
                if read_ahead and i + 1 < len(chunks):
                    ahead = asyncio.ensure_future(self.evaluator.read(chunks[i + 1], now_ms()))
                try:
                    await self.evaluate(chunk, trigger, read)
                finally:
                    _drop(read)  # unused when stopping
        finally:
            _drop(ahead)

    async def _evaluate_each(self, groups: list[str], trigger: str) -> EvaluationReport | None:
        """The groups one at a time, after their evaluation together failed: the failure is one group's."""
        reports = [await self.evaluate([group], trigger) for group in groups]
        return next((report for report in reversed(reports) if report is not None), None)

    async def _skip_unreadable(self, group: str, exc: Exception) -> None:
        """A group whose stored data cannot be evaluated (not written by lagwatch: edited by hand, another version)
        is counted, logged and looked at again in a while, not at every turn of the schedule."""
        UNEVALUABLE.labels(self.cluster).inc()
        self.backlog.done([group])  # looked at: the schedule brings it back
        log.error(
            "evaluator %s: group %r cannot be evaluated (%s: %s); skipped, tried again in %ds",
            self.cluster,
            group,
            type(exc).__name__,
            str(exc)[:200],
            UNEVALUABLE_RETRY_MS // 1000,
        )
        with contextlib.suppress(RedisError, OSError):  # else due again at once: tried at the next turn
            async with self.lock:
                await self.schedule.set({group: now_ms() + UNEVALUABLE_RETRY_MS}, self.placing())

    async def _observe(self, trigger: str, report: EvaluationReport) -> None:
        EVALUATIONS.labels(self.cluster, trigger).inc(report.groups)
        EVALUATION_SECONDS.labels(self.cluster, trigger).observe(report.seconds)
        TRANSITIONS.labels(self.cluster).inc(report.transitions)
        CLOCK_HELD.labels(self.cluster).set(report.held_ms / 1000)
        await self.count(f"evaluations:{trigger}", report.groups, report)

    async def count(self, name: str, n: int, report: EvaluationReport | None = None) -> None:
        """Running totals in Redis, for the api's /metrics."""
        stats = keys.evaluator_stats(self.cluster)
        with contextlib.suppress(RedisError):  # counters are best effort
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hincrby(stats, name, n)
                if report is not None:
                    pipe.hincrby(stats, "transitions", report.transitions)
                    pipe.hincrby(stats, "events_published", report.published)
                    if report.lag_crossings:
                        pipe.hincrby(stats, "lag_crossings", report.lag_crossings)
                    pipe.hincrbyfloat(stats, "evaluation_seconds", report.seconds)
                await pipe.execute()
