"""The repeat timer's look at what the subscriptions cover (scope.py's rules applied): incidents a subscription no
longer covers are closed, incidents going on that it newly covers are announced, a forgotten cluster's are closed.

A look covers only the subscriptions that changed (on the first tick: since the last completed look,
`keys.NOTIFY_SCOPE_LOOKED`), and those once more on the next tick: an event decided under the subscriptions before
the change may be recorded after the first look, which would then never see it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from lagwatch.services.notifier import scope
from lagwatch.services.notifier.decisions import Recorder, decide, readable_state, record, record_request
from lagwatch.services.notifier.event_batches import MAX_CONFLICTS
from lagwatch.services.notifier.events import AnyKind, parse_either
from lagwatch.services.notifier.outbox import CONFLICT, repeat_member
from lagwatch.services.notifier.subscriptions import Subscription
from lagwatch.shared.events.lag_threshold_event import LagThresholdEvent, Threshold
from lagwatch.shared.notifications.subscriptions.notification_policy import Decision, Event
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime import cluster_forgetting
from lagwatch.shared.runtime.config import SubscriptionConfig
from lagwatch.shared.runtime.redis_client import reply, text

log = logging.getLogger(__name__)


@dataclass(eq=False)
class ScopeWatch(Recorder):
    cluster: str
    forgotten: dict[str, int] = field(default_factory=dict)  # cluster -> when (ms): what events read late are judged by
    # the subscriptions' version last looked at (-1: none yet), each subscription as then, those changed then (to look
    # at once more)
    _checked: int | None = -1
    _looked: dict[str, SubscriptionConfig] | None = None
    _rescan: set[str] = field(default_factory=set)

    async def check(self, now: int) -> None:
        """Close and announce for the subscriptions that changed (see the module's docstring)."""
        version, subscriptions = self.registry.version, self.registry.all()
        if self._checked != version:
            looked = self._looked
            changed = await self._changed_since(looked, subscriptions)
            await self.close_out_of_scope(now, changed)
            await self.announce_going_on(now, changed)
            if looked is not None:
                await self._apply_new_intervals(now, looked, changed)
            self._rescan = {s.id for s in changed}
        elif self._rescan:
            again = [s for s in subscriptions if s.id in self._rescan]
            await self.close_out_of_scope(now, again)
            await self.announce_going_on(now, again)
            self._rescan = set()
            await self.outbox.record_scope_looked({s.id: scope.config_digest(s.config) for s in subscriptions})
        self._checked, self._looked = version, {s.id: s.config for s in subscriptions}

    async def _apply_new_intervals(
        self, now: int, looked: dict[str, SubscriptionConfig], changed: list[Subscription]
    ) -> None:
        """A subscription whose `send-interval` changed repeats its incidents going on at the new pace from now on
        (one due sooner keeps its time; at 0 the next due repeat stops them): else the new interval would wait for
        each incident's next event, or for a repeat scheduled at the old pace."""
        for subscription in changed:
            before = looked.get(subscription.id)
            interval_ms = int(subscription.config.send_interval * 1000)
            if before is None or before.send_interval == subscription.config.send_interval or interval_ms <= 0:
                continue
            due = {
                repeat_member(subscription.id, f): now + interval_ms
                async for f, _ in self.outbox.states(subscription.id)
            }
            if due:
                await self.redis.zadd(keys.NOTIFY_REPEATS, due, lt=True)  # LT adds those not scheduled at all

    async def _changed_since(
        self, looked: dict[str, SubscriptionConfig] | None, subscriptions: list[Subscription]
    ) -> list[Subscription]:
        """The subscriptions new or changed since `looked` (None: since the last completed look, kept in Redis),
        and those told of nothing: one deleted and made again the same meanwhile has lost what it was told (the api
        deletes it), so it must hear of what goes on."""
        told_nothing = await self.outbox.told_nothing([s.id for s in subscriptions])
        if looked is None:
            recorded = await self.outbox.scope_looked()
            return [
                s for s in subscriptions if recorded.get(s.id) != scope.config_digest(s.config) or s.id in told_nothing
            ]
        return [s for s in subscriptions if looked.get(s.id) != s.config or s.id in told_nothing]

    async def close_out_of_scope(self, now: int, subscriptions: list[Subscription] | None = None) -> int:
        """Close (or drop, if held) every kept incident whose subscription (of `subscriptions`, default all) no
        longer covers it; returns the closes enqueued."""
        enqueued = 0
        for subscription in self.registry.all() if subscriptions is None else subscriptions:
            async for state_field, raw in self.outbox.states(subscription.id):
                enqueued += await self.close_if_out_of_scope(subscription, state_field, raw, now)
        if enqueued:
            log.info("notifier: %d incidents closed: their subscriptions no longer cover them", enqueued)
            self.wake()
        return enqueued

    async def close_if_out_of_scope(self, subscription: Subscription, state_field: str, raw: str, now: int) -> int:
        """Close one kept incident if the subscription no longer covers it; 1 if a close is enqueued. A state
        that moved meanwhile (an event, a held open released) is read and looked at again."""
        for _ in range(MAX_CONFLICTS):
            state = readable_state(raw)
            if state is None or scope.covers(subscription, state, self.forgotten):
                return 0
            close = scope.scope_close(subscription, state, raw, self.forgotten)
            closing = Decision(close.kind, None, None)  # (the state forgotten)
            request = record_request(
                subscription,
                closing,
                close.event,
                state_field,
                raw,
                now,
                notification_id=close.notification_id,
                reason=close.reason,
            )
            outcome, sent = await record(self.outbox, subscription, request)
            if outcome != CONFLICT:
                return int(sent)
            raw = await self.outbox.read_state_field(subscription.id, state_field)
        return 0  # kept changing: left as the event path leaves it (a RedisError would only retry the whole look)

    async def close_forgotten(self, now: int) -> None:
        """Close the incidents of the clusters forgotten since a notifier last did, and drop their kept latest events;
        recorded once done, so that the next starts need not look again."""
        self.forgotten, closed = await cluster_forgetting.forgotten(self.redis)
        pending = {cluster: at for cluster, at in self.forgotten.items() if closed.get(cluster) != at}
        if not pending:
            return
        enqueued = await self.close_out_of_scope(now)
        async for active_field, raw in self.outbox.active():
            parsed = parse_either(raw)
            if parsed is not None and scope.is_forgotten(parsed[1], pending):
                await self.outbox.drop_field(raw, active_field)
        for cluster, at in pending.items():
            await cluster_forgetting.record_closed(self.redis, cluster, at)
        log.info("notifier: clusters forgotten (%s): their incidents closed (%d closes)", ", ".join(pending), enqueued)

    async def announce_going_on(self, now: int, subscriptions: list[Subscription] | None = None) -> int:
        """Tell each subscription (of `subscriptions`, default all) of the incidents going on that it covers but was
        never told about, as their latest event would have; returns the notifications enqueued."""
        subscriptions, enqueued = self.registry.all() if subscriptions is None else subscriptions, 0
        if not subscriptions:
            return 0
        async for active_field, raw in self.outbox.active():
            parsed = parse_either(raw)
            # this cluster's incidents only: its notifier keeps them current (a removed cluster's stay unannounced)
            if parsed is None or not parsed[0].going_on(parsed[1]) or parsed[1].cluster != self.cluster:
                continue
            kind, event = parsed
            covering = [s for s in subscriptions if s.matches(event.cluster, event.group)]
            if covering and await self._evaluator_agrees(event):
                enqueued += await self._announce(covering, event, kind, (active_field, raw), now)
        if enqueued:
            log.info("notifier: %d incidents going on announced to subscriptions new to them", enqueued)
            self.wake()
        return enqueued

    async def _evaluator_agrees(self, event: Event) -> bool:
        """Whether the evaluator's own record (keys.py) still shows the incident of the kept event: an entry left
        stale (an event this notifier missed, a late write of an older one by a replica losing its partition) must
        not be announced to subscriptions to come, where nothing would ever close it."""
        if isinstance(event, LagThresholdEvent):  # "<crossings so far>:<started at>": still this crossing
            key = Threshold(float(event.threshold_seconds), event.which).key
            crossings = await reply(self.redis.hget(keys.group_lag_thresholds(event.cluster, event.group), key))
            return crossings is not None and text(crossings).split(":")[0] == str(event.seq)
        status = await reply(self.redis.hget(keys.statuses_index(event.cluster), event.group))
        return status is not None and text(status) == event.status

    async def _announce(
        self, covering: list[Subscription], event: Event, kind: AnyKind, active: tuple[str, str], now: int
    ) -> int:
        """Record what the incident's latest event (`active`: where it is kept, as read) means for each covering
        subscription keeping no state of it; the notifications enqueued. Not once a later event was read (CONFLICT)."""
        state_field, enqueued = kind.state_field(event), 0
        states = await self.outbox.read_states([s.id for s in covering], state_field)
        until = self.silences.until_ms(event, now)
        for subscription in (s for s, state in zip(covering, states, strict=True) if not state):
            decision = decide(subscription, event, None, kind, now, until)
            if decision is None or (decision.kind is None and decision.state is None):
                continue
            announced = scope.announcement_id(event.event_id, subscription.id, self.registry.version)
            # expected no state: one told meanwhile (an event, another notifier) is a CONFLICT, and that stands
            request = record_request(subscription, decision, event, state_field, "", now, notification_id=announced)
            enqueued += (await record(self.outbox, subscription, request, active))[1]
        return enqueued
