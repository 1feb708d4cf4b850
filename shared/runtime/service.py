"""The one life cycle every lagwatch service runs on. A service is wiring: it assembles stage objects and says how
its work starts (`start_work`), stops (`stop_work`) and dies (`dead_work`); the base owns what every process does
around that: the health server with its readiness and liveness checks, Redis and its readiness, the presence entry,
starting a client with retries while Kafka is not up yet, background tasks, the crash watch and an ordered stop.

A stop is always clean and always ends: `stopping` is set (work that watches it ends by itself), the background tasks
are cancelled, `stop_work` runs (each service bounds what may hang, e.g. a Faust app's stop), then the health server,
the presence entry and Redis close, in that order, whatever failed before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from aiohttp import web
from redis.asyncio import Redis

from lagwatch.shared.runtime.health_server import HealthServer, LivenessCheck, ReadinessCheck, Report
from lagwatch.shared.runtime.outage_log import OutageLog
from lagwatch.shared.runtime.presence import Presence
from lagwatch.shared.runtime.redis_memory import takes_writes, warn_if_evicting
from lagwatch.shared.runtime.service_lifecycle import Backoff, until_stopped_or_dead

log = logging.getLogger(__name__)


class Service:
    """Subclasses set what they need in `__init__` (after calling this one) and implement `start_work`; `stop_work`,
    `dead_work`, `readiness`, `liveness` and `reports` have defaults. `cluster`: "" for a service of every cluster
    (the api); `redis`: the service's connection, checked for readiness (it takes writes), warned about when it
    evicts, closed last; `announce`: keep an entry among the cluster's running instances of this service (what
    `lagwatch forget-cluster` and the api's instance count read); `app`: the service's own HTTP application, which
    the health server serves with the probes mounted on it (the api); `tls`: serve it over HTTPS."""

    def __init__(
        self,
        name: str,
        cluster: str = "",
        *,
        host: str,
        port: int,
        redis: Redis | None = None,
        announce: bool = False,
        app: web.Application | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.name, self.cluster = name, cluster
        self.stopping = asyncio.Event()
        self.started = asyncio.Event()  # set once the health server listens and the work started
        self.redis = redis
        self.presence = Presence(redis, cluster, name) if announce and redis is not None else None
        self.health = HealthServer(
            name,
            self._readiness_checks(),
            host=host,
            port=port,
            liveness=self.liveness(),
            reports=self.reports(),
            app=app,
            tls=tls,
        )
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def label(self) -> str:
        """How log lines name this process: the service and its cluster."""
        return f"{self.name} {self.cluster}" if self.cluster else self.name

    # --- what a service says about itself ------------------------------------------------------------------------

    def readiness(self) -> dict[str, ReadinessCheck]:
        """The service's own dependency checks, beside Redis's (which the base adds when there is a connection; one
        named "redis" here replaces it)."""
        return {}

    def reports(self) -> dict[str, Report]:
        """What /readyz tells beside the checks without gating readiness on it."""
        return {}

    def liveness(self) -> dict[str, LivenessCheck]:
        """Checks that the process's work goes on (/healthz answers 503 with the failing ones)."""
        return {}

    def dead_work(self) -> str | None:
        """Why the service's work died for good (e.g. a crashed Faust app), or None while it lives: the process then
        ends with an error after /healthz has said so for a grace (`until_stopped_or_dead`)."""
        return None

    async def start_work(self) -> None:
        raise NotImplementedError

    async def stop_work(self) -> None:
        """Stop what `start_work` started; runs once the background tasks are cancelled, even after a failed start."""

    # --- what the base gives ----------------------------------------------------------------------------------

    def _readiness_checks(self) -> dict[str, ReadinessCheck]:
        redis = self.redis
        checks: dict[str, ReadinessCheck] = {"redis": lambda: takes_writes(redis)} if redis is not None else {}
        return checks | self.readiness()

    def spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A background task of the service, cancelled (and awaited) when the service stops."""
        task = asyncio.create_task(work)
        self._tasks.append(task)
        return task

    async def start_with_retries(self, start: Callable[[], Awaitable[None]], what: str) -> bool:
        """Run `start` (a Kafka producer's, say) until it succeeds, backing off and logging an outage once while it
        fails; False when a stop was asked meanwhile (a clean stop, not a failure)."""
        backoff, outage = Backoff(0.2), OutageLog(log, f"{self.label}: cannot start {what}")
        while not self.stopping.is_set():
            try:
                await start()
            except Exception as exc:  # Kafka not up yet: keep trying, as the other services do
                outage.failed(exc)
                await backoff.pause(self.stopping)
                continue
            outage.ok()
            return True
        return False

    async def run(self) -> None:
        """Start, work until a stop is asked (SIGTERM, SIGINT) or the work dies, then stop in order."""
        if self.presence is not None:
            self.presence.start(self.stopping)
        try:
            await self.health.start()
            log.info("%s: health and metrics on %s", self.label, self.health.url)
            if self.redis is not None:
                await warn_if_evicting(self.redis, self.label)
            await self.start_work()
            self.started.set()
            await until_stopped_or_dead(self.stopping, self.dead_work, self.label)
        finally:
            await self._stop()

    async def _stop(self) -> None:
        self.stopping.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        try:
            await self.stop_work()
        finally:
            await self.health.stop()
            if self.presence is not None:
                await self.presence.stop()
            if self.redis is not None:
                await self.redis.aclose()
