"""`lagwatch run notifier`: a Faust app that turns status-change events into notifications (Slack, webhooks and the
destination types of channels/).

* The agents consume the status topic (`evaluator.status-topic`) and the lag-threshold topic
  (`evaluator.lag-threshold-topic`) in the consumer group `lagwatch-notifier`, a batch of events at a time
  (event_batches.py: a group's events in order, each decided from what the one before it recorded). For each event
  and each matching subscription they decide (policy.py: Burrow's rules; lag_policy.py: lag-seconds thresholds)
  and record it — incident state, the delivery in the outbox, the repeat schedule — in one Lua call, idempotently
  per (event id, subscription). Only once the whole batch is recorded are its events acknowledged (manual acks: an
  event whose handling did not finish, e.g. because Redis is down or the process stops, is not committed and is
  read again). Silences (the api's, read from Redis: shared/notifications/subscriptions/silences.py) and `hold-for` hold
  notifications back (holds.py).
* A Faust timer (`notifier.repeat-check-interval`) enqueues `send-interval` repeats of open incidents and
  releases what was held once its time has come (a silence over, `hold-for` elapsed).
* Delivery workers (delivery.py) in the same process send what the outbox holds: survives crashes, retries with
  backoff, per-destination isolation, dead letters on `notifier.dlq-topic`.
* Events retention deleted before they were read are never skipped in silence: the consumer's position is not reset
  by Kafka's `auto.offset.reset` but by skipped_events.py, which counts them; the timer then reconciles the
  incidents with the evaluator's statuses (reconcile.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time

from redis.exceptions import RedisError

from lagwatch.services.notifier import event_batches, holds, metrics, read_ahead, scope, skipped_events
from lagwatch.services.notifier.decisions import decide, notification, parse_state, state_json
from lagwatch.services.notifier.delivery import Dispatcher, Sender
from lagwatch.services.notifier.dlq import DeadLetters
from lagwatch.services.notifier.event_batches import MAX_CONFLICTS
from lagwatch.services.notifier.events import LAG_EVENTS, STATUS_EVENTS, AnyKind, kind_for_field, parse_either
from lagwatch.services.notifier.outbox import (
    APPLIED,
    CONFLICT,
    Outbox,
    now_ms,
    parse_repeat_member,
    repeat_member,
    repeat_notification_id,
)
from lagwatch.services.notifier.reconcile import Reconciler
from lagwatch.services.notifier.sample_queue import serve_samples
from lagwatch.services.notifier.subscriptions import Registry, Subscription
from lagwatch.shared.events.lag_threshold_event import LagThresholdEvent, Threshold
from lagwatch.shared.notifications.subscriptions.notification_policy import Decision, Event, IncidentState, Kind
from lagwatch.shared.notifications.subscriptions.silences import SilenceCache, SilenceStore
from lagwatch.shared.notifications.subscriptions.store import SubscriptionStore
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime import cluster_forgetting
from lagwatch.shared.runtime.config import Config, ConfigError, SubscriptionConfig
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
from lagwatch.shared.runtime.redis_client import connect, reply, text
from lagwatch.shared.runtime.redis_memory import takes_writes, warn_if_evicting
from lagwatch.shared.runtime.service_lifecycle import Backoff, run_until_signalled, until_stopped_or_dead

log = logging.getLogger(__name__)
CONSUMER_GROUP = "lagwatch-notifier"


def check_settings(config: Config) -> None:
    n = config.notifier
    if n.backoff_cap < n.backoff_base:
        raise ConfigError("notifier.backoff-cap", f"must be >= notifier.backoff-base ({n.backoff_base})")
    if n.lease <= n.request_timeout:
        raise ConfigError("notifier.lease", f"must be longer than notifier.request-timeout ({n.request_timeout})")


class NotifierService:
    def __init__(self, config: Config, cluster: str, *, http_port: int | None = None) -> None:
        check_settings(config)
        self.config = config
        self.cluster = cluster
        settings = config.notifier
        cluster_config = config.cluster(cluster)
        self.redis = connect(config.redis)
        self.presence = Presence(self.redis, cluster, "notifier")  # the api counts them
        self.store = SubscriptionStore(self.redis)
        self.registry = Registry(config, self.store)  # validates the file's subscriptions: ConfigError
        self.silences = SilenceCache(SilenceStore(self.redis))  # the api's silences (holds.py)
        lease_ms, seen_ttl_ms = int(settings.lease * 1000), int(settings.dedupe_ttl * 1000)
        self.outbox = Outbox(self.redis, lease_ms=lease_ms, seen_ttl_ms=seen_ttl_ms)
        self.dead_letters = DeadLetters(client_kwargs(cluster_config, cluster), settings.dlq_topic)
        self.sender = Sender(timeout_s=settings.request_timeout, allow_private=settings.allow_private_targets)
        self.dispatcher = Dispatcher(self.outbox, self.registry, self.sender, self.dead_letters, settings)
        self._kafka_probe = KafkaProbe(config.clusters)  # assignment outlives a broker outage: ask the brokers
        self.health = HealthServer(
            "notifier",
            {"redis": self._redis_ok, "kafka": self._kafka_ok},
            host=settings.http_host,
            port=settings.http_port if http_port is None else http_port,
            liveness={"app": self._app_alive, "dispatcher": self._dispatcher_alive},
        )
        self._dispatcher: asyncio.Task | None = None
        # `_check_scope`: the subscriptions' version last looked at (-1: none yet), each subscription as then, those
        # changed then (to look at once more); `_close_forgotten`: each cluster forgotten -> when (ms)
        self._scope_checked: int | None = -1
        self._scoped: dict[str, SubscriptionConfig] | None = None
        self._rescan, self._forgotten = set[str](), dict[str, int]()
        # one for all events: they fail together while Redis is away (and none is made per event)
        self._record_outage = OutageLog(log, "notifier: cannot record events")
        self.stopping = asyncio.Event()
        self.events_handled = 0
        # skipped events (retention deleted them unread): counted, and the incidents reconciled (skipped_events.py)
        self.read_positions = skipped_events.ReadPositions()
        status_topic, wake = config.evaluator.status_topic, self.dispatcher.wake.set
        self.reconciler = Reconciler(
            self.redis, self.outbox, self.registry, self.silences, self.read_positions, cluster, status_topic, wake
        )
        self.recorder = event_batches.EventRecorder(self.outbox, self.registry, self.silences, wake)
        self._create_app(config, cluster)

    def _create_app(self, config: Config, cluster: str) -> None:
        """The Faust app: the status and lag-threshold agents and the repeats timer."""
        settings = config.notifier
        self.app = faust_app(
            CONSUMER_GROUP,
            config.cluster(cluster),
            cluster,
            "notifier",
            config.ingest.session_timeout,
            scheme=skipped_events.SCHEME,
            consumer_auto_offset_reset="none",  # the skip watch decides where to read (skipped_events.py)
            # positions are committed every second; Faust's fetch loop waits for a commit made every N acks, which
            # at 100 it did several times a batch (a crash re-reads at most that much: duplicates, recognised)
            broker_commit_every=10_000,
            broker_max_poll_records=1000,
            broker_commit_interval=1.0,
        )
        skip_watch = skipped_events.SkipWatch(
            self.redis, cluster, self.read_positions, start_latest=settings.start_latest
        )
        skipped_events.watch(self.app, skip_watch)
        self.membership = GroupMembership(self.app)
        self.status_topic = raw_topic(self.app, config.evaluator.status_topic)
        self.app.agent(self.status_topic, name="lagwatch.notifier.on_status")(self._on_status)
        self.lag_topic = raw_topic(self.app, config.evaluator.lag_threshold_topic)
        self.app.agent(self.lag_topic, name="lagwatch.notifier.on_lag_threshold")(self._on_lag_threshold)
        for topic in (config.evaluator.status_topic, config.evaluator.lag_threshold_topic):
            metrics.EVENTS_SKIPPED.labels(cluster, topic)  # 0 from the start: an alert sees the first skip
        self.app.timer(settings.repeat_check_interval, name="lagwatch.notifier.repeats")(self._repeat_tick)

    async def _redis_ok(self) -> bool:
        return await takes_writes(self.redis)

    async def _kafka_ok(self) -> bool:
        """Joined its group (partitions assigned, or none: a standby), and the brokers answer now (an assignment
        stays while they are down)."""
        return self.membership.joined and await self._kafka_probe.reachable(self.cluster)

    def _app_alive(self) -> bool:
        """False once the Faust app crashed: its agents and timer stopped, so no event would be handled again."""
        return not self.app.crashed

    def _dispatcher_alive(self) -> bool:
        return self._dispatcher is None or not self._dispatcher.done() or self.stopping.is_set()

    def _dead_work(self) -> str | None:
        """What died for good, if anything: /healthz says so at once, and the service then exits for a restart."""
        if not self._app_alive():
            return f"Faust app crashed: {self.app.crash_reason!r}"
        return None if self._dispatcher_alive() else "delivery loop died"

    # --- status-change events -----------------------------------------------------------------------------------

    async def _on_status(self, stream) -> None:
        await self._consume(stream, STATUS_EVENTS)

    async def _on_lag_threshold(self, stream) -> None:
        await self._consume(stream, LAG_EVENTS)

    async def _consume(self, stream, kind: AnyKind) -> None:
        # a batch at a time (event_batches.py): whatever has arrived, so an event alone is not kept waiting
        batches = read_ahead.batches(stream.noack().events(), event_batches.MOST, event_batches.LINGER_S)
        async with contextlib.aclosing(batches):
            async for events in batches:
                if not await self.handle_batch([event.value for event in events], kind):
                    return  # stopping: the events stay unacknowledged, so they are read again after a restart
                for event in events:
                    await stream.ack(event)
                    self.read_positions.read(event.message.topic, event.message.partition, event.message.offset)

    async def handle(self, raw: bytes | None, kind: AnyKind = STATUS_EVENTS) -> bool:
        """Record what one event means for every matching subscription (`handle_batch`)."""
        return await self.handle_batch([raw], kind)

    async def handle_batch(self, raws: list[bytes | None], kind: AnyKind = STATUS_EVENTS) -> bool:
        """Record what each event means for every matching subscription (event_batches.py); retried while Redis is
        away until it is all done (True: acknowledge them all) or the service stops (False: none)."""
        events = []
        for raw in raws:
            event = kind.parse(raw)
            if event is None:
                log.warning("notifier: skipped a record that is not a %s event", kind.name)
                metrics.EVENTS.labels("malformed").inc()
            else:
                events.append(event)
        if not events:
            return True
        batch, backoff, outage = event_batches.EventBatch(events, kind), Backoff(), self._record_outage
        while not self.stopping.is_set():
            try:
                await self.recorder.record(batch, self._forgotten)
                outage.ok()
            except (RedisError, OSError) as exc:
                outage.failed(f"{batch.describe()}: {exc}", f"retrying in {backoff.delay:.1f}s")
                await backoff.pause(self.stopping)
                continue
            self.events_handled += batch.count()
            return True
        return False

    # --- send-interval repeats ----------------------------------------------------------------------------------

    async def _repeat_tick(self) -> None:
        try:
            await self.repeat_once()
        except (RedisError, OSError) as exc:
            log.warning("notifier: repeat check skipped (%s)", exc)
        except Exception:  # a bug must not crash the Faust app (that would stop every agent): try again next tick
            log.exception("notifier: repeat check failed")

    async def repeat_once(self, now: int | None = None) -> int:
        """Enqueue the repeats that are due (after the tick's other checks); returns how many."""
        now = now_ms() if now is None else now
        await self._tick_checks(now)
        enqueued = 0
        for member, score in await self.outbox.due_repeats(now):
            subscription_id, state_field = parse_repeat_member(member)
            subscription = self.registry.get(subscription_id)
            raw = await self.outbox.read_state_field(subscription_id, state_field)
            try:
                state = parse_state(raw)
            except (ValueError, KeyError, TypeError):  # unreadable: the event path skips it alike
                log.error("notifier: incident state %s of %s is unreadable; not repeated", state_field, subscription_id)
                await self.outbox.forget_repeat(member)  # else it is first due on every tick, before all others
                continue
            if (
                subscription is not None
                and state is not None
                and not scope.covers(subscription, state, self._forgotten)
            ):
                # recorded by a notifier on other subscriptions (one with the old configuration file, in a rolling
                # deploy) after this one looked: closed now rather than repeated
                enqueued += await self._close_if_out_of_scope(subscription, state_field, raw, now)
                continue
            repeat_due = kind_for_field(state_field).repeat_due
            decision = Decision(None, None, None)
            if subscription is not None:
                until = self.silences.until_ms(state.event, now) if state is not None else None
                decision = holds.due(subscription.policy, state, now, until, repeat_due)
            if subscription is not None and state is not None and not state.held and decision.state is not state:
                metrics.HELD.labels(subscription.type, "silence").inc()  # a repeat, held until the silence ends
            if subscription is not None and state is not None and (state.held or decision.state is not state):
                if await self._record_held(subscription, member, score, state_field, raw, state, decision, now):
                    enqueued += 1
                continue
            delivery = None
            if state is not None:
                notification_id = repeat_notification_id(state.event.event_id, subscription_id, score)
                delivery = notification(subscription_id, decision.kind, state.event, notification_id, now)
            if await self.outbox.schedule_repeat(member, score, decision.repeat_at, delivery, now) and delivery:
                enqueued += 1
                metrics.NOTIFICATIONS.labels(subscription.type if subscription else "unknown", delivery.kind).inc()
        if enqueued:
            self.dispatcher.wake.set()
        return enqueued

    async def _tick_checks(self, now: int) -> None:
        """What the timer looks at before repeats: subscriptions and silences changed, clusters forgotten,
        reconciliations due after skipped events (reconcile.py), holds to recheck."""
        await self.registry.refresh()
        await self.silences.refresh()
        await self._check_scope(now)
        await self._close_forgotten(now)
        try:
            await self.reconciler.run_due(now)
        except (RedisError, OSError):
            raise
        except Exception:  # a bug there must not hold every repeat back: the next tick tries again
            log.exception("notifier: reconciliation after skipped events failed")
        if self.silences.take_change():  # (an event may have reloaded them since the last tick)
            await self._recheck_held(now)

    async def _record_held(
        self,
        subscription: Subscription,
        member: str,
        score: int,
        state_field: str,
        raw: str,
        state: IncidentState,
        decision: Decision,
        now: int,
    ) -> bool:
        """Write what the timer decided for a held notification (released, or held longer) — the state, the
        delivery and the next wake-up in one call, as for an event; True when a delivery was enqueued. A state
        that moved meanwhile (an event) is left alone: the event's handling decided anew."""
        event = state.event
        held_open = decision.kind in holds.OPENS or decision.kind == Kind.UPDATE
        repeat_id = repeat_notification_id(event.event_id, subscription.id, score)
        notification_id = event.event_id if held_open else repeat_id
        delivery = notification(subscription.id, decision.kind, event, notification_id, now)
        seen = hashlib.sha256(f"held\x00{member}\x00{score}".encode()).hexdigest()[:32]
        outcome = await self.outbox.record(
            subscription_id=subscription.id,
            event_id=seen,
            state_field=state_field,
            expected_state=raw,
            new_state=state_json(decision),
            delivery=delivery,
            repeat_at=decision.repeat_at,
        )
        if outcome == APPLIED and delivery is not None:
            metrics.NOTIFICATIONS.labels(subscription.type, delivery.kind).inc()
            return True
        return False

    async def _recheck_held(self, now: int) -> None:
        """Silences changed (one ended early, say): what they held is looked at again on this tick."""
        later = await self.redis.zrangebyscore(keys.NOTIFY_REPEATS, f"({now}", "+inf", withscores=True)
        for member, _ in later:
            subscription_id, state_field = parse_repeat_member(member)
            raw = await self.outbox.read_state_field(subscription_id, state_field)
            if raw and _is_held(raw):
                await self.redis.zadd(keys.NOTIFY_REPEATS, {member: now}, xx=True)

    # --- incidents a subscription no longer covers (scope.py) ---------------------------------------------------

    async def _check_scope(self, now: int) -> None:
        """Close and announce (scope.py) for the subscriptions that changed (on the first tick: since the last look
        any notifier completed, `keys.NOTIFY_SCOPE_LOOKED`, as the file's may have changed across a restart); those
        once more on the next tick: an event decided under the subscriptions before the change (read just before it,
        by another notifier say) may be recorded after the first look, which would then never see it. That second
        look completes it: then it is recorded. Only the changed ones: at 10k incidents going on and 100
        subscriptions, looking at all of them took 15-25 s per change, and every notifier start did."""
        version, subscriptions = self.registry.version, self.registry.all()
        if self._scope_checked != version:
            looked = self._scoped
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
        self._scope_checked, self._scoped = version, {s.id: s.config for s in subscriptions}

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
        longer covers its group or its alert; returns the closes enqueued. Several notifiers may do this at once:
        each state is replaced only as read, and a close is recorded once (its id is the same wherever it is made)."""
        enqueued = 0
        for subscription in self.registry.all() if subscriptions is None else subscriptions:
            async for state_field, raw in self.outbox.states(subscription.id):
                enqueued += await self._close_if_out_of_scope(subscription, state_field, raw, now)
        if enqueued:
            log.info("notifier: %d incidents closed: their subscriptions no longer cover them", enqueued)
            self.dispatcher.wake.set()
        return enqueued

    async def _close_if_out_of_scope(self, subscription: Subscription, state_field: str, raw: str, now: int) -> int:
        """Close one kept incident if the subscription no longer covers it; 1 if a close is enqueued. A state
        that moved meanwhile (an event, a held open released) is read and looked at again."""
        for _ in range(MAX_CONFLICTS):
            try:
                state = parse_state(raw)
            except (ValueError, KeyError, TypeError):  # unreadable: the event path skips it alike
                return 0
            if state is None or scope.covers(subscription, state, self._forgotten):
                return 0
            close = scope.scope_close(subscription, state, raw, self._forgotten)
            delivery = notification(subscription.id, close.kind, close.event, close.notification_id, now, close.reason)
            outcome = await self.outbox.record(
                subscription_id=subscription.id,
                event_id=close.notification_id,
                state_field=state_field,
                expected_state=raw,
                new_state="",
                delivery=delivery,
                repeat_at=None,
            )
            if outcome != CONFLICT:
                if outcome == APPLIED and delivery is not None:
                    metrics.NOTIFICATIONS.labels(subscription.type, delivery.kind).inc()
                    return 1
                return 0
            raw = await self.outbox.read_state_field(subscription.id, state_field)
        return 0  # kept changing: left as the event path leaves it (a RedisError would only retry the whole look)

    async def _close_forgotten(self, now: int) -> None:
        """Close the incidents of the clusters forgotten since a notifier last did (scope.py), for every subscription,
        and drop their kept latest events; recorded once done, so that the next starts need not look again. Repeats
        due meanwhile close rather than repeat (`covers`)."""
        self._forgotten, closed = await cluster_forgetting.forgotten(self.redis)
        pending = {cluster: at for cluster, at in self._forgotten.items() if closed.get(cluster) != at}
        if not pending:
            return
        enqueued = await self.close_out_of_scope(now)
        async for active_field, raw in self.outbox.active():
            parsed = parse_either(raw)
            if parsed is not None and scope.is_forgotten(parsed[1], pending):
                await self.outbox.drop_active(active_field, raw)
        for cluster, at in pending.items():
            await cluster_forgetting.record_closed(self.redis, cluster, at)
        log.info("notifier: clusters forgotten (%s): their incidents closed (%d closes)", ", ".join(pending), enqueued)

    async def announce_going_on(self, now: int, subscriptions: list[Subscription] | None = None) -> int:
        """Tell each subscription (of `subscriptions`, default all) of the incidents going on that it covers but was
        never told about (it was created or widened since they began: no event would tell it until their next
        change), as their latest event would have; returns the notifications enqueued. Once per subscriptions'
        version and incident."""
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
            if not covering or not await self._evaluator_agrees(event):
                continue
            state_field = kind.state_field(event)
            _, states = await self.outbox.read_states([s.id for s in covering], state_field)
            silenced_until = self.silences.until_ms(event, now)
            for subscription, state in zip(covering, states, strict=True):
                if not state:  # (one kept, even held, is an incident the subscription was told or is holding)
                    active = (active_field, raw)
                    enqueued += await self._announce(
                        subscription, event, kind, active, state_field, now, silenced_until
                    )
        if enqueued:
            log.info("notifier: %d incidents going on announced to subscriptions new to them", enqueued)
            self.dispatcher.wake.set()
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
        self,
        subscription: Subscription,
        event: Event,
        kind: AnyKind,
        active: tuple[str, str],
        state_field: str,
        now: int,
        until: int | None,
    ) -> int:
        """Record what the incident's latest event (`active`: where it is kept, as read) means for a subscription
        told nothing of it; 1 if it sends. Not once a later event of it was read (CONFLICT): that one decides."""
        decision = decide(subscription, event, None, kind, now, until)
        if decision is None or (decision.kind is None and decision.state is None):
            return 0
        notification_id = scope.announcement_id(event.event_id, subscription.id, self.registry.version)
        delivery = notification(subscription.id, decision.kind, event, notification_id, now)
        outcome = await self.outbox.record(
            subscription_id=subscription.id,
            event_id=notification_id,
            state_field=state_field,
            expected_state="",  # told meanwhile (an event, another notifier): CONFLICT, and that stands
            new_state=state_json(decision),
            delivery=delivery,
            repeat_at=decision.repeat_at,
            active=active,
        )
        if outcome != APPLIED or delivery is None:
            return 0
        metrics.NOTIFICATIONS.labels(subscription.type, delivery.kind).inc()
        return 1

    # --- life cycle ---------------------------------------------------------------------------------------------

    async def run(self) -> None:
        samples: asyncio.Task[None] | None = None
        self.presence.start(self.stopping)
        try:
            await self.health.start()
            log.info(
                "notifier: health and metrics on %s; %d subscriptions from the configuration file",
                self.health.url,
                len(self.registry.from_file),
            )
            await warn_if_evicting(self.redis, "notifier")
            await self.sender.start()
            # deliveries left by an earlier run go out from Redis even while Kafka is down (the wait below) or
            # has not assigned partitions yet; a dead letter due before its producer has started waits in the outbox
            self._dispatcher = asyncio.create_task(self.dispatcher.run(self.stopping))
            samples = asyncio.create_task(
                serve_samples(self.redis, self.registry, self.config, self.sender, self.stopping)
            )
            await self._start_dead_letters()  # also waits for Kafka: Faust's start fails while it is down
            await start_unless_stopping(self.app, self.stopping)
            await until_stopped_or_dead(self.stopping, self._dead_work, "notifier")
        finally:
            self.stopping.set()
            await stop_within(self.app, "notifier")
            if self._dispatcher is not None:
                await self._dispatcher
            if samples is not None:  # a stop does not wait for a test's receiver (its api caller hears 504)
                samples.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await samples
            await self.dead_letters.stop()
            await self.sender.stop()
            await self.health.stop()
            await self.presence.stop()
            await self.redis.aclose()

    async def _start_dead_letters(self) -> None:
        backoff, outage = Backoff(0.2), OutageLog(log, "notifier: cannot reach Kafka")
        while not self.stopping.is_set():
            try:
                await self.dead_letters.start()
                outage.ok()
                return
            except Exception as exc:  # Kafka not up yet: keep trying, as the other services do
                outage.failed(exc)
                await backoff.pause(self.stopping)


async def run_notifier(config: Config, cluster: str, *, http_port: int | None = None) -> None:
    started = time.monotonic()
    await run_until_signalled(NotifierService(config, cluster, http_port=http_port))
    log.info("notifier: stopped after %.0fs", time.monotonic() - started)


def _is_held(raw: bytes | str) -> bool:
    """Whether a stored incident state holds a notification back; an unreadable one does not (`repeat_once` drops
    it), and must not fail the whole recheck."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return False
    return isinstance(doc, dict) and bool(doc.get("held"))
