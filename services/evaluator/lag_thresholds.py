"""Alert thresholds: lagwatch's own rules beside Burrow's ("alert when the max lag is over 300 s, even if Burrow's
rules say OK"; "alert when retention deletes unread messages within an hour"), evaluated with the statuses and
published as lag-threshold events (shared/events/lag_threshold_event.py: one path, three alerts).

* Which thresholds: every `lag-seconds-threshold` and `retention-risk-threshold` of a subscription for this cluster,
  the configuration file's and the api's (`lw:n:{notify}:lag-thresholds`), re-read at most every `REFRESH_S`.
* A group is over a lag-seconds threshold when `max_lag_seconds > threshold` (`time_lag.worst`; a lower bound counts
  only when the bound itself is over), in a data-loss-risk alert when `retention_risk_seconds < threshold` (its
  soonest partition), in the messages-skipped alert on any skip; one whose lag or risk is unknown keeps its state.
  A crossing is recorded with a compare-and-set and its event in an outbox (`lag_state_store.py`), then published on
  `evaluator.lag-threshold-topic`, as status transitions are: a restart or a second evaluator never records or
  publishes one twice.
* A group comes back under when its lag does, when it is NOTFOUND, or when no subscription asks for that threshold any
  more: every incident that was opened is closed.
* Thresholds are not filtered by group: the notifier applies each subscription's group filter. Without any threshold,
  only the groups still over one are read (the index).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from prometheus_client import Counter
from redis.asyncio import Redis

from lagwatch.services.evaluator.lag_state_store import GroupLagState, LagStateStore, ThresholdState
from lagwatch.services.evaluator.publisher import EventPublisher, publish_outboxes
from lagwatch.shared.events.lag_threshold_event import Alert, Crossing, Reason, Threshold, at_risk, build_event
from lagwatch.shared.notifications.subscriptions.lag_threshold_index import (
    parse_index_entry,
    thresholds_for,
    thresholds_of,
)
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import GroupStatus
from lagwatch.shared.runtime.config import SubscriptionConfig
from lagwatch.shared.statuses.explanation import Explanation
from lagwatch.shared.statuses.retention import RetentionRisk, group_risk
from lagwatch.shared.statuses.time_lag import TimeLag, exceeds, worst

log = logging.getLogger(__name__)
CROSSINGS = Counter(
    "lagwatch_lag_threshold_crossings_total",
    "Alert threshold crossings recorded (lag-seconds, data-loss-risk, messages-skipped)",
    ["cluster", "direction", "alert"],
)
REFRESH_S = 1.0
NEVER_CROSSED = ThresholdState()


def crossings(
    states: Mapping[Threshold, ThresholdState],
    thresholds: frozenset[Threshold],
    lag: TimeLag | None,
    *,
    gone: bool,
    risk: RetentionRisk | None = None,
) -> list[Crossing]:
    """The thresholds a group crosses at this evaluation, by alert, lowest first: the ones it comes back under first,
    so a subscription whose threshold changed hears the end of its old incident before the new one opens. `lag` and
    `risk`: None when unknown (nothing changes); `gone`: the group is NOTFOUND."""
    out = []
    for threshold in sorted(thresholds | {t for t, s in states.items() if s.above}, key=_order):
        above = states.get(threshold, NEVER_CROSSED).above
        if gone or threshold not in thresholds:
            if above:
                reason = Reason.GROUP_GONE if gone else Reason.THRESHOLD_REMOVED
                out.append(Crossing(threshold.seconds, False, reason, threshold.alert))
            continue
        if threshold.alert == Alert.LAG_SECONDS:
            over, reason = exceeds(lag, threshold.seconds), Reason.LAG
        else:
            over, reason = at_risk(risk, threshold), Reason.RETENTION
        if over is not None and over != above:
            out.append(Crossing(threshold.seconds, over, reason, threshold.alert))
    return sorted(out, key=lambda c: c.above)  # (stable)


def _order(threshold: Threshold) -> tuple[int, float]:
    return list(Alert).index(threshold.alert), threshold.seconds


class ThresholdSource:
    """The thresholds in force for one cluster, and the groups still over one (both re-read every `refresh_s`)."""

    def __init__(
        self, redis: Redis, cluster: str, from_file: Sequence[SubscriptionConfig], refresh_s: float = REFRESH_S
    ) -> None:
        self.redis, self.cluster = redis, cluster
        self.from_file = [(thresholds_of(s), s.clusters) for s in from_file]
        self.refresh_s = refresh_s
        self._read_at = float("-inf")
        self._current: tuple[frozenset[Threshold], frozenset[str]] = (frozenset(), frozenset())

    async def current(self) -> tuple[frozenset[Threshold], frozenset[str]]:
        """(thresholds, groups over some threshold or with events pending)."""
        if time.monotonic() - self._read_at >= self.refresh_s:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hgetall(keys.LAG_THRESHOLDS)
                pipe.smembers(keys.lag_active_groups(self.cluster))
                index, active = await pipe.execute()
            from_api = []
            for sub_id, raw in index.items():
                entry = parse_index_entry(raw)
                if entry is None:
                    log.warning("evaluator %s: bad lag-threshold entry for subscription %r", self.cluster, sub_id)
                else:
                    from_api.append(entry)
            thresholds = thresholds_for(self.cluster, [*self.from_file, *from_api])
            self._current = (thresholds, frozenset(g.decode() for g in active))
            self._read_at = time.monotonic()
        return self._current


@dataclass(frozen=True, slots=True)
class Evaluated:
    """One group as the evaluator just saw it: its status (None = NOTFOUND), lag in seconds and retention risk per
    partition."""

    group: str
    status: GroupStatus | None
    time_lags: Mapping[tuple[str, int], TimeLag | None] | None
    explanation: Explanation | None = None  # why (shared/statuses/explanation.py), carried by its events
    retention: Mapping[tuple[str, int], RetentionRisk] | None = None  # None: unknown (the group is not live)


class LagReport(NamedTuple):
    recorded: int  # crossings recorded
    published: int  # events Kafka acknowledged
    unsent: frozenset[str]  # groups with events left in their outbox: to be evaluated again soon
    sent: frozenset[str] = frozenset()  # groups whose outbox Kafka took whole


class LagThresholdAlerts:
    def __init__(
        self, cluster: str, store: LagStateStore, source: ThresholdSource, publisher: EventPublisher, topic: str
    ) -> None:
        self.cluster, self.store, self.source, self.publisher, self.topic = cluster, store, source, publisher, topic

    async def evaluate(self, evaluated: Sequence[Evaluated], now_ms: int) -> LagReport:
        """Record and publish the crossings of these groups."""
        thresholds, active = await self.source.current()
        looked_at = [e for e in evaluated if thresholds or e.group in active]
        if not looked_at:
            return LagReport(0, 0, frozenset())
        states = await self.store.states(self.cluster, [e.group for e in looked_at])
        outbox: dict[str, list[bytes]] = {}
        recorded = 0
        for item, state in zip(looked_at, states, strict=True):
            events = list(state.pending)  # left by an evaluator that stopped before publishing
            lag = worst((item.time_lags or {}).values())
            risk = group_risk(item.retention.values()) if item.retention is not None else None
            for crossing in crossings(state.thresholds, thresholds, lag, gone=item.status is None, risk=risk):
                event = await self._record(item, state, crossing, now_ms)
                if event is not None:
                    events.append(event)
                    recorded += 1
            if events:
                outbox[item.group] = events
        publish = functools.partial(self.publisher.publish, topic=self.topic)
        published, unsent = await publish_outboxes(publish, self.cluster, outbox, self.store.acknowledge)
        await self._update_index(looked_at, states, active, outbox, unsent)
        return LagReport(recorded, published, unsent, frozenset(outbox) - unsent)

    async def _record(self, item: Evaluated, state: GroupLagState, crossing: Crossing, now_ms: int) -> bytes | None:
        before = state.thresholds.get(crossing.threshold, NEVER_CROSSED)
        seq = before.seq + 1
        started_at = now_ms if crossing.above else (before.started_at or now_ms)
        event = build_event(
            cluster=self.cluster,
            group=item.group,
            crossing=crossing,
            seq=seq,
            incident_started_at=started_at,
            evaluated_at=now_ms,
            group_status=item.status,
            time_lags=item.time_lags or {},
            explanation=item.explanation,
            retention=item.retention,
        ).encode()
        applied = await self.store.record(
            self.cluster,
            item.group,
            threshold_key=crossing.threshold.key,
            expected_seq=before.seq,
            started_at=started_at,
            event=event,
        )
        if not applied:
            return None  # another evaluator recorded it: it publishes it
        state.thresholds[crossing.threshold] = ThresholdState(seq, started_at)
        CROSSINGS.labels(self.cluster, "over" if crossing.above else "under", crossing.alert.value).inc()
        log.info(
            "%s/%s: %s %s (%s)",
            self.cluster,
            item.group,
            crossing.threshold.key,
            "in alert" if crossing.above else "over",
            crossing.reason.value,
        )
        return event

    async def _update_index(
        self,
        looked_at: Sequence[Evaluated],
        states: Sequence[GroupLagState],
        was_active: frozenset[str],
        outbox: Mapping[str, list[bytes]],
        unsent: frozenset[str],
    ) -> None:
        active, inactive = [], []
        for item, state in zip(looked_at, states, strict=True):
            if state.above_any or item.group in unsent:
                active.append(item.group)
            elif item.group in was_active or item.group in outbox:
                inactive.append(item.group)
        await self.store.mark(self.cluster, active=active, inactive=inactive)
