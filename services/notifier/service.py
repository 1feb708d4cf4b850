"""`lagwatch run notifier`: a Faust app that turns status-change and lag-threshold events into notifications.

The agents (agents.py) consume both topics in the group `lagwatch-notifier` and record what each event means before
acknowledging it; a Faust timer (repeats.py) sends repeats, releases what was held and applies subscription
changes; delivery workers (delivery.py) send what the outbox holds; skipped_events.py, not Kafka's
`auto.offset.reset`, decides where to read after retention deleted events unread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from lagwatch.services.notifier import metrics, skipped_events
from lagwatch.services.notifier.agents import EventIntake
from lagwatch.services.notifier.delivery import Dispatcher, Sender
from lagwatch.services.notifier.dlq import DeadLetters
from lagwatch.services.notifier.event_batches import EventRecorder
from lagwatch.services.notifier.events import LAG_EVENTS, STATUS_EVENTS, AnyKind
from lagwatch.services.notifier.outbox import Outbox
from lagwatch.services.notifier.reconcile import Reconciler
from lagwatch.services.notifier.repeats import RepeatTimer
from lagwatch.services.notifier.sample import serve_samples
from lagwatch.services.notifier.scope_watch import ScopeWatch
from lagwatch.services.notifier.subscriptions import Registry
from lagwatch.shared.notifications.subscriptions.silences import SilenceCache, SilenceStore
from lagwatch.shared.notifications.subscriptions.store import SubscriptionStore
from lagwatch.shared.runtime.config import Config, ConfigError
from lagwatch.shared.runtime.faust_kafka import (
    GroupMembership,
    faust_app,
    raw_topic,
    start_unless_stopping,
    stop_within,
)
from lagwatch.shared.runtime.health_server import LivenessCheck, ReadinessCheck
from lagwatch.shared.runtime.kafka_client import client_kwargs
from lagwatch.shared.runtime.kafka_probe import KafkaProbe
from lagwatch.shared.runtime.redis_client import connect
from lagwatch.shared.runtime.service import Service
from lagwatch.shared.runtime.service_lifecycle import run_until_signalled

log = logging.getLogger(__name__)
CONSUMER_GROUP = "lagwatch-notifier"


def check_settings(config: Config) -> None:
    n = config.notifier
    if n.backoff_cap < n.backoff_base:
        raise ConfigError("notifier.backoff-cap", f"must be >= notifier.backoff-base ({n.backoff_base})")
    if n.lease <= n.request_timeout:
        raise ConfigError("notifier.lease", f"must be longer than notifier.request-timeout ({n.request_timeout})")


class NotifierService(Service):
    def __init__(self, config: Config, cluster: str, *, http_port: int | None = None) -> None:
        check_settings(config)
        settings, cluster_config = config.notifier, config.cluster(cluster)
        redis = connect(config.redis)
        port = settings.http_port if http_port is None else http_port
        super().__init__("notifier", cluster, host=settings.http_host, port=port, redis=redis, announce=True)
        self.config = config
        self.registry = Registry(config, SubscriptionStore(redis))  # validates the file's subscriptions: ConfigError
        self.silences = SilenceCache(SilenceStore(redis))  # the api's silences (holds.py)
        lease_ms, seen_ttl_ms = int(settings.lease * 1000), int(settings.dedupe_ttl * 1000)
        self.outbox = Outbox(redis, lease_ms=lease_ms, seen_ttl_ms=seen_ttl_ms)
        self.dead_letters = DeadLetters(client_kwargs(cluster_config, cluster), settings.dlq_topic)
        self.sender = Sender(timeout_s=settings.request_timeout, allow_private=settings.allow_private_targets)
        self.dispatcher = Dispatcher(self.outbox, self.registry, self.sender, self.dead_letters, settings)
        self._dispatching: asyncio.Task[None] | None = None
        self._kafka_probe = KafkaProbe(config.clusters)  # assignment outlives a broker outage: ask the brokers
        recording = (self.outbox, self.registry, self.silences, self.dispatcher.wake.set)
        # skipped events (retention deleted them unread): counted, and the incidents reconciled (skipped_events.py)
        self.read_positions = skipped_events.ReadPositions()
        self.reconciler = Reconciler(*recording, self.read_positions, cluster, config.evaluator.status_topic)
        self.scopes = ScopeWatch(*recording, cluster)
        self.repeats = RepeatTimer(*recording, self.scopes, self.reconciler)
        recorder = EventRecorder(*recording)
        self.intake = EventIntake(recorder, self.read_positions, self.stopping, lambda: self.scopes.forgotten)
        self._create_app(config, cluster)

    def _create_app(self, config: Config, cluster: str) -> None:
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
            self.outbox.redis, cluster, self.read_positions, start_latest=settings.start_latest
        )
        skipped_events.watch(self.app, skip_watch)
        self.membership = GroupMembership(self.app)
        evaluator = config.evaluator
        self._agent(STATUS_EVENTS, evaluator.status_topic, "lagwatch.notifier.on_status")
        self._agent(LAG_EVENTS, evaluator.lag_threshold_topic, "lagwatch.notifier.on_lag_threshold")
        for topic in (evaluator.status_topic, evaluator.lag_threshold_topic):
            metrics.EVENTS_SKIPPED.labels(cluster, topic)  # 0 from the start: an alert sees the first skip
        self.app.timer(settings.repeat_check_interval, name="lagwatch.notifier.repeats")(self.repeats.tick)

    def _agent(self, kind: AnyKind, topic: str, name: str) -> None:
        async def consume(stream: Any) -> None:
            await self.intake.consume(stream, kind)

        self.app.agent(raw_topic(self.app, topic), name=name)(consume)

    # --- what the Service base asks ---------------------------------------------------------------------------

    @property
    def label(self) -> str:
        return "notifier"  # (its log lines and its crash said so before the base: operators' alerts match it)

    def readiness(self) -> dict[str, ReadinessCheck]:
        return {"kafka": self._kafka_ok}

    def liveness(self) -> dict[str, LivenessCheck]:
        return {"app": self._app_alive, "dispatcher": self._dispatcher_alive}

    async def _kafka_ok(self) -> bool:
        """Joined its group (partitions assigned, or none: a standby), and the brokers answer now (an assignment
        stays while they are down)."""
        return self.membership.joined and await self._kafka_probe.reachable(self.cluster)

    def _app_alive(self) -> bool:
        """False once the Faust app crashed: its agents and timer stopped, so no event would be handled again."""
        return not self.app.crashed

    def _dispatcher_alive(self) -> bool:
        return self._dispatching is None or not self._dispatching.done() or self.stopping.is_set()

    def dead_work(self) -> str | None:
        if not self._app_alive():
            return f"Faust app crashed: {self.app.crash_reason!r}"
        return None if self._dispatcher_alive() else "delivery loop died"

    async def start_work(self) -> None:
        log.info("notifier: %d subscriptions from the configuration file", len(self.registry.from_file))
        await self.sender.start()
        # deliveries left by an earlier run go out from Redis even while Kafka is down (the wait below) or has not
        # assigned partitions yet; a dead letter due before its producer has started waits in the outbox
        self._dispatching = asyncio.create_task(self.dispatcher.run(self.stopping))
        # a sample does not hold a stop back (the api's caller then hears 504): cancelled with the background tasks
        self.spawn(serve_samples(self.outbox.redis, self.registry, self.config, self.sender, self.stopping))
        # Faust's start fails while Kafka is down: the producer's start waits for it first
        if await self.start_with_retries(self.dead_letters.start, "the dead-letter producer: cannot reach Kafka"):
            await start_unless_stopping(self.app, self.stopping)

    async def stop_work(self) -> None:
        self.stopping.set()  # (also when the work died) the delivery loop hands back what it holds, once sent
        await stop_within(self.app, self.label)
        if self._dispatching is not None:
            await self._dispatching
        await self.dead_letters.stop()
        await self.sender.stop()

    # --- what tests and benches drive directly ------------------------------------------------------------------

    async def handle(self, raw: bytes | None, kind: AnyKind = STATUS_EVENTS) -> bool:
        """Record what one event means for every matching subscription (`handle_batch`)."""
        return await self.intake.handle_batch([raw], kind)

    async def handle_batch(self, raws: list[bytes | None], kind: AnyKind = STATUS_EVENTS) -> bool:
        return await self.intake.handle_batch(raws, kind)

    @property
    def events_handled(self) -> int:
        return self.intake.events_handled

    async def repeat_once(self, now: int | None = None) -> int:
        return await self.repeats.repeat_once(now)


async def run_notifier(config: Config, cluster: str, *, http_port: int | None = None) -> None:
    started = time.monotonic()
    await run_until_signalled(NotifierService(config, cluster, http_port=http_port))
    log.info("notifier: stopped after %.0fs", time.monotonic() - started)
