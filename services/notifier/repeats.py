"""The repeat timer (`notifier.repeat-check-interval`): each tick looks at what changed (subscriptions and silences,
clusters forgotten, reconciliations due after skipped events: scope_watch.py, reconcile.py), then enqueues the
`send-interval` repeats of open incidents that are due, and releases what was held once its time has come (a
silence over, `hold-for` elapsed: holds.py), each state replaced only as read so that notifiers ticking together
record each once."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from redis.exceptions import RedisError

from lagwatch.services.notifier import holds, metrics, scope
from lagwatch.services.notifier.decisions import UNREADABLE, Recorder, notification, parse_state, record, record_request
from lagwatch.services.notifier.events import kind_for_field
from lagwatch.services.notifier.outbox import digest, now_ms, parse_repeat_member, repeat_notification_id
from lagwatch.services.notifier.reconcile import Reconciler
from lagwatch.services.notifier.scope_watch import ScopeWatch
from lagwatch.shared.notifications.subscriptions.notification_policy import Kind
from lagwatch.shared.protocol import keys

log = logging.getLogger(__name__)


@dataclass(eq=False)
class RepeatTimer(Recorder):
    scopes: ScopeWatch
    reconciler: Reconciler

    async def tick(self) -> None:
        """The Faust timer's: a failure is logged, and the next tick tries again."""
        try:
            await self.repeat_once()
        except (RedisError, OSError) as exc:
            log.warning("notifier: repeat check skipped (%s)", exc)
        except Exception:  # a bug must not crash the Faust app (that would stop every agent): try again next tick
            log.exception("notifier: repeat check failed")

    async def repeat_once(self, now: int | None = None) -> int:
        """Enqueue the repeats that are due (after the tick's other checks); returns how many."""
        now = now_ms() if now is None else now
        await self._checks(now)
        enqueued = 0
        for member, score in await self.outbox.due_repeats(now):
            enqueued += await self._repeat(member, score, now)
        if enqueued:
            self.wake()
        return enqueued

    async def _checks(self, now: int) -> None:
        """What the timer looks at before repeats: subscriptions and silences changed, clusters forgotten,
        reconciliations due after skipped events (reconcile.py), holds to recheck."""
        await self.registry.refresh()
        await self.silences.refresh()
        await self.scopes.check(now)
        await self.scopes.close_forgotten(now)
        try:
            await self.reconciler.run_due(now)
        except (RedisError, OSError):
            raise
        except Exception:  # a bug there must not hold every repeat back: the next tick tries again
            log.exception("notifier: reconciliation after skipped events failed")
        if self.silences.take_change():  # (an event may have reloaded them since the last tick)
            await self.recheck_held(now)

    async def _repeat(self, member: str, score: int, now: int) -> bool:
        """The repeat (or the release of what was held) due at `score` for one incident; True when enqueued."""
        subscription_id, state_field = parse_repeat_member(member)
        subscription = self.registry.get(subscription_id)
        raw = await self.outbox.read_state_field(subscription_id, state_field)
        try:
            state = parse_state(raw)
        except UNREADABLE:  # the event path skips it alike
            log.error("notifier: incident state %s of %s is unreadable; not repeated", state_field, subscription_id)
            await self.outbox.forget_repeat(member)  # else it is first due on every tick, before all others
            return False
        if subscription is None or state is None:  # nothing to repeat any more: the schedule forgets it
            await self.outbox.schedule_repeat(member, score, None, None, now)
            return False
        if not scope.covers(subscription, state, self.scopes.forgotten):
            # recorded by a notifier on other subscriptions (one with the old configuration file, in a rolling
            # deploy) after this one looked: closed now rather than repeated
            return bool(await self.scopes.close_if_out_of_scope(subscription, state_field, raw, now))
        until = self.silences.until_ms(state.event, now)
        decision = holds.due(subscription.policy, state, now, until, kind_for_field(state_field).repeat_due)
        if not state.held and decision.state is not state:
            metrics.HELD.labels(subscription.type, "silence").inc()  # a repeat, held until the silence ends
        event, notification_id = state.event, repeat_notification_id(state.event.event_id, subscription_id, score)
        if state.held or decision.state is not state:
            # held: released, or held longer; the state, delivery and next wake-up in one call, as for an event (a
            # state that moved meanwhile is left alone: the event's handling decided anew)
            if decision.kind in holds.OPENS or decision.kind == Kind.UPDATE:
                notification_id = event.event_id
            seen = digest("held", member, score)
            request = record_request(
                subscription, decision, event, state_field, raw, now, notification_id=notification_id, seen_id=seen
            )
            return (await record(self.outbox, subscription, request))[1]
        delivery = notification(subscription_id, decision.kind, event, notification_id, now)
        if await self.outbox.schedule_repeat(member, score, decision.repeat_at, delivery, now) and delivery:
            metrics.NOTIFICATIONS.labels(subscription.type, delivery.kind).inc()
            return True
        return False

    async def recheck_held(self, now: int) -> None:
        """Silences changed (one ended early, say): what they held is looked at again on this tick."""
        later = await self.redis.zrangebyscore(keys.NOTIFY_REPEATS, f"({now}", "+inf", withscores=True)
        for member, _ in later:
            subscription_id, state_field = parse_repeat_member(member)
            raw = await self.outbox.read_state_field(subscription_id, state_field)
            if raw and _is_held(raw):
                await self.redis.zadd(keys.NOTIFY_REPEATS, {member: now}, xx=True)


def _is_held(raw: bytes | str) -> bool:
    """Whether a stored incident state holds a notification back; an unreadable one does not (`repeat_once` drops
    it), and must not fail the whole recheck."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return False
    return isinstance(doc, dict) and bool(doc.get("held"))
