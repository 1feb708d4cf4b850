"""`lagwatch run evaluator`: a Faust app that evaluates groups as their commits arrive, when time alone can change
them, and when a log-end poll can; it publishes a status-change event whenever a group's status changes and stores
each group's ready result (results_store.py) for /metrics and the dashboard.

* Commits: a Faust agent consumes the group-changes topic (`lagwatch.changes`, see `shared/windows/changes.py`) in
batches
  of up to a thousand notices or 50 ms, and evaluates the groups named in them (a notice names the groups of a
  batch that share its partition), SWEEP_CHUNK at a time.
* Time: each evaluation computes the group's next instant time alone can change it (a STOP rule turning true, its
  expiry, a lag-seconds threshold: next_change.py) and keeps it in the schedule (schedule_store.py: a sorted set per
  changes-topic partition). A loop sleeps until the earliest instant of the partitions this instance holds and
  evaluates exactly the groups that are due. Idle, it costs one small Redis read every `SCHEDULE_IDLE_S`.
* Log ends: the ingest's poller publishes a log-end notice naming the topics whose log end moved; the evaluator keeps
  an in-memory index topic -> groups (with what each partition looked like when evaluated) and re-evaluates only the
  groups where the poll could flip a rule (`PartitionWatch.poll_could_flip`).
* Ownership: the evaluator instances form the consumer group `lagwatch-evaluator-<cluster>` on the changes topic;
  a group belongs to the instance holding its partition, for notices, schedule and sweeps alike. When an instance
  gets partitions (at start, after a rebalance) it evaluates their groups once: that fills its index, catches up
  on what happened meanwhile and takes over their schedule. Their lag sparklines (dashboard only) are drawn after
  all of their statuses, when nothing is due. During a rebalance two instances may briefly both
  evaluate a group: the status store's compare-and-set lets only one of them record (and publish) each transition.
* Sweep: every `evaluator.sweep-interval` seconds (minutes by default) a Faust timer evaluates every group this
  instance owns: a safety net for lost notices, not the way statuses are found.
* Lag-seconds thresholds (lag_thresholds.py): the same evaluations publish lag-threshold events on
  `evaluator.lag-threshold-topic` when a group's lag in seconds crosses a subscription's `lag-seconds-threshold`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable

from faust.exceptions import ConsumerNotStarted
from prometheus_client import Counter, Gauge, Histogram
from redis.exceptions import RedisError

from lagwatch.services.evaluator.evaluation import EvaluationReport, GroupEvaluator
from lagwatch.services.evaluator.lag_state_store import LagStateStore
from lagwatch.services.evaluator.lag_thresholds import LagThresholdAlerts, ThresholdSource
from lagwatch.services.evaluator.newcomers import NewcomerQueue, triage, within_cap
from lagwatch.services.evaluator.next_change import PartitionWatch, closing_in
from lagwatch.services.evaluator.publisher import EventPublisher
from lagwatch.services.evaluator.schedule_store import ScheduleStore
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.config import Config
from lagwatch.shared.runtime.faust_kafka import (
    GroupMembership,
    faust_app,
    raw_topic,
    start_unless_stopping,
    stop_within,
)
from lagwatch.shared.runtime.health_server import HealthServer
from lagwatch.shared.runtime.kafka_client import client_kwargs
from lagwatch.shared.runtime.kafka_probe import KafkaProbe
from lagwatch.shared.runtime.outage_log import OutageLog
from lagwatch.shared.runtime.presence import Presence
from lagwatch.shared.runtime.redis_client import connect
from lagwatch.shared.runtime.redis_memory import takes_writes, warn_if_evicting
from lagwatch.shared.runtime.service_lifecycle import Backoff, pause, run_until_signalled, until_stopped_or_dead
from lagwatch.shared.statuses.results_store import ResultsStore
from lagwatch.shared.windows.changes import decode_notice, groups_of, partition_of
from lagwatch.shared.windows.store import WindowStore

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
DELAY_SAMPLE_MS = 1000  # the schedule's delay is looked up at most this often while evaluations are due
SWEEP_CHUNK = 500
SCHEDULE_IDLE_S = 2.0  # longest sleep of the schedule loop (it also wakes when an evaluation schedules sooner)
NOTICE_BATCH, NOTICE_WAIT_S = 1000, 0.05


def _drop(read: asyncio.Future | None) -> None:
    """A read started ahead that no evaluation will use: cancelled, or its failure taken (never logged as lost)."""
    if read is None:
        return
    if not read.done():
        read.cancel()
    elif not read.cancelled():
        read.exception()


def consumer_group(cluster: str) -> str:
    return f"lagwatch-evaluator-{cluster}"


class EvaluatorService:
    def __init__(self, config: Config, cluster: str, *, http_port: int | None = None) -> None:
        self.cluster = cluster
        self.config = config
        self._connect_stores(config, cluster)
        # topic -> groups reading it, and each evaluated group's partitions, for the log-end notices
        self.readers: dict[str, set[str]] = {}
        self.watches: dict[str, dict[tuple[str, int], PartitionWatch]] = {}
        self.taken_over: set[int] = set()  # changes-topic partitions whose groups were evaluated since assigned
        self._changes_count = 1  # the changes topic's partitions, as last known (for a schedule entry's partition)
        self.scheduled_evaluations = 0
        self._wake = asyncio.Event()  # an evaluation scheduled something sooner than the loop sleeps
        self._sleeping_until: float = 0.0
        self._kafka_probe = KafkaProbe(config.clusters)  # assignment outlives a broker outage: ask the brokers
        self.health = HealthServer(
            "evaluator",
            {"redis": self._redis_ok, "kafka": self._kafka_ok},
            host=config.evaluator.http_host,
            port=config.evaluator.http_port if http_port is None else http_port,
        )
        self.stopping = asyncio.Event()
        self.sweeps_done = 0
        SWEEP_INTERVAL.labels(cluster).set(config.evaluator.sweep_interval)
        LAST_SWEEP.labels(cluster).set_to_current_time()
        SCHEDULE_DELAY.labels(cluster).set(0)
        self._delay_sampled_at = 0
        self._schedule_task: asyncio.Task | None = None
        self.newcomers = NewcomerQueue()
        self._newcomers_waiting = asyncio.Event()
        self._newcomers_task: asyncio.Task | None = None
        MAX_GROUPS.labels(cluster).set(config.evaluator.max_groups)
        NEW_GROUPS_WAITING.labels(cluster).set(0)
        NEW_GROUPS.labels(cluster)  # exported at 0 from the start: the rules' increase() sees the first ones
        OVER_CAP.labels(cluster)
        self._lock = asyncio.Lock()  # one evaluation at a time in this instance: notices and sweeps interleave
        # one for all evaluations: they fail together while Redis is away (and none is made per evaluation)
        self._evaluation_outage = OutageLog(log, f"evaluator {cluster}: evaluation failed")
        self._over_cap_log = OutageLog(log, f"evaluator {cluster}: over evaluator.max-groups")
        self._create_app(config, cluster)

    def _connect_stores(self, config: Config, cluster: str) -> None:
        """Redis, the stores on it, the event publisher and the group evaluator that uses them all."""
        cluster_config = config.cluster(cluster)  # an unknown cluster fails before anything connects
        self.redis = connect(config.redis)
        self.store = WindowStore(self.redis, config.window())
        self.statuses = StatusStore(self.redis, config.window().expire_group_ms)
        self.publisher = EventPublisher(client_kwargs(cluster_config, cluster), config.evaluator.status_topic)
        self.lag_alerts = LagThresholdAlerts(
            cluster,
            LagStateStore(self.redis, config.window().expire_group_ms),
            ThresholdSource(self.redis, cluster, config.subscriptions),
            self.publisher,
            config.evaluator.lag_threshold_topic,
        )
        self.results = ResultsStore(self.redis)
        self.schedule = ScheduleStore(self.redis, cluster)
        self.presence = Presence(self.redis, cluster, "evaluator")
        self.evaluator = GroupEvaluator(
            cluster,
            self.store,
            self.statuses,
            self.publisher,
            config.rules(),
            lag_alerts=self.lag_alerts,
            results=self.results,
            group_filter=config.group_filter(cluster),
            poll_interval_ms=int(cluster_config.offset_refresh * 1000),
        )

    def _create_app(self, config: Config, cluster: str) -> None:
        """The Faust app: the changes-topic agent and the sweep timer."""
        cluster_config = config.cluster(cluster)
        self.app = faust_app(
            consumer_group(cluster),
            cluster_config,
            cluster,
            "evaluator",
            config.ingest.session_timeout,
            consumer_auto_offset_reset="latest",  # old notices are moot: the first sweep evaluates everything
        )
        self.membership = GroupMembership(self.app)
        self.changes = raw_topic(self.app, config.evaluator.changes_topic)
        self.app.agent(self.changes, name="lagwatch.evaluator.on_changes")(self._on_changes)
        self.app.timer(config.evaluator.sweep_interval, name="lagwatch.evaluator.sweep")(self._sweep)

    async def _redis_ok(self) -> bool:
        return await takes_writes(self.redis)

    async def _kafka_ok(self) -> bool:
        """Joined its group (partitions assigned, or none: a standby), and the brokers answer now (an assignment
        stays while they are down)."""
        return self.membership.joined and await self._kafka_probe.reachable(self.cluster)

    # --- the two triggers ------------------------------------------------------------------------------------

    async def _on_changes(self, stream) -> None:
        async for events in stream.take_events(NOTICE_BATCH, within=NOTICE_WAIT_S):
            groups: set[str] = set()
            topics: set[str] = set()
            starts: set[str] = set()
            for event in events:
                notice = decode_notice(event.value)
                if notice is None:
                    log.warning("evaluator %s: skipped a malformed change notice", self.cluster)
                elif notice["cluster"] != self.cluster:
                    continue
                elif "topics" in notice:
                    (starts if notice.get("reason") == "log-start" else topics).update(notice["topics"])
                else:
                    groups.update(groups_of(notice))
            if groups:  # a notice names up to thousands of groups: known ones first, in bounded chunks
                await self._evaluate_known_first(sorted(groups), "notice")
            if topics:
                await self._on_log_ends(topics)
            if starts:
                await self._on_log_starts(starts)

    async def _on_log_starts(self, topics: set[str]) -> None:
        """Re-evaluate the groups that retention closes in on: on some partition of these topics (whose log start
        moved), their newest commit is in the older half of what the log holds, or below its start (messages
        skipped). A caught-up group is not: its retention risk only matters once it falls that far behind."""
        partitions = {
            tp for t in topics for g in self.readers.get(t, ()) for tp in self.watches.get(g, {}) if tp[0] == t
        }
        if not partitions:
            return
        try:
            starts, ends = await asyncio.gather(
                self.store.offset_histories(self.cluster, partitions, keys.log_start_history),
                self.store.latest_broker_offsets(self.cluster, partitions),
            )
        except RedisError as exc:
            log.warning("evaluator %s: log-start notice skipped, Redis unavailable (%s)", self.cluster, exc)
            return
        due = sorted(
            g
            for t in topics
            for g in self.readers.get(t, ())
            if any(
                tp[0] == t
                and starts.get(tp)
                and (end := ends.get(tp)) is not None
                and closing_in(w, starts[tp][-1].offset, end)
                for tp, w in self.watches.get(g, {}).items()
            )
        )
        await self._evaluate_in_chunks(due, "log-start")

    async def _on_log_ends(self, topics: set[str]) -> None:
        """Re-evaluate the groups reading these topics where the new log ends could flip a rule."""
        partitions = {
            tp for t in topics for g in self.readers.get(t, ()) for tp in self.watches.get(g, {}) if tp[0] == t
        }
        if not partitions:
            return
        try:
            ends = await self.store.latest_broker_offsets(self.cluster, partitions)
        except RedisError as exc:
            log.warning("evaluator %s: log-end notice skipped, Redis unavailable (%s)", self.cluster, exc)
            return
        rules = self.evaluator.rules
        due = sorted(
            g
            for t in topics
            for g in self.readers.get(t, ())
            if any(
                tp[0] == t and (end := ends.get(tp)) is not None and w.poll_could_flip(end, rules)
                for tp, w in self.watches.get(g, {}).items()
            )
        )
        await self._evaluate_in_chunks(due, "log-end")

    async def _evaluate_known_first(self, groups: list[str], trigger: str) -> None:
        """The groups with a recorded status now, the worst first; the new ones queued behind (newcomers.py)."""
        try:
            known, new = triage(groups, await self.statuses.statuses_of(self.cluster, groups))
        except RedisError:
            known, new = groups, []  # their evaluation retries until Redis is back
        self._queue_newcomers(new)
        await self._evaluate_in_chunks(known, trigger)

    def _queue_newcomers(self, new: list[str]) -> None:
        if not new:
            return
        added = self.newcomers.add(new)
        NEW_GROUPS.labels(self.cluster).inc(added)
        NEW_GROUPS_WAITING.labels(self.cluster).set(len(self.newcomers))
        self._newcomers_waiting.set()

    async def _run_newcomers(self) -> None:
        """Evaluate queued new groups a chunk at a time, each chunk after whatever else waits for the lock."""
        while not self.stopping.is_set():
            await self._newcomers_waiting.wait()
            self._newcomers_waiting.clear()
            while self.newcomers and not self.stopping.is_set():
                await self._evaluate_newcomers(self.newcomers.take(SWEEP_CHUNK))
                NEW_GROUPS_WAITING.labels(self.cluster).set(len(self.newcomers))

    async def _evaluate_newcomers(self, chunk: list[str]) -> None:
        """A chunk of new groups, those that fit under `evaluator.max-groups` (the rest counted and skipped)."""
        cap = self.config.evaluator.max_groups
        try:
            count = await self.statuses.count(self.cluster) if cap else 0
        except RedisError:
            count = 0  # the evaluation below retries until Redis is back; the cap is looked at again next chunk
        fits, over = within_cap(chunk, count, cap)
        if over:
            await self._skip_over_cap(over, cap)
        elif cap:
            self._over_cap_log.ok()
        if fits:
            await self._evaluate(fits, "new")

    async def _skip_over_cap(self, over: list[str], cap: int) -> None:
        """Counted, and their windows deleted (a flood of junk names must not fill Redis for `expire-group`): the
        ingest forgets a group deleted under it, and a real group's next commit after there is room starts it
        afresh. A group that got a status meanwhile is kept."""
        OVER_CAP.labels(self.cluster).inc(len(over))
        self._over_cap_log.failed(f"{len(over)} new groups skipped", f"evaluator.max-groups is {cap}")
        with contextlib.suppress(RedisError):  # left to expire: the next chunk looks at the cap again
            still_new = triage(over, await self.statuses.statuses_of(self.cluster, over))[1]
            await self.store.delete_groups(self.cluster, still_new)

    async def _evaluate_in_chunks(self, groups: list[str], trigger: str) -> None:
        """Many groups, SWEEP_CHUNK at a time: one Redis read and one evaluation per chunk, memory bounded."""
        for i in range(0, len(groups), SWEEP_CHUNK):
            await self._evaluate(groups[i : i + SWEEP_CHUNK], trigger)

    async def _sweep(self) -> None:
        owned = self.owned_partitions()
        if owned is None:
            return  # not assigned yet (or rebalancing): the next sweep will do
        if await self._evaluate_partitions(owned, "sweep"):
            self.sweeps_done += 1
            LAST_SWEEP.labels(self.cluster).set_to_current_time()
            await self._count("sweeps", 1)

    async def _evaluate_partitions(self, partitions: set[int], trigger: str) -> bool:
        """Evaluate every group of these changes-topic partitions; False when Redis could not list them."""
        count = self.changes_partitions()
        try:
            groups = (
                set(await self.store.list_groups(self.cluster))
                | set(await self.statuses.known_groups(self.cluster))
                | set(await self.results.groups(self.cluster))
            )
        except RedisError as exc:
            log.warning("evaluator %s: %s skipped, Redis unavailable (%s)", self.cluster, trigger, exc)
            return False
        mine = sorted(g for g in groups if partition_of(self.cluster, g, count) in partitions)
        try:
            mine, new = triage(mine, await self.statuses.statuses_of(self.cluster, mine))
        except RedisError as exc:
            log.warning("evaluator %s: %s skipped, Redis unavailable (%s)", self.cluster, trigger, exc)
            return False
        self._queue_newcomers(new)
        chunks = [mine[i : i + SWEEP_CHUNK] for i in range(0, len(mine), SWEEP_CHUNK)]
        ahead: asyncio.Future | None = None
        try:
            for i, chunk in enumerate(chunks):
                read, ahead = ahead, None
                if i + 1 < len(chunks):  # Redis reads the next batch while this one is evaluated
                    ahead = asyncio.ensure_future(self.evaluator.read(chunks[i + 1], now_ms()))
                try:
                    await self._evaluate(chunk, trigger, read)
                finally:
                    _drop(read)  # unused when stopping
        finally:
            _drop(ahead)
        return True

    # --- the schedule -----------------------------------------------------------------------------------------

    async def _run_schedule(self) -> None:
        """Take over newly assigned partitions, then evaluate the groups that are due, sleeping in between."""
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
        owned = self.owned_partitions() if self.app.consumer else None
        if owned is None:
            await pause(self.stopping, 0.1)
            return
        if owned != self.taken_over:
            await self._take_over(owned)
            return
        now = now_ms()
        due = await self.schedule.due(owned, now)
        if due and now - self._delay_sampled_at >= DELAY_SAMPLE_MS:
            self._delay_sampled_at = now
            oldest = await self.schedule.earliest(owned)
            SCHEDULE_DELAY.labels(self.cluster).set(0 if oldest is None else max(0, now - oldest) / 1000)
        if due:
            await self._evaluate_in_chunks(due, "schedule")
            self.scheduled_evaluations += len(due)
            return
        if self.evaluator.sparklines_owed:  # nothing due: draw the sparklines the takeover left for later
            async with self._lock:
                await self.evaluator.draw_owed_sparklines(SWEEP_CHUNK)
            return
        SCHEDULE_DELAY.labels(self.cluster).set(0)
        earliest = await self.schedule.earliest(owned)
        wait = SCHEDULE_IDLE_S if earliest is None else min(SCHEDULE_IDLE_S, max(0.0, (earliest - now) / 1000))
        self._sleeping_until = time.time() + wait
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=wait)

    async def _take_over(self, owned: set[int]) -> None:
        """Partitions came or went: evaluate the new ones' groups (their schedule is now ours), drop the others'."""
        gone, new = self.taken_over - owned, owned - self.taken_over
        count = self.changes_partitions()
        dropped = [g for g in self.watches if partition_of(self.cluster, g, count) not in owned]
        for group in dropped:
            self._unwatch(group)
        self.evaluator.forget(dropped)
        if new:
            log.info("evaluator %s: taking over changes partitions %s", self.cluster, sorted(new))
            if not await self._evaluate_partitions(new, "takeover"):
                await pause(self.stopping, 1.0)
                return
        if gone:
            log.info("evaluator %s: handed over changes partitions %s", self.cluster, sorted(gone))
        self.taken_over = set(owned)

    def _remember(self, report: EvaluationReport) -> None:
        """Index what the evaluation saw, and wake the schedule loop when something is due sooner."""
        for group, watched in report.watches.items():
            self._unwatch(group)
            if watched:
                self.watches[group] = watched
                for topic, _ in watched:
                    self.readers.setdefault(topic, set()).add(group)
        soonest = min((at for at in report.next_at.values() if at is not None), default=None)
        if soonest is not None and soonest / 1000 < self._sleeping_until:
            self._wake.set()

    def _unwatch(self, group: str) -> None:
        for topic, _ in self.watches.pop(group, {}):
            readers = self.readers.get(topic)
            if readers is not None:
                readers.discard(group)
                if not readers:
                    del self.readers[topic]

    def owned_partitions(self) -> set[int] | None:
        """The changes-topic partitions this instance holds; None before its consumer runs or while it has none."""
        try:
            assignment = self.app.consumer.assignment()
        except ConsumerNotStarted:
            return None
        assigned = {tp.partition for tp in assignment if tp.topic == self.changes.get_topic_name()}
        return assigned or None

    def changes_partitions(self) -> int:
        """The changes topic's partition count: the consumer's, else the last it told (1 before it ever has)."""
        try:
            count = self.app.consumer.topic_partitions(self.changes.get_topic_name())
        except (ConsumerNotStarted, AttributeError):  # created, not joined yet: Faust reads a coordinator not made
            count = None
        if count:
            self._changes_count = count
        return self._changes_count

    async def _evaluate(
        self, groups: list[str], trigger: str, read: asyncio.Future | None = None
    ) -> EvaluationReport | None:
        """Evaluate (retrying while Redis or Kafka fail); `read`: the groups' reads, started ahead."""
        backoff, outage = Backoff(), self._evaluation_outage
        while not self.stopping.is_set():
            try:
                async with self._lock:  # a takeover's sparklines wait until its statuses are out
                    report = await self.evaluator.evaluate(groups, sparklines=trigger != "takeover", read=read)
                    await self._reschedule(report)
                outage.ok()
            except (RedisError, OSError) as exc:
                read = None  # read again
                outage.failed(exc, f"retrying in {backoff.delay:.1f}s")
                await backoff.pause(self.stopping)
                continue
            except Exception as exc:  # a group's stored data lagwatch cannot read: the others go on
                if len(groups) > 1:
                    return await self._evaluate_each(groups, trigger)
                await self._skip_unreadable(groups[0], exc)
                return None
            EVALUATIONS.labels(self.cluster, trigger).inc(report.groups)
            EVALUATION_SECONDS.labels(self.cluster, trigger).observe(report.seconds)
            TRANSITIONS.labels(self.cluster).inc(report.transitions)
            CLOCK_HELD.labels(self.cluster).set(report.held_ms / 1000)
            await self._count(f"evaluations:{trigger}", report.groups, report)
            return report
        return None

    async def _evaluate_each(self, groups: list[str], trigger: str) -> EvaluationReport | None:
        """The groups one at a time, after their evaluation together failed: the failure is one group's."""
        last = None
        for group in groups:
            last = await self._evaluate([group], trigger) or last
        return last

    async def _skip_unreadable(self, group: str, exc: Exception) -> None:
        """A group whose stored data cannot be evaluated (not written by lagwatch: edited by hand, another version)
        is counted, logged and looked at again in a while, not at every turn of the schedule."""
        UNEVALUABLE.labels(self.cluster).inc()
        log.error(
            "evaluator %s: group %r cannot be evaluated (%s: %s); skipped, tried again in %ds",
            self.cluster,
            group,
            type(exc).__name__,
            str(exc)[:200],
            UNEVALUABLE_RETRY_MS // 1000,
        )
        with contextlib.suppress(RedisError, OSError):  # else due again at once: tried at the next turn
            async with self._lock:
                await self._schedule_at({group: now_ms() + UNEVALUABLE_RETRY_MS})

    async def _reschedule(self, report: EvaluationReport) -> None:
        await self._schedule_at(report.next_at)
        self._remember(report)

    async def _schedule_at(self, next_at: dict[str, int | None]) -> None:
        count = self.changes_partitions()
        await self.schedule.set(next_at, lambda g: partition_of(self.cluster, g, count))

    async def _count(self, name: str, n: int, report: EvaluationReport | None = None) -> None:
        """Running totals in Redis, for the api's /metrics."""
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                stats = keys.evaluator_stats(self.cluster)
                pipe.hincrby(stats, name, n)
                if report is not None:
                    pipe.hincrby(stats, "transitions", report.transitions)
                    pipe.hincrby(stats, "events_published", report.published)
                    if report.lag_crossings:
                        pipe.hincrby(stats, "lag_crossings", report.lag_crossings)
                    pipe.hincrbyfloat(stats, "evaluation_seconds", report.seconds)
                await pipe.execute()
        except RedisError:
            pass  # counters are best effort

    # --- life cycle -------------------------------------------------------------------------------------------

    async def run(self) -> None:
        self.presence.start(self.stopping)
        try:
            await self.health.start()
            log.info("evaluator %s: health and metrics on %s", self.cluster, self.health.url)
            await warn_if_evicting(self.redis, f"evaluator {self.cluster}")
            await self._start_publisher()
            await start_unless_stopping(self.app, self.stopping)
            self._schedule_task = asyncio.create_task(self._run_schedule())
            self._newcomers_task = asyncio.create_task(self._run_newcomers())
            await until_stopped_or_dead(self.stopping, self._dead_work, f"evaluator {self.cluster}")
        finally:
            self._wake.set()
            for task in (self._schedule_task, self._newcomers_task):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            await stop_within(self.app, f"evaluator {self.cluster}")
            await self.publisher.stop()
            await self.health.stop()
            await self.presence.stop()
            await self.redis.aclose()

    def _dead_work(self) -> str | None:
        """A crashed Faust app (its consumer failed for good) ends the service (evaluation state lives in Redis)."""
        return None if self.app.crash_reason is None else f"Faust app crashed: {self.app.crash_reason!r}"

    async def _start_publisher(self) -> None:
        backoff, outage = Backoff(0.2), OutageLog(log, f"evaluator {self.cluster}: cannot reach Kafka")
        while True:
            try:
                await self.publisher.start()
                outage.ok()
                return
            except Exception as exc:  # Kafka not up yet: keep trying, as the other services do
                if self.stopping.is_set():  # asked to stop while waiting for Kafka: a clean stop, not a failure
                    return
                outage.failed(exc)
                await backoff.pause(self.stopping)

    async def evaluate_now(self, groups: Iterable[str]) -> EvaluationReport | None:
        """Evaluate some groups at once (used by tests and the API's refresh)."""
        return await self._evaluate(sorted(groups), "manual")


async def run_evaluator(config: Config, cluster: str, *, http_port: int | None = None) -> None:
    started = time.monotonic()
    await run_until_signalled(EvaluatorService(config, cluster, http_port=http_port))
    log.info("evaluator %s: stopped after %.0fs", cluster, time.monotonic() - started)
