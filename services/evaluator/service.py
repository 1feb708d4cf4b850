"""`lagwatch run evaluator`: a Faust app that evaluates groups as their commits arrive and when a log-end poll can
change them (notices.py), and when time alone can (next_change.py, ownership.py); it publishes a status-change event
whenever a group's status changes (evaluation.py) and stores each group's ready result (results_store.py) for
/metrics and the dashboard. During a rebalance two instances may briefly both evaluate a group: the status store's
compare-and-set lets only one of them record (and publish) each transition.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterable

from lagwatch.services.evaluator.evaluation import EvaluationReport, GroupEvaluator
from lagwatch.services.evaluator.lag_state_store import LagStateStore
from lagwatch.services.evaluator.lag_thresholds import LagThresholdAlerts, ThresholdSource
from lagwatch.services.evaluator.newcomers import Newcomers
from lagwatch.services.evaluator.notices import ChangeNotices, NoticesHandled
from lagwatch.services.evaluator.ownership import ChangesPartitions, OwnedGroups
from lagwatch.services.evaluator.publisher import EventPublisher
from lagwatch.services.evaluator.runs import EvaluationRuns
from lagwatch.services.evaluator.schedule_store import ScheduleStore
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.runtime.config import Config
from lagwatch.shared.runtime.faust_kafka import (
    GroupMembership,
    faust_app,
    raw_topic,
    start_unless_stopping,
    stop_within,
)
from lagwatch.shared.runtime.health_server import ReadinessCheck
from lagwatch.shared.runtime.kafka_client import client_kwargs
from lagwatch.shared.runtime.kafka_probe import KafkaProbe
from lagwatch.shared.runtime.redis_client import connect
from lagwatch.shared.runtime.service import Service
from lagwatch.shared.runtime.service_lifecycle import run_until_signalled
from lagwatch.shared.statuses.results_store import ResultsStore
from lagwatch.shared.windows.store import WindowStore

log = logging.getLogger(__name__)


def consumer_group(cluster: str) -> str:
    return f"lagwatch-evaluator-{cluster}"


class EvaluatorService(Service):
    def __init__(self, config: Config, cluster: str, *, http_port: int | None = None) -> None:
        cluster_config = config.cluster(cluster)  # an unknown cluster fails before anything connects
        redis, settings = connect(config.redis), config.evaluator
        port = settings.http_port if http_port is None else http_port
        super().__init__("evaluator", cluster, host=settings.http_host, port=port, redis=redis, announce=True)
        self.config = config
        self._kafka_probe = KafkaProbe(config.clusters)  # assignment outlives a broker outage: ask the brokers
        self.store = WindowStore(redis, config.window())
        self.statuses = StatusStore(redis, config.window().expire_group_ms)
        self.schedule = ScheduleStore(redis, cluster)
        self.publisher = EventPublisher(client_kwargs(cluster_config, cluster), settings.status_topic)
        self.evaluator = GroupEvaluator(
            cluster,
            self.store,
            self.statuses,
            self.publisher,
            config.rules(),
            lag_alerts=LagThresholdAlerts(
                cluster,
                LagStateStore(redis, config.window().expire_group_ms),
                ThresholdSource(redis, cluster, config.subscriptions),
                self.publisher,
                settings.lag_threshold_topic,
            ),
            results=ResultsStore(redis),
            group_filter=config.group_filter(cluster),
            poll_interval_ms=int(cluster_config.offset_refresh * 1000),
        )
        self.app = faust_app(
            consumer_group(cluster),
            cluster_config,
            cluster,
            "evaluator",
            config.ingest.session_timeout,
            consumer_auto_offset_reset="latest",  # old notices are moot: a takeover evaluates every group
        )
        self.membership = GroupMembership(self.app)
        self._assemble()

    def _assemble(self) -> None:
        """The steps on the app: the changes agent, the sweep timer, the schedule loop and the newcomers."""
        settings = self.config.evaluator
        changes = raw_topic(self.app, settings.changes_topic)
        partitions = ChangesPartitions(self.app, changes, self.cluster)
        self.owned_partitions, self.changes_partitions = partitions.owned, partitions.count
        self.runs = EvaluationRuns(self.evaluator, self.schedule, partitions.placing, self.stopping)
        handled = NoticesHandled(partitions)
        self.newcomers = Newcomers(self.runs, settings.max_groups, settings.new_groups_wait, handled)
        self.owned = OwnedGroups(self.runs, self.newcomers, partitions, settings.sweep_interval)
        notices = ChangeNotices(self.runs, self.newcomers, handled)
        self.app.agent(changes, name="lagwatch.evaluator.on_changes")(notices.take)
        self.app.timer(settings.sweep_interval, name="lagwatch.evaluator.sweep")(self.owned.sweep)

    def readiness(self) -> dict[str, ReadinessCheck]:
        return {"kafka": self._kafka_ok}

    async def _kafka_ok(self) -> bool:
        """Joined its group (partitions assigned, or none: a standby), and the brokers answer now (an assignment
        stays while they are down)."""
        return self.membership.joined and await self._kafka_probe.reachable(self.cluster)

    def dead_work(self) -> str | None:
        """A crashed Faust app (its consumer failed for good) ends the service (evaluation state lives in Redis)."""
        return None if self.app.crash_reason is None else f"Faust app crashed: {self.app.crash_reason!r}"

    async def start_work(self) -> None:
        # the outage's lines end in "cannot reach Kafka", as the other services' say
        if not await self.start_with_retries(self.publisher.start, "the event publisher: cannot reach Kafka"):
            return
        await start_unless_stopping(self.app, self.stopping)
        self.spawn(self.owned.run_schedule())
        self.spawn(self.newcomers.run())

    async def stop_work(self) -> None:
        await stop_within(self.app, self.label)
        await self.publisher.stop()

    async def evaluate_now(self, groups: Iterable[str]) -> EvaluationReport | None:
        """Evaluate some groups at once (used by tests and the API's refresh)."""
        return await self.runs.evaluate(sorted(groups), "manual")

    @property
    def taken_over(self) -> set[int]:
        """The changes partitions whose schedule this instance runs; their groups not evaluated here yet wait in
        `runs.backlog` (empty: caught up)."""
        return self.owned.taken_over

    @property
    def sweeps_done(self) -> int:
        return self.owned.sweeps_done


# Young objects are collected after this many allocations (Python's default: 700), the older generations as usual
YOUNG_COLLECTION_THRESHOLD = 50_000


def collect_less() -> None:
    """An evaluation allocates many short-lived objects (windows decoded, verdicts, events) beside a large heap that
    lives as long as the process (modules, the Faust app, the watch index, what is remembered of each group): at
    Python's default thresholds the collector spends a good share of an evaluation walking the survivors. What the
    imports built is frozen out of collections, and young objects are collected less often (cyclic garbage waits a
    little longer; the reference counts free the rest as before). The cyclic garbage the imports left is collected
    first: frozen, it would never be."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *gc.get_threshold()[1:])


async def run_evaluator(config: Config, cluster: str, *, http_port: int | None = None) -> None:
    started = time.monotonic()
    collect_less()
    await run_until_signalled(EvaluatorService(config, cluster, http_port=http_port))
    log.info("evaluator %s: stopped after %.0fs", cluster, time.monotonic() - started)
