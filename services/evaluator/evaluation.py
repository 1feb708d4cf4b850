"""Evaluating groups and turning status changes into published events.

For each group: read its windows and its last recorded state, compute its status with the shared rules, and when it
differs, record the transition with a compare-and-set (with its event, in the outbox), publish the event, then take it
out of the outbox. Groups gone from the store, with no commit for `expire-group` (deleted then), or excluded by the
allow/deny regexes (their windows deleted) are NOTFOUND: that takes them off the schedule, the status index and the
ready results, closing an open incident instead of letting it drift to STOP. The same evaluation checks the alert
thresholds (lag_thresholds.py), stores each group's ready result (results_store.py) and computes the next instant time
alone could change the group (next_change.py). An event Kafka did not take stays in the outbox and its group is
evaluated again soon; an event over Kafka's record size lists the worst partitions that fit (`status_event.fitted`).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisError

from lagwatch.services.evaluator.lag_thresholds import Evaluated, LagThresholdAlerts
from lagwatch.services.evaluator.next_change import GroupWatch, next_change_at, watch
from lagwatch.services.evaluator.publisher import EventPublisher, publish_outboxes
from lagwatch.services.evaluator.unsent_events import LAG, STATUS, UnsentEvents
from lagwatch.shared.events.lag_threshold_event import Threshold
from lagwatch.shared.events.status_event import (
    MAX_EVENT_BYTES,
    EventDecodeError,
    EventDetails,
    StatusEvent,
    fitted,
    transition,
)
from lagwatch.shared.events.status_store import GroupState, StatusStore, Transition
from lagwatch.shared.protocol.group_filter import GroupFilter
from lagwatch.shared.protocol.types import GroupStatus, RuleConfig, Status
from lagwatch.shared.runtime import clock
from lagwatch.shared.statuses import verdicts
from lagwatch.shared.statuses.explanation import Explanation, explain
from lagwatch.shared.statuses.lag_sparkline import lag_sparkline
from lagwatch.shared.statuses.results_store import GroupResult, ResultsStore, result_of
from lagwatch.shared.statuses.retention import RetentionRisk, group_risk
from lagwatch.shared.statuses.time_lag import TimeLag
from lagwatch.shared.statuses.velocity import Velocity, group_velocity
from lagwatch.shared.windows.read_through_store import ReadThroughStore
from lagwatch.shared.windows.store import WindowStore
from lagwatch.shared.windows.stored_group import StoredGroup, TopicPartition
from lagwatch.shared.windows.window import expired

log = logging.getLogger(__name__)
HELD_RETRY_MS = 500  # while the judging clock is held, a group due by the wall clock is looked at again this often
OUTBOX_RETRY_MS = 5000  # a group whose events Kafka did not take is evaluated (and its outbox sent) again this soon
FOUND_LINES = 10  # new groups found in one evaluation named a line each up to this many; past it, one line counts them


@dataclass(slots=True)
class EvaluationReport:
    groups: int = 0
    transitions: int = 0  # recorded here (another evaluator may record one first: the compare-and-set)
    published: int = 0
    lag_crossings: int = 0  # lag-seconds thresholds crossed (lag_thresholds.py)
    lag_events_published: int = 0
    seconds: float = 0.0
    held_ms: int = 0  # how far the judging clock was behind the wall clock (shared/windows/read_through.py)
    # per group: the next instant time alone may change it (None: NOTFOUND, nothing to wait for)
    next_at: dict[str, int | None] = field(default_factory=dict)
    # per group: its partitions as evaluated, for the log-end notices (None: NOTFOUND)
    watches: dict[str, GroupWatch | None] = field(default_factory=dict)


@dataclass(slots=True)
class _Batch:
    """One `evaluate` call: what it knows up front, and what it gathers group by group to write at the end."""

    now: int
    sparklines: bool  # draw the sparklines now (False: leave them owed)
    thresholds: frozenset[Threshold]  # the subscriptions' lag-seconds thresholds
    rebalances: dict[str, list[int]]  # when each group's recent generations started
    evaluated: list[Evaluated] = field(default_factory=list)
    results: dict[str, GroupResult | None] = field(default_factory=dict)
    lines: dict[str, list] = field(default_factory=dict)  # sparklines
    requests: list[Transition] = field(default_factory=list)
    pending: dict[str, list[bytes]] = field(default_factory=dict)  # events to publish, per group
    unsent: set[str] = field(default_factory=set)  # groups with events Kafka did not acknowledge
    found: set[str] = field(default_factory=set)  # groups NOTFOUND before this evaluation (new ones, mostly)
    gone: bool = False  # some group is NOTFOUND: expired, deleted, or its keys expired in Redis

    def request(self, request: Transition | None, previous: Status) -> None:
        """A group's transition to record (None: its status did not change), from its `previous` status."""
        if request is not None:
            self.requests.append(request)
            if previous == Status.NOTFOUND:
                self.found.add(request.group)


class GroupEvaluator:
    def __init__(
        self,
        cluster: str,
        store: WindowStore,
        statuses: StatusStore,
        publisher: EventPublisher,
        rules: RuleConfig,
        lag_alerts: LagThresholdAlerts | None = None,
        results: ResultsStore | None = None,
        group_filter: GroupFilter | None = None,
        poll_interval_ms: int | None = None,
    ) -> None:
        self.cluster, self.store, self.statuses, self.publisher, self.rules = cluster, store, statuses, publisher, rules
        self.poll_interval_ms = poll_interval_ms  # the cluster's offset-refresh (next_change.exception_lapse_at)
        self.group_filter, self.lag_alerts = group_filter or GroupFilter(), lag_alerts
        self.results = results or ResultsStore(store.redis)
        self.read_through = ReadThroughStore(store.redis, cluster)
        self.sparklines = Sparklines(store, self.results, cluster)
        self.unsent = UnsentEvents(store.redis, cluster)  # how long its events have waited for Kafka (a gauge)

    def status_of(self, stored: StoredGroup | None, now_ms: int) -> GroupStatus | None:
        """The group's status now, or None when it is NOTFOUND."""
        if stored is None or expired(stored.last_commit_ms, now_ms, self.store.config):
            return None
        return verdicts.stored_group_status(stored, self.store.config.intervals, now_ms, self.rules)

    async def read(self, groups: Sequence[str], now_ms: int) -> tuple[list[StoredGroup | None], list[GroupState]]:
        """What an evaluation of these groups reads: their windows and their recorded states."""
        stored_groups = await self.store.reads.get_groups(self.cluster, groups, now_ms)
        return stored_groups, await self.statuses.states(self.cluster, groups)

    async def evaluate(
        self,
        groups: Sequence[str],
        now_ms: int | None = None,
        *,
        sparklines: bool = True,
        read: Awaitable[tuple[list[StoredGroup | None], list[GroupState]]] | None = None,
    ) -> EvaluationReport:
        """Evaluate these groups now; `sparklines=False` leaves their sparklines owed (`Sparklines`). `read`: this
        evaluation's `read`, started ahead; a transition recorded since is caught by the compare-and-set, a commit
        since by its own notice."""
        started = time.perf_counter()
        wall, now = (now_ms, now_ms) if now_ms is not None else await self.read_through.judging_clock()
        report = EvaluationReport(groups=len(groups), held_ms=wall - now)
        stored_groups, states = await (read if read is not None else self.read(groups, now))
        stored_groups = await self._drop_excluded(groups, stored_groups)
        batch = _Batch(
            now=now,
            sparklines=sparklines,
            thresholds=(await self.lag_alerts.source.current())[0] if self.lag_alerts is not None else frozenset(),
            rebalances=await self._rebalance_times(stored_groups, now),
        )
        for group, stored, state in zip(groups, stored_groups, states, strict=True):
            await self._evaluate_group(batch, report, group, stored, state)
        if batch.gone:  # names whose keys Redis expired on its own leave the group index too (not listed, not swept)
            await self.store.deletions.unindex_expired(self.cluster, now)
        await self._record_and_publish(batch, report)
        await self.results.write(self.cluster, batch.results, batch.lines)
        next_at = report.next_at
        if now < wall:  # the clock is held: what is due by the wall clock would be evaluated again in a tight loop
            next_at.update({g: wall + HELD_RETRY_MS for g, at in next_at.items() if at is not None and at <= wall})
        for group in batch.unsent:  # nothing else evaluates them soon (the sweep is minutes away, NOTFOUND unlisted)
            due, retry_at = next_at.get(group), wall + OUTBOX_RETRY_MS
            next_at[group] = retry_at if due is None else min(due, retry_at)
        report.seconds = time.perf_counter() - started
        return report

    async def _evaluate_group(
        self, batch: _Batch, report: EvaluationReport, group: str, stored: StoredGroup | None, state: GroupState
    ) -> None:
        """One group of `evaluate`: its status, explanation and transition request; when it is live, its result."""
        now, intervals = batch.now, self.store.config.intervals
        status = self.status_of(stored, now)
        batch.gone = batch.gone or status is None
        if stored is not None and status is None:  # expired: forget its windows too
            await self.store.deletions.delete_group(self.cluster, group)
        batch.pending[group] = list(state.pending)  # left by an evaluator that stopped before publishing
        live = stored if status is not None else None  # the stored group, unless it is NOTFOUND
        lags = verdicts.time_lags(live, now) if live is not None else None
        speeds = verdicts.velocities(live, intervals, now) if live is not None else {}
        overall = group_velocity(speeds.values())
        risks = verdicts.retention_risks(live, now) if live is not None else None
        retention = group_risk(risks.values()) if risks else None
        known = stored is not None and stored.generation is not None
        rebalances = batch.rebalances.get(group, ())
        clock_offset = stored.clock_offset_ms if stored is not None else 0
        why = explain(
            status, speeds, overall, rebalances, now, known, retention=retention, clock_offset_ms=clock_offset
        )
        details = _event_details(live is not None, lags, speeds, why, risks, (overall, retention))
        batch.request(_request(self.cluster, group, state, status, now, **details), state.status)
        batch.evaluated.append(Evaluated(group, status, lags, why, risks))
        if stored is None or status is None or lags is None:
            batch.results[group] = report.next_at[group] = report.watches[group] = None
            return
        batch.results[group] = result_of(
            status, stored.last_commit_ms, rebalances, lags, now, intervals, overall, retention
        )
        line = self.sparklines.draw(group, stored, status.totallag, now, later=not batch.sparklines)
        if line is not None:
            batch.lines[group] = line
        report.next_at[group] = next_change_at(
            stored,
            status,
            now,
            intervals=intervals,
            rules=self.rules,
            expire_group_ms=self.store.config.expire_group_ms,
            time_lags=lags,
            thresholds_s=batch.thresholds,
            retention=retention,
            poll_interval_ms=self.poll_interval_ms,
        )
        report.watches[group] = watch(stored, intervals, lags)

    async def _record_and_publish(self, batch: _Batch, report: EvaluationReport) -> None:
        """Records the batch's transitions (compare-and-set), publishes their events and those left in the outbox,
        and checks the lag-seconds thresholds."""
        transitions = await self.statuses.transitions(self.cluster, batch.requests)
        found: list[Transition] = []
        for request, applied in zip(batch.requests, transitions, strict=True):
            if applied:
                report.transitions += 1
                batch.pending[request.group].append(request.event)
                if request.group in batch.found:
                    found.append(request)
                else:
                    log.info("%s/%s: -> %s", self.cluster, request.group, request.status.name)
        self._log_found(found)
        outbox = {group: events for group, events in batch.pending.items() if events}
        report.published, unsent = await publish_outboxes(
            self.publisher.publish, self.cluster, outbox, self.statuses.acknowledge_many, _within_limit
        )
        batch.unsent = set(unsent)
        await self.unsent.published(STATUS, unsent, outbox.keys() - unsent)
        if self.lag_alerts is not None:
            lag = await self.lag_alerts.evaluate(batch.evaluated, batch.now)
            report.lag_crossings, report.lag_events_published = lag.recorded, lag.published
            batch.unsent |= lag.unsent
            await self.unsent.published(LAG, lag.unsent, lag.sent)

    async def _drop_excluded(
        self, groups: Sequence[str], stored_groups: list[StoredGroup | None]
    ) -> list[StoredGroup | None]:
        """Groups the allow/deny regexes exclude are gone: their windows are deleted (the ingest no longer stores
        their commits), and they are evaluated as NOTFOUND."""
        accepts = self.group_filter.accepts
        excluded = [g for g, s in zip(groups, stored_groups, strict=True) if s is not None and not accepts(g)]
        if not excluded:
            return stored_groups
        await self.store.deletions.delete_groups(self.cluster, excluded)
        log.info("%s: %d groups excluded by the allow/deny regexes deleted", self.cluster, len(excluded))
        gone = set(excluded)
        return [None if g in gone else s for g, s in zip(groups, stored_groups, strict=True)]

    def _log_found(self, found: list[Transition]) -> None:
        """New groups' first statuses: a line each when a few are found, one line for a chunk of many (a cold start
        finds every group, and formatting a line per group would be a share of its work, not a help to a reader)."""
        if len(found) <= FOUND_LINES:
            for request in found:
                log.info("%s/%s: -> %s", self.cluster, request.group, request.status.name)
        else:
            counts = Counter(request.status.name for request in found)
            log.info("%s: %d groups found: %s", self.cluster, len(found), _counts(counts))

    def forget(self, groups: Sequence[str]) -> None:
        """These groups moved to another evaluator: drop what this one remembers of them."""
        self.sparklines.forget(groups)
        self.results.forget(self.cluster, groups)

    async def _rebalance_times(self, stored_groups: Sequence[StoredGroup | None], now: int) -> dict[str, list[int]]:
        """When each recent generation started, for the groups that had any in the last hour (the result's
        rebalance count decays with the clock, so it keeps the times)."""
        rebalanced = [s.group for s in stored_groups if s is not None and s.rebalances_last_hour]
        return await self.store.reads.rebalance_times(self.cluster, rebalanced, now)


class Sparklines:
    """Each group's lag sparkline (dashboard only), drawn when its windows changed. A cold start's are owed: drawn
    after every status is out (`draw_owed`), so the first statuses come sooner."""

    def __init__(self, store: WindowStore, results: ResultsStore, cluster: str) -> None:
        self.store, self.results, self.cluster = store, results, cluster
        self.owed: set[str] = set()

    def draw(self, group: str, stored: StoredGroup, totallag: int, now: int, *, later: bool) -> list | None:
        """The group's sparkline when its windows changed, to store (None: unchanged, or owed when `later`)."""
        seen = _windows_hash(stored)
        if self.results.sparkline_drawn(self.cluster, group, seen):  # the sparkline changes with the windows only
            return None
        if later:
            self.owed.add(group)
            return None
        self.owed.discard(group)
        return self._line(group, stored, seen, totallag, now)

    async def draw_owed(self, limit: int) -> int:
        """Draw and store the owed sparklines of up to `limit` groups; returns how many groups it looked at. Only
        the points before now are stored, so the lag now does not matter here."""
        groups = list(itertools.islice(self.owed, limit))
        self.owed.difference_update(groups)
        if not self.owed:
            self.owed.clear()  # gives back the table of its largest size (a cold start's every group), kept till then
        if not groups:
            return 0
        now = clock.now_ms()
        try:
            stored_groups = await self.store.reads.get_groups(self.cluster, groups, now)
        except RedisError:
            self.owed.update(groups)  # still owed: the schedule loop retries
            raise
        lines = {
            group: self._line(group, stored, seen, 0, now)
            for group, stored in zip(groups, stored_groups, strict=True)
            if stored is not None
            and not self.results.sparkline_drawn(self.cluster, group, seen := _windows_hash(stored))
        }
        await self.results.write(self.cluster, {}, lines)
        return len(groups)

    def forget(self, groups: Sequence[str]) -> None:
        """What is owed of these groups (`ResultsStore.forget` forgets what was drawn)."""
        self.owed.difference_update(groups)

    def _line(self, group: str, stored: StoredGroup, seen: int, totallag: int, now: int) -> list:
        self.results.drew(self.cluster, group, seen)
        return lag_sparkline(stored.partitions, totallag, now, self.store.config.intervals)[:-1]


def _windows_hash(stored: StoredGroup) -> int:
    return hash(tuple(p.packed for p in stored.partitions))


def _event_details(
    live: bool,
    lags: dict[TopicPartition, TimeLag | None] | None,
    speeds: dict[TopicPartition, Velocity],
    why: Explanation,
    risks: dict[TopicPartition, RetentionRisk] | None,
    group_figures: tuple[Velocity, RetentionRisk | None],
) -> EventDetails:
    """What a group's event adds to its status. A live group's own velocity and retention risk are the ones it was
    judged by (`group_figures`): the event takes them rather than going over its partitions again."""
    details: EventDetails = {"time_lags": lags, "velocities": speeds if live else None, "explanation": why}
    details["retention"] = risks
    if live:
        overall, retention = group_figures
        details["group_velocity"] = overall
        if retention is not None:
            details["group_retention"] = retention
    return details


def _request(
    cluster: str, group: str, state: GroupState, status: GroupStatus | None, now: int, **details: Any
) -> Transition | None:
    """The transition to record when the group's status changed (with its event), or None."""
    change = transition(cluster, group, state.status, state.seq, state.incident, status, now, **details)
    if change is None:
        return None
    return Transition(group, state.seq, change.status, change.incident, _publishable(change.event), now)


def _publishable(event: StatusEvent) -> bytes:
    """The event as published: under Kafka's record size (`status_event.fitted`), said in the log when cut."""
    raw, listed = fitted(event)
    if listed < len(event.partitions):
        log.warning(
            "%s/%s: event lists %d of its %d partitions not OK (Kafka's record size)",
            event.cluster,
            event.group,
            listed,
            len(event.partitions),
        )
    return raw


def _counts(by_status: Counter[str]) -> str:
    return ", ".join(f"{n} {status}" for status, n in sorted(by_status.items()))


def _within_limit(raw: bytes) -> bytes:
    """An outbox event as it can be sent: one stored too large (before events were fitted) is fitted now."""
    if len(raw) <= MAX_EVENT_BYTES:
        return raw
    try:
        return _publishable(StatusEvent.decode(raw))
    except EventDecodeError:
        return raw  # not a status event: sent as it is (Kafka decides)
