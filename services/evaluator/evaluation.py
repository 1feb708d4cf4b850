"""Evaluating groups and turning status changes into published events.

For each group: read its windows (the store) and its last recorded state (the status store), compute its status
with the shared rules, and when it differs, record the transition with a compare-and-set (with its event, in the
outbox), publish the event, then take it out of the outbox. Groups gone from the store, or with no commit for
`expire-group`, are NOTFOUND (and an expired group is deleted). So are groups the allow/deny regexes exclude (the
lists changed since their windows were stored): their windows are deleted, and their NOTFOUND takes them off the
schedule, the status index and the ready results, closing an open incident instead of letting it drift to STOP.
The same evaluation checks the groups' lag in seconds against the subscriptions' lag-seconds thresholds
(lag_thresholds.py), stores each group's ready result (results_store.py: what /metrics and the dashboard read; the
sparklines of a cold start's evaluations are drawn after the statuses) and computes the next instant time alone
could change the group (next_change.py), which the service keeps in its schedule. An event Kafka did not take
stays in the outbox and its group is scheduled again soon; an event over Kafka's record size lists only the
worst partitions that fit (`status_event.fitted`).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from lagwatch.services.evaluator.lag_thresholds import Evaluated, LagThresholdAlerts
from lagwatch.services.evaluator.next_change import PartitionWatch, next_change_at, watch
from lagwatch.services.evaluator.publisher import EventPublisher
from lagwatch.services.evaluator.unsent_events import LAG, STATUS, UnsentEvents
from lagwatch.shared.events.lag_threshold_event import Threshold
from lagwatch.shared.events.status_event import MAX_EVENT_BYTES, EventDecodeError, StatusEvent, fitted, transition
from lagwatch.shared.events.status_store import GroupState, StatusStore, Transition
from lagwatch.shared.protocol.group_filter import GroupFilter
from lagwatch.shared.protocol.types import GroupStatus, RuleConfig
from lagwatch.shared.runtime import clock
from lagwatch.shared.statuses import verdicts
from lagwatch.shared.statuses.explanation import Explanation, explain
from lagwatch.shared.statuses.lag_sparkline import lag_sparkline
from lagwatch.shared.statuses.results_store import GroupResult, ResultsStore, result_of
from lagwatch.shared.statuses.retention import group_risk
from lagwatch.shared.statuses.velocity import group_velocity
from lagwatch.shared.windows.read_through_store import ReadThroughStore
from lagwatch.shared.windows.store import StoredGroup, WindowStore
from lagwatch.shared.windows.window import expired

log = logging.getLogger(__name__)
HELD_RETRY_MS = 500  # while the judging clock is held, a group due by the wall clock is looked at again this often
OUTBOX_RETRY_MS = 5000  # a group whose events Kafka did not take is evaluated (and its outbox sent) again this soon


@dataclass(slots=True)
class EvaluationReport:
    groups: int = 0
    transitions: int = 0
    lost_races: int = 0  # transitions another evaluator recorded first
    published: int = 0
    lag_crossings: int = 0  # lag-seconds thresholds crossed (lag_thresholds.py)
    lag_events_published: int = 0
    seconds: float = 0.0
    held_ms: int = 0  # how far the judging clock was behind the wall clock (shared/windows/read_through.py)
    # per group: the next instant time alone may change it (None: NOTFOUND, nothing to wait for)
    next_at: dict[str, int | None] = field(default_factory=dict)
    # per group: its partitions as evaluated, for the log-end notices (None: NOTFOUND)
    watches: dict[str, dict[tuple[str, int], PartitionWatch] | None] = field(default_factory=dict)


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
    gone: bool = False  # some group is NOTFOUND: expired, deleted, or its keys expired in Redis


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
        self.cluster = cluster
        self.poll_interval_ms = poll_interval_ms  # the cluster's offset-refresh (next_change.exception_lapse_at)
        self.group_filter = group_filter or GroupFilter()
        self.store = store
        self.statuses = statuses
        self.publisher = publisher
        self.rules = rules
        self.lag_alerts = lag_alerts
        self.results = results or ResultsStore(store.redis)
        self.read_through = ReadThroughStore(store.redis, cluster)
        self._windows_seen: dict[str, int] = {}  # group -> hash of its windows when its sparkline was last stored
        self.sparklines_owed: set[str] = set()  # evaluated without drawing their sparklines (`evaluate`)
        self.unsent = UnsentEvents(store.redis, cluster)  # how long its events have waited for Kafka (a gauge)

    def status_of(self, stored: StoredGroup | None, now_ms: int) -> GroupStatus | None:
        """The group's status now, or None when it is NOTFOUND."""
        if stored is None or expired(stored.last_commit_ms, now_ms, self.store.config):
            return None
        return verdicts.stored_group_status(stored, self.store.config.intervals, now_ms, self.rules)

    async def read(self, groups: Sequence[str], now_ms: int) -> tuple[list[StoredGroup | None], list[GroupState]]:
        """What an evaluation of these groups reads: their windows and their recorded states."""
        stored_groups = await self.store.get_groups(self.cluster, groups, now_ms)
        return stored_groups, await self.statuses.states(self.cluster, groups)

    async def evaluate(
        self,
        groups: Sequence[str],
        now_ms: int | None = None,
        *,
        sparklines: bool = True,
        read: Awaitable[tuple[list[StoredGroup | None], list[GroupState]]] | None = None,
    ) -> EvaluationReport:
        """Evaluate these groups now. `sparklines=False` leaves drawing their sparklines for later
        (`draw_owed_sparklines`): a cold start's first statuses come sooner without a fifth of the work. `read`:
        this evaluation's `read`, started ahead (while the previous batch was evaluated); a transition recorded
        since is caught by the compare-and-set, a commit since by its own notice."""
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
            await self.store.unindex_expired(self.cluster, now)
        await self._record_and_publish(batch, report)
        await self.results.write(self.cluster, batch.results, batch.lines)
        # the clock is held (shared/windows/read_through.py): what is due by the wall clock is looked at again
        if now < wall:
            _retry_held(report.next_at, wall)
        _retry_unsent(report.next_at, batch.unsent, wall + OUTBOX_RETRY_MS)
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
            await self.store.delete_group(self.cluster, group)
        batch.pending[group] = list(state.pending)  # left by an evaluator that stopped before publishing
        live = stored if status is not None else None  # the stored group, unless it is NOTFOUND
        lags = verdicts.time_lags(live, now) if live is not None else None
        speeds = verdicts.velocities(live, intervals, now) if live is not None else {}
        overall = group_velocity(speeds.values())
        risks = verdicts.retention_risks(live, now) if live is not None else None
        known = stored is not None and stored.generation is not None
        why = explain(
            status,
            speeds,
            overall,
            batch.rebalances.get(group, ()),
            now,
            membership_known=known,
            retention=group_risk(risks.values()) if risks else None,
        )
        request = self._transition(group, state, status, now, lags, speeds if live is not None else None, why, risks)
        if request is not None:
            batch.requests.append(request)
        batch.evaluated.append(Evaluated(group, status, lags, why, risks))
        if stored is None or status is None or lags is None:
            batch.results[group] = report.next_at[group] = report.watches[group] = None
            return
        retention = group_risk(risks.values()) if risks else None
        batch.results[group] = result_of(
            status, stored.last_commit_ms, batch.rebalances.get(group, ()), lags, now, intervals, overall, retention
        )
        self._draw_sparkline(batch, group, stored, status)
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

    def _draw_sparkline(self, batch: _Batch, group: str, stored: StoredGroup, status: GroupStatus) -> None:
        """The group's sparkline, when its windows changed (now, or owed when `batch.sparklines` is False)."""
        seen = hash(tuple(p.packed for p in stored.partitions))
        if self._windows_seen.get(group) == seen:  # the sparkline changes with the windows only
            return
        if batch.sparklines:
            self._windows_seen[group] = seen
            line = lag_sparkline(stored.partitions, status.totallag, batch.now, self.store.config.intervals)
            batch.lines[group] = line[:-1]
            self.sparklines_owed.discard(group)
        else:
            self.sparklines_owed.add(group)

    async def _record_and_publish(self, batch: _Batch, report: EvaluationReport) -> None:
        """Records the batch's transitions (compare-and-set), publishes their events and those left in the outbox,
        and checks the lag-seconds thresholds."""
        transitions = await self.statuses.transitions(self.cluster, batch.requests)
        for request, applied in zip(batch.requests, transitions, strict=True):
            if applied:
                report.transitions += 1
                batch.pending[request.group].append(request.event)
                log.info("%s/%s: -> %s", self.cluster, request.group, request.status.name)
            else:
                report.lost_races += 1
        outbox = [(group, events) for group, events in batch.pending.items() if events]
        if outbox:
            done = await self._publish(outbox)
            report.published = sum(len(acked) for acked in done.values())
            batch.unsent = {group for group, events in outbox if len(done.get(group, ())) < len(events)}
            await self.unsent.published(
                STATUS, batch.unsent, (group for group, _ in outbox if group not in batch.unsent)
            )
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
        await self.store.delete_groups(self.cluster, excluded)
        log.info("%s: %d groups excluded by the allow/deny regexes deleted", self.cluster, len(excluded))
        gone = set(excluded)
        return [None if g in gone else s for g, s in zip(groups, stored_groups, strict=True)]

    async def draw_owed_sparklines(self, limit: int) -> int:
        """Draw and store the sparklines of up to `limit` groups evaluated with `sparklines=False`; returns how
        many groups it looked at. Only the points before now are stored, so the lag now does not matter here."""
        groups = list(itertools.islice(self.sparklines_owed, limit))
        self.sparklines_owed.difference_update(groups)
        if not groups:
            return 0
        now = clock.now_ms()
        intervals = self.store.config.intervals
        lines = {}
        try:
            stored_groups = await self.store.get_groups(self.cluster, groups, now)
        except RedisError:
            self.sparklines_owed.update(groups)  # still owed: the schedule loop retries
            raise
        for group, stored in zip(groups, stored_groups, strict=True):
            if stored is None:
                continue
            seen = hash(tuple(p.packed for p in stored.partitions))
            if self._windows_seen.get(group) != seen:
                self._windows_seen[group] = seen
                lines[group] = lag_sparkline(stored.partitions, 0, now, intervals)[:-1]
        await self.results.write(self.cluster, {}, lines)
        return len(groups)

    def forget(self, groups: Sequence[str]) -> None:
        """These groups moved to another evaluator: drop what this one remembers of them."""
        for group in groups:
            self._windows_seen.pop(group, None)
        self.sparklines_owed.difference_update(groups)
        self.results.forget(self.cluster, groups)

    async def _rebalance_times(self, stored_groups: Sequence[StoredGroup | None], now: int) -> dict[str, list[int]]:
        """When each recent generation started, for the groups that had any in the last hour (the result's
        rebalance count decays with the clock, so it keeps the times)."""
        rebalanced = [s.group for s in stored_groups if s is not None and s.rebalances_last_hour]
        return await self.store.rebalance_times(self.cluster, rebalanced, now)

    def _transition(
        self,
        group: str,
        state: GroupState,
        status: GroupStatus | None,
        now: int,
        time_lags: dict | None = None,
        velocities: dict | None = None,
        explanation: Explanation | None = None,
        retention: dict | None = None,
    ) -> Transition | None:
        """The transition to record when the group's status changed (with its event), or None."""
        change = transition(
            self.cluster,
            group,
            state.status,
            state.seq,
            state.incident,
            status,
            now,
            time_lags=time_lags,
            velocities=velocities,
            explanation=explanation,
            retention=retention,
        )
        if change is None:
            return None
        return Transition(group, state.seq, change.status, change.incident, _publishable(change.event), now)

    async def _publish(self, outbox: list[tuple[str, list[bytes]]]) -> dict[str, list[bytes]]:
        """Publish every event (in order per group) and clear what Kafka acknowledged (returned, per group). A
        failure leaves the events in the outbox for the next evaluation of their group."""
        sendable = {event: _within_limit(event) for _, events in outbox for event in events}  # sent -> stored
        acknowledged = await self.publisher.publish(
            [(self.cluster, group, sendable[event]) for group, events in outbox for event in events]
        )
        done = {group: [e for e in events if sendable[e] in acknowledged] for group, events in outbox}
        done = {group: acked for group, acked in done.items() if acked}
        if done:
            await self.statuses.acknowledge_many(self.cluster, done)
        return done


def _retry_held(next_at: dict[str, int | None], wall: int) -> None:
    """Instants already past by the wall clock (not yet by the held judging clock) move a little into the future:
    due again at once, they would be evaluated in a tight loop until the clock resumes."""
    for group, at in next_at.items():
        if at is not None and at <= wall:
            next_at[group] = wall + HELD_RETRY_MS


def _retry_unsent(next_at: dict[str, int | None], groups: set[str], at: int) -> None:
    """Groups whose events Kafka did not take are due again by `at`: nothing else may evaluate them soon (the sweep
    is minutes away, and never lists a group that is NOTFOUND), and their events wait in the outbox till then."""
    for group in groups:
        due = next_at.get(group)
        next_at[group] = at if due is None else min(due, at)


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


def _within_limit(raw: bytes) -> bytes:
    """An outbox event as it can be sent: one stored too large (before events were fitted) is fitted now."""
    if len(raw) <= MAX_EVENT_BYTES:
        return raw
    try:
        return _publishable(StatusEvent.decode(raw))
    except EventDecodeError:
        return raw  # not a status event: sent as it is (Kafka decides)
