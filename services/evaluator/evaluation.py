"""Evaluating groups and turning status changes into published events.

For each group: read its windows (the store) and its last recorded state (the status store), compute its status
with the shared rules, and when it differs, record the transition with a compare-and-set (with its event, in the
outbox), publish the event, then take it out of the outbox. Groups gone from the store, or with no commit for
`expire-group`, are NOTFOUND (and an expired group is deleted). The same evaluation checks the groups' lag in
seconds against the subscriptions' lag-seconds thresholds (lag_thresholds.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from lagwatch.services.evaluator.lag_thresholds import Evaluated, LagThresholdAlerts
from lagwatch.services.evaluator.publisher import EventPublisher
from lagwatch.shared.protocol import GroupStatus, RuleConfig, Status
from lagwatch.shared.status_event import build_event, encode, next_incident
from lagwatch.shared.store.redis_store import StoredGroup, WindowStore
from lagwatch.shared.store.status_store import GroupState, StatusStore

log = logging.getLogger(__name__)


@dataclass(slots=True)
class EvaluationReport:
    groups: int = 0
    transitions: int = 0
    lost_races: int = 0  # transitions another evaluator recorded first
    published: int = 0
    lag_crossings: int = 0  # lag-seconds thresholds crossed (lag_thresholds.py)
    lag_events_published: int = 0
    seconds: float = 0.0


class GroupEvaluator:
    def __init__(
        self,
        cluster: str,
        store: WindowStore,
        statuses: StatusStore,
        publisher: EventPublisher,
        rules: RuleConfig,
        lag_alerts: LagThresholdAlerts | None = None,
    ) -> None:
        self.cluster = cluster
        self.store = store
        self.statuses = statuses
        self.publisher = publisher
        self.rules = rules
        self.lag_alerts = lag_alerts

    def status_of(self, stored: StoredGroup | None, now_ms: int) -> GroupStatus | None:
        """The group's status now, or None when it is NOTFOUND."""
        if stored is None or stored.last_commit_ms < now_ms - self.store.config.expire_group_ms:
            return None
        return stored.status(self.store.config.intervals, now_ms, self.rules)

    async def evaluate(self, groups: Sequence[str], now_ms: int | None = None) -> EvaluationReport:
        started = time.perf_counter()
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        report = EvaluationReport(groups=len(groups))
        stored_groups = await self.store.get_groups(self.cluster, groups, now)
        states = await self.statuses.states(self.cluster, groups)
        outbox: list[tuple[str, list[bytes]]] = []
        evaluated: list[Evaluated] = []
        for group, stored, state in zip(groups, stored_groups, states, strict=True):
            status = self.status_of(stored, now)
            if stored is not None and status is None:  # expired: forget its windows too
                await self.store.delete_group(self.cluster, group)
            events = list(state.pending)  # left by an evaluator that stopped before publishing
            lags = stored.time_lags(now) if stored is not None and status is not None else None
            event = await self._transition(group, state, status, now, report, lags)
            if event is not None:
                events.append(event)
            if events:
                outbox.append((group, events))
            evaluated.append(Evaluated(group, status, lags))
        if outbox:
            report.published = await self._publish(outbox)
        if self.lag_alerts is not None:
            report.lag_crossings, report.lag_events_published = await self.lag_alerts.evaluate(evaluated, now)
        report.seconds = time.perf_counter() - started
        return report

    async def _transition(
        self,
        group: str,
        state: GroupState,
        status: GroupStatus | None,
        now: int,
        report: EvaluationReport,
        time_lags: dict | None = None,
    ) -> bytes | None:
        new = status.status if status else Status.NOTFOUND
        if new == state.status:
            return None
        seq = state.seq + 1
        carried, keeps = next_incident(state.status, new, state.incident, self.cluster, group, seq, now)
        event = encode(
            build_event(
                cluster=self.cluster,
                group=group,
                seq=seq,
                previous=state.status,
                group_status=status,
                incident=carried,
                evaluated_at=now,
                time_lags=time_lags,
            )
        )
        applied = await self.statuses.transition(
            self.cluster, group, expected_seq=state.seq, status=new, keeps=keeps, event=event, now_ms=now
        )
        if not applied:
            report.lost_races += 1
            return None
        report.transitions += 1
        log.info("%s/%s: %s -> %s", self.cluster, group, state.status.name, new.name)
        return event

    async def _publish(self, outbox: list[tuple[str, list[bytes]]]) -> int:
        """Publish every event (in order per group) and clear what Kafka acknowledged. A failure leaves the events
        in the outbox for the next evaluation of their group."""
        acknowledged = await self.publisher.publish(
            [(self.cluster, group, event) for group, events in outbox for event in events]
        )
        done = 0
        for group, events in outbox:
            acked = [e for e in events if e in acknowledged]
            if acked:
                await self.statuses.acknowledge(self.cluster, group, acked)
                done += len(acked)
        return done
