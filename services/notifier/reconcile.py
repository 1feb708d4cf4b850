"""After skipped events (skipped_events.py): each subscription's incidents set right from the statuses the evaluator
stores (docs/status-topic.md#retention-and-a-notifier-that-falls-off-the-log), once this notifier has read the
partition up to its log end as it was when the skip was found. An incident over is closed (`missed.missed_close`),
one going on and untold is opened (`missed.found_open`), each decided as its event would have been; lag and
retention incidents are closed when the evaluator's crossing count says they are over (`lag_policy.closing_event`).
Groups whose status changed since, or whose events wait in the evaluator's outbox, are left to their events.
Several notifiers may reconcile at once: each state is replaced only as read, each notification's id is the same
wherever it is made, and the due reconciliation is taken out only if no later skip changed it."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from lagwatch.services.notifier import metrics
from lagwatch.services.notifier.decisions import Recorder, decide, parse_state, readable_state, record, record_request
from lagwatch.services.notifier.events import kind_for_field, parse_status_event
from lagwatch.services.notifier.lag_policy import closing_event
from lagwatch.services.notifier.missed import RECONCILED, StoredStatus, found_open, missed_close
from lagwatch.services.notifier.outbox import APPLIED, group_field, is_lag_field
from lagwatch.services.notifier.skipped_events import ReadPositions, partition_field
from lagwatch.services.notifier.subscriptions import Subscription
from lagwatch.shared.events.lag_threshold_event import Alert, LagThresholdEvent, Reason, Threshold
from lagwatch.shared.events.status_event import StatusEvent, record_key
from lagwatch.shared.notifications.subscriptions.notification_policy import Event, IncidentState
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.partitioner import partition_for
from lagwatch.shared.runtime.redis_client import reply, text

log = logging.getLogger(__name__)
# a reconciliation no notifier could start (the partition not read that far: an offset the log lacks) runs anyway
WAIT_LIMIT_MS = 30 * 60_000
BAD_STATUSES = (b"WARN", b"ERR")


@dataclass(frozen=True)
class DueReconciliation:
    """A partition's groups to reconcile once it is read up to `until` (keys.NOTIFY_RECONCILE)."""

    field: str
    raw: str  # as kept: taken out only if still so
    cluster: str
    topic: str
    partition: int
    until: int  # the partition's log end when the skip was found
    at: int  # when (ms): later changes of a group are events still to read
    partitions: int  # the topic's partition count then (0: unknown, every group is looked at)

    @classmethod
    def parse(cls, field: str, raw: str) -> DueReconciliation:
        cluster, _, rest = field.partition("/")
        topic, _, partition = rest.rpartition(":")
        until, at, partitions = (int(v) for v in raw.split())
        return cls(field, raw, cluster, topic, int(partition), until, at, partitions)

    def covers(self, group: str) -> bool:
        """Whether the group's events go to this partition."""
        return self.partitions <= 0 or partition_for(record_key(self.cluster, group), self.partitions) == self.partition


@dataclass(eq=False)
class Reconciler(Recorder):
    positions: ReadPositions
    cluster: str
    status_topic: str

    async def run_due(self, now: int) -> int:
        """Run the reconciliations of this notifier's cluster that are due; returns the incident states set right."""
        changed = 0
        for due in await self._pending():
            if due.cluster == self.cluster and self._ready(due, now):
                changed += await self.reconcile(due, now)
                await self.outbox.drop_field(due.raw, due.field, keys.NOTIFY_RECONCILE)
        if changed:
            self.wake()
        return changed

    async def _pending(self) -> list[DueReconciliation]:
        raw = await reply(self.redis.hgetall(keys.NOTIFY_RECONCILE))
        return [DueReconciliation.parse(text(f), text(v)) for f, v in raw.items()]

    def _ready(self, due: DueReconciliation, now: int) -> bool:
        return self.positions.reached(due.topic, due.partition) >= due.until or now - due.at >= WAIT_LIMIT_MS

    async def reconcile(self, due: DueReconciliation, now: int) -> int:
        """Set right the incident states of the partition's groups (see the module's docstring): their status
        incidents after a skip on the status topic, their lag and retention incidents after one on the other."""
        closed = opened = 0
        if due.topic == self.status_topic:
            for group in sorted(await self._groups(due)):
                stored = await self._stored_status(group, due)
                if stored is not None:
                    c, o = await self._reconcile_group(group, stored, now)
                    closed, opened = closed + c, opened + o
        else:
            for group, state_field, subscription, raw in await self._lag_states(due):
                closed += await self._close_lag_if_over(group, state_field, subscription, raw, now)
        where = partition_field(due.cluster, due.topic, due.partition)
        log.warning(
            "notifier: %s reconciled with the evaluator's statuses after skipped events: %d incident states "
            "closed, %d opened",
            where,
            closed,
            opened,
        )
        return closed + opened

    # --- which groups, and what the evaluator says of them -----------------------------------------------------

    async def _groups(self, due: DueReconciliation) -> set[str]:
        """The partition's groups with an incident state kept for some subscription, or WARN or ERR now."""
        prefix, groups = f"{self.cluster}/", set[str]()
        for subscription in self.registry.all():
            async for state_field, _ in self.outbox.states(subscription.id):
                if state_field.startswith(prefix):
                    groups.add(state_field.removeprefix(prefix))
        async for group, status in self.redis.hscan_iter(keys.statuses_index(self.cluster), count=1000):
            if status in BAD_STATUSES:
                groups.add(text(group))
        return {g for g in groups if due.covers(g)}

    async def _stored_status(self, group: str, due: DueReconciliation) -> StoredStatus | None:
        """The group's status as the evaluator stores it; None while events of it are still to be read (it changed
        after the skip was found, or its events wait in the evaluator's outbox)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.group_state(self.cluster, group))
            pipe.llen(keys.group_pending_events(self.cluster, group))
            state, pending = await pipe.execute()
        if pending:
            return None
        fields = {text(k): text(v) for k, v in state.items()}
        changed_at = int(fields["changed_at"]) if "changed_at" in fields else None
        if changed_at is not None and changed_at > due.at:
            return None
        started = fields.get("incident_started_at")
        return StoredStatus(
            fields.get("status", "NOTFOUND"),
            int(fields.get("seq", 0)),
            fields.get("incident_id") or None,
            int(started) if started else None,
            changed_at,
        )

    # --- status incidents ---------------------------------------------------------------------------------------

    async def _reconcile_group(self, group: str, stored: StoredStatus, now: int) -> tuple[int, int]:
        """(closed, opened) for one group's subscriptions."""
        state_field = group_field(self.cluster, group)
        await self._settle_active(state_field, group, stored, now)
        subscriptions = self.registry.matching(self.cluster, group)
        if not subscriptions:
            return 0, 0
        states = await self.outbox.read_states([s.id for s in subscriptions], state_field)
        closed = opened = 0
        for subscription, raw in zip(subscriptions, states, strict=True):
            state = readable_state(raw)
            if state is None and raw:
                continue  # unreadable: the event path skips it alike
            if state is not None and _over(state, stored):
                closed += await self._apply(subscription, state_field, raw, _close(state, stored, now), now, "close")
                raw = await self.outbox.read_state_field(subscription.id, state_field)
                state = readable_state(raw)
            if _untold(state, stored):
                event = found_open(self.cluster, group, stored, now)
                opened += await self._apply(subscription, state_field, raw, event, now, "open")
        return closed, opened

    async def _settle_active(self, state_field: str, group: str, stored: StoredStatus, now: int) -> None:
        """The incident going on kept for subscriptions to come (scope.py) is the stored one, or none."""
        kept_raw = await reply(self.redis.hget(keys.NOTIFY_ACTIVE, state_field))
        raw = text(kept_raw) if kept_raw else ""
        kept = parse_status_event(raw) if raw else None
        if kept is not None and not stored.quiet and kept.incident_id == stored.incident_id:
            return
        if kept is not None:
            await self.outbox.drop_field(raw, state_field)
        if not stored.quiet and stored.incident_id is not None:
            event = found_open(self.cluster, group, stored, now).encode().decode()  # as the event path
            await reply(self.redis.hsetnx(keys.NOTIFY_ACTIVE, state_field, event))

    # --- lag-threshold and retention incidents -----------------------------------------------------------------

    async def _lag_states(self, due: DueReconciliation) -> list[tuple[str, str, Subscription, str]]:
        """(group, state field, subscription, state) of the lag incidents kept for the partition's groups."""
        found = []
        for subscription in self.registry.all():
            async for state_field, raw in self.outbox.states(subscription.id):
                state = readable_state(raw) if is_lag_field(state_field) else None
                event = state.event if state is not None else None
                if isinstance(event, LagThresholdEvent) and event.cluster == self.cluster and due.covers(event.group):
                    found.append((event.group, state_field, subscription, raw))
        return found

    async def _close_lag_if_over(
        self, group: str, state_field: str, subscription: Subscription, raw: str, now: int
    ) -> int:
        """Close an announced lag incident whose crossing the evaluator no longer counts as the latest."""
        state = readable_state(raw)
        if state is None or state.incident_id is None or not isinstance(state.event, LagThresholdEvent):
            return 0
        announced = state.event
        threshold = Threshold(float(announced.threshold_seconds), announced.which).key
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(keys.group_lag_thresholds(self.cluster, group), threshold)
            pipe.llen(keys.group_pending_lag_events(self.cluster, group))
            crossings, pending = await pipe.execute()
        if pending or (crossings is not None and text(crossings).split(":")[0] == str(announced.seq)):
            return 0  # still over, or its events still to be read
        reason = Reason.LAG if announced.which == Alert.LAG_SECONDS else Reason.RETENTION
        close = closing_event(announced, state.incident_id, reason)
        return await self._apply(subscription, state_field, raw, close, now, "close")

    # --- recording ----------------------------------------------------------------------------------------------

    async def _apply(
        self, subscription: Subscription, state_field: str, raw: str, event: Event, now: int, action: str
    ) -> int:
        """Record what `event` means for the subscription, only if its state is still `raw`; 1 when it changed."""
        until = self.silences.until_ms(event, now)
        decision = decide(subscription, event, parse_state(raw), kind_for_field(state_field), now, until)
        if decision is None:
            return 0
        request = record_request(subscription, decision, event, state_field, raw, now, reason=RECONCILED)
        outcome, _ = await record(self.outbox, subscription, request)  # (the state moved meanwhile: that stands)
        if outcome != APPLIED:
            return 0
        metrics.RECONCILED.labels(action).inc()
        return 1


def _close(state: IncidentState, stored: StoredStatus, now: int) -> StatusEvent:
    """The close of the incident a state is about, which the stored status says is over (quiet as stored, else OK)."""
    incident = _incident_of(state)
    assert incident is not None
    status = stored.status if stored.quiet else "OK"
    at = stored.changed_at if stored.changed_at is not None else now
    return missed_close(state.event, incident, status=status, seq=stored.seq, evaluated_at=at)


def _incident_of(state: IncidentState | None) -> str | None:
    """The incident a state is about: the one announced, or the one whose open is held."""
    if state is None:
        return None
    return state.incident_id or (state.event.incident_id if state.held else None)


def _over(state: IncidentState | None, stored: StoredStatus) -> bool:
    """The state is about a status incident the stored status says is over."""
    incident = _incident_of(state)
    if incident is None or state is None or isinstance(state.event, LagThresholdEvent):
        return False
    return stored.quiet or stored.incident_id != incident


def _untold(state: IncidentState | None, stored: StoredStatus) -> bool:
    """The stored incident goes on and the subscription was told nothing (of it or of another one)."""
    return not stored.quiet and stored.incident_id is not None and _incident_of(state) is None
