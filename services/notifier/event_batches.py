"""Status and lag-threshold events recorded a batch at a time: decided as one event at a time is, with a few Redis
round trips per batch rather than several per event.

A batch is cut into rounds in which a group appears once at most, so each event is decided from what the one before
it left. A round reads in one round trip the subscriptions' and silences' versions and each event's incident states
(keeping the event as its incident's latest: `keys.NOTIFY_ACTIVE`, scope.py), reloading what changed through the
api; it decides in memory and makes the records (one compare-and-set each: `Outbox.record`) in one more round trip.
What needs more than one look goes one step at a time: a state moved by another notifier (CONFLICT) is read and
decided anew; the close of an incident the event supersedes (missed.py, lag_policy.py) is recorded first.

An event that cannot be handled is skipped, counted `failed`. Redis away (RedisError, OSError) stops the batch: the
caller retries it (what was recorded is then a duplicate, known by the `seen` keys) and acknowledges it only once
it is all recorded.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from lagwatch.services.notifier import metrics, scope
from lagwatch.services.notifier.decisions import Recorder, counted, decide, parse_state, record, record_request
from lagwatch.services.notifier.events import AnyKind
from lagwatch.services.notifier.missed import older_than_kept
from lagwatch.services.notifier.outbox import (
    CONFLICT,
    DUPLICATE,
    RecordRequest,
    StateLookup,
    now_ms,
)
from lagwatch.services.notifier.subscriptions import Subscription
from lagwatch.shared.notifications.subscriptions.notification_policy import Event, IncidentState

log = logging.getLogger(__name__)
MOST = 1000  # events in a batch: a round reads some thousand states and records as many at most
LINGER_S = 0.005  # in a burst, a batch waits this long for more events (read_ahead.py); an event alone does not
MAX_CONFLICTS = 20  # an incident state that keeps moving under a record is an outage of sorts: retried later


@dataclass(slots=True)
class Handled:
    """One event of a batch, and what came of it: the outcome of each record (APPLIED, DUPLICATE), or failed."""

    event: Event
    outcomes: list[int] = field(default_factory=list)
    done: bool = False
    failed: bool = False

    @property
    def settled(self) -> bool:
        return self.done or self.failed

    @property
    def duplicate(self) -> bool:
        """Every record it made had been made before (a redelivered event)."""
        return bool(self.outcomes) and all(o == DUPLICATE for o in self.outcomes)


@dataclass(slots=True)
class Look:
    """An event as its round reads it: its incident's state field, its latest event as kept, and the subscriptions
    covering its group with the state each keeps."""

    handled: Handled
    state_field: str
    active: tuple[str, str | None]
    subscriptions: list[Subscription] = field(default_factory=list)
    states: list[str] = field(default_factory=list)
    silenced_until: int | None = None


@dataclass(slots=True)
class Plan:
    """What a round decided in memory for an event: the records to make, each with its subscription (decided anew
    on a conflict) and, once made, its reply; from `rest` on, its subscriptions go one step at a time."""

    look: Look
    records: list[tuple[Subscription, RecordRequest]] = field(default_factory=list)
    replies: list[int] = field(default_factory=list)
    rest: int | None = None  # None: none left (all decided, or the event failed)


class EventBatch:
    """Events of one kind read together, in rounds where a group appears once at most (in the order read)."""

    def __init__(self, events: list[Event], kind: AnyKind) -> None:
        self.kind = kind
        self.handled = [Handled(event) for event in events]
        self.rounds: list[list[Handled]] = []
        times_seen: dict[tuple[str, str], int] = {}
        for handled in self.handled:
            group = (handled.event.cluster, handled.event.group)
            times = times_seen[group] = times_seen.get(group, 0) + 1
            if times > len(self.rounds):
                self.rounds.append([])
            self.rounds[times - 1].append(handled)

    def describe(self) -> str:
        first = self.handled[0].event.event_id
        return f"event {first}" if len(self.handled) == 1 else f"{len(self.handled)} events from {first}"

    def count(self) -> int:
        """Count each event's outcome (metrics); returns the events handled (not failed)."""
        outcomes = Counter("failed" if h.failed else "duplicate" if h.duplicate else "handled" for h in self.handled)
        for outcome, n in outcomes.items():
            metrics.EVENTS.labels(outcome).inc(n)
        return len(self.handled) - outcomes["failed"]


class EventRecorder(Recorder):
    """Records batches of events (see the module's docstring) for the agents of one notifier."""

    async def record(self, batch: EventBatch, forgotten: Mapping[str, int]) -> None:
        """Record the events of the batch not recorded yet; `forgotten`: cluster -> when it was forgotten (scope.py).
        Raises RedisError or OSError (Redis away): call again to go on."""
        for round_ in batch.rounds:
            events = [handled for handled in round_ if not handled.settled]
            if not events:
                continue
            try:
                await self._record_round(events, batch.kind, forgotten)
            except (RedisError, OSError):
                raise
            except Exception:  # a bug outside any one event's handling: skipped, as each would have been alone
                log.exception("notifier: %d events could not be handled; skipped", len(events))
                for handled in events:
                    handled.failed = not handled.done

    async def _record_round(self, events: list[Handled], kind: AnyKind, forgotten: Mapping[str, int]) -> None:
        looks = [look for handled in events if (look := self._look(handled, kind, forgotten)) is not None]
        if not looks:
            return
        await self._read(looks)
        plans = [self._plan(look, kind) for look in looks]
        enqueued = await self._record_planned(plans)
        for plan in plans:
            enqueued |= await self._finish(plan, kind)
        if enqueued:
            self.wake()

    async def _record_planned(self, plans: list[Plan]) -> bool:
        """Make the records the round decided, in one round trip; True when a delivery was enqueued."""
        replies = iter(await self.outbox.record_all([request for plan in plans for _, request in plan.records]))
        enqueued = False
        for plan in plans:
            plan.replies = [next(replies) for _ in plan.records]
            for (subscription, request), reply in zip(plan.records, plan.replies, strict=True):
                enqueued |= counted(subscription, request, reply)
        return enqueued

    def _look(self, handled: Handled, kind: AnyKind, forgotten: Mapping[str, int]) -> Look | None:
        """The event's look, or None when there is nothing to read: it is settled already."""
        handled.outcomes = []  # (a round read again after an outage decides anew)
        event = handled.event
        if scope.is_forgotten(event, forgotten):  # read late: its cluster's incidents are closed, not reopened
            handled.done = True
            return None
        try:
            state_field = kind.state_field(event)
            # the latest event of each incident going on is kept for subscriptions to come (announce_going_on)
            active = (kind.active_field(event), event.encode().decode() if kind.going_on(event) else None)
            for name in (state_field, active[0], event.event_id):
                name.encode()  # a name Redis cannot be sent (a lone surrogate) fails its own event, not the round
        except Exception:
            _skip(handled)
            return None
        return Look(handled, state_field, active)

    async def _read(self, looks: list[Look]) -> None:
        """Each look's subscriptions and their states, in one round trip (two when the subscriptions changed)."""
        if self.registry.version is None:
            await self.registry.refresh()
        self._match(looks)
        read = await self.outbox.read_many([self._lookup(look, look.active) for look in looks])
        if read.silences_version != self.silences.version:
            await self.silences.refresh()
        if read.subscriptions_version != self.registry.version:  # changed through the api: reload, read again
            await self.registry.refresh(version=read.subscriptions_version)
            self._match(looks)
            read = await self.outbox.read_many([self._lookup(look, None) for look in looks])
        now = now_ms()
        for look, states in zip(looks, read.states, strict=True):
            look.states = states
            look.silenced_until = self.silences.until_ms(look.handled.event, now) if look.subscriptions else None

    def _match(self, looks: list[Look]) -> None:
        for look in looks:
            look.subscriptions = self.registry.matching(look.handled.event.cluster, look.handled.event.group)

    @staticmethod
    def _lookup(look: Look, active: tuple[str, str | None] | None) -> StateLookup:
        return StateLookup([s.id for s in look.subscriptions], look.state_field, active)

    def _plan(self, look: Look, kind: AnyKind) -> Plan:
        """Decide in memory for each subscription, up to the first whose incident the event supersedes (that one
        and the next go one step at a time). An event that fails is skipped; what was decided before it is still
        recorded, as one at a time it would have been."""
        plan, event = Plan(look), look.handled.event
        try:
            for i, (subscription, raw) in enumerate(zip(look.subscriptions, look.states, strict=True)):
                state = parse_state(raw)
                if kind.superseded(subscription.policy, event, state) is not None:
                    plan.rest = i
                    break
                request = self._request(subscription, event, raw, state, kind, look)
                if isinstance(request, RecordRequest):
                    plan.records.append((subscription, request))
                elif request is not None:
                    look.handled.outcomes.append(request)
        except Exception:
            _skip(look.handled)
            plan.rest = None
        return plan

    def _request(
        self,
        subscription: Subscription,
        event: Event,
        current: str,
        state: IncidentState | None,
        kind: AnyKind,
        look: Look,
        reason: str | None = None,
    ) -> RecordRequest | int | None:
        """The record of what the event means for the subscription, decided from its state as read (`current`,
        parsed: `state`); DUPLICATE for an event older than the state's (missed.py: read after a reconciliation
        went past it); None when the event does not concern the subscription (nothing recorded)."""
        if older_than_kept(event, state):
            return DUPLICATE
        now = now_ms()
        decision = decide(subscription, event, state, kind, now, look.silenced_until)
        if decision is None:
            return None
        return record_request(subscription, decision, event, look.state_field, current, now, reason=reason)

    async def _finish(self, plan: Plan, kind: AnyKind) -> bool:
        """Take the replies of the event's records (deciding anew where a state had moved), then go through the
        subscriptions left one step at a time; True when a delivery was enqueued."""
        handled, enqueued = plan.look.handled, False
        try:
            for (subscription, request), reply in zip(plan.records, plan.replies, strict=True):
                outcome: int | None = reply
                if reply == CONFLICT:
                    current = await self.outbox.read_state_field(subscription.id, request.state_field)
                    event = handled.event
                    outcome, sent = await self._record_one(subscription, event, current, kind, plan.look, tries=1)
                    enqueued |= sent
                if outcome is not None:
                    handled.outcomes.append(outcome)
            if plan.rest is not None and not handled.failed:
                enqueued |= await self._one_at_a_time(plan, plan.rest, kind)
        except (RedisError, OSError):
            raise
        except Exception:
            _skip(handled)
        handled.done = not handled.failed
        return enqueued

    async def _one_at_a_time(self, plan: Plan, start: int, kind: AnyKind) -> bool:
        """The event's subscriptions from `start` on, each recorded before the next is decided: first the close of
        the incident the event supersedes (once: its own event id), then the event, decided from what that left."""
        look, event, enqueued = plan.look, plan.look.handled.event, False
        for subscription, current in zip(look.subscriptions[start:], look.states[start:], strict=True):
            superseded = kind.superseded(subscription.policy, event, parse_state(current))
            if superseded is not None:
                reason = kind.superseded_reason
                _, sent = await self._record_one(subscription, superseded, current, kind, look, reason=reason)
                enqueued |= sent
                current = await self.outbox.read_state_field(subscription.id, look.state_field)
            outcome, sent = await self._record_one(subscription, event, current, kind, look)
            if outcome is not None:
                look.handled.outcomes.append(outcome)
            enqueued |= sent
        return enqueued

    async def _record_one(
        self,
        subscription: Subscription,
        event: Event,
        current: str,
        kind: AnyKind,
        look: Look,
        *,
        reason: str | None = None,
        tries: int = 0,
    ) -> tuple[int | None, bool]:
        """Decide from the state read and record it (one Lua call); on a conflict, read the state again
        (MAX_CONFLICTS tries in all, `tries` made already). (outcome, whether a delivery was enqueued); the outcome
        is None when the event does not concern the subscription."""
        for _ in range(tries, MAX_CONFLICTS):
            request = self._request(subscription, event, current, parse_state(current), kind, look, reason)
            if not isinstance(request, RecordRequest):
                return request, False
            outcome, sent = await record(self.outbox, subscription, request)
            if outcome != CONFLICT:
                return outcome, sent
            current = await self.outbox.read_state_field(subscription.id, look.state_field)
        raise RedisError(f"incident state of {event.cluster}/{event.group} kept changing")  # retried


def _skip(handled: Handled) -> None:
    """An event that cannot be handled: skipped rather than block the topic (called where the exception is caught)."""
    log.exception("notifier: event %s could not be handled; skipped", handled.event.event_id)
    handled.failed = True
