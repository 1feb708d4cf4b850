"""A small HTTP server every service runs beside its work: `/healthz`, `/readyz` and `/metrics`.

`/healthz` answers 200 while the process's work goes on: every liveness check (is the service's agent, timer or
loop still running?) passes; 503 with the failing ones otherwise, so a supervisor restarts a process whose work
died while its health server lives on. `/readyz` answers 200 only when every dependency check passes (503 with the
failing ones otherwise); the checks run at once, each bounded by `CHECK_TIMEOUT_S` (a frozen Redis or Kafka is
"not ready" within seconds: a probe's own timeout is usually a few seconds too). `/metrics` is the Prometheus
text format of this process's registry, and each check's answer at the scrape: `lagwatch_service_ready{service,
check}` and `lagwatch_service_alive{service, check}`, 1 or 0. An orchestrator acts on the probes; Prometheus
scrapes a process that is up but cannot work (Redis or Kafka out of its reach) as up, and only these say it
(`LagwatchServiceNotReady`).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from lagwatch.shared.runtime.http_client_errors import quiet_client_errors
from lagwatch.shared.runtime.listen import listen
from lagwatch.shared.runtime.prometheus_text import render

ReadinessCheck = Callable[[], Awaitable[bool]]
LivenessCheck = Callable[[], bool]
Report = Callable[[], Awaitable[object]]
CHECK_TIMEOUT_S = 2.0  # a dependency that does not answer a readiness check within this is not ready
# A connection must complete a request's headers within this long of opening (or of its previous answer), or it is
# closed: aiohttp's AppRunner default, 3630 s, lets slow-loris connections hold file descriptors for an hour. 75 s as
# aiohttp's run_app and nginx. Read at each start: tests shorten it.
KEEPALIVE_TIMEOUT_S = 75.0
SHUTDOWN_TIMEOUT_S = 5.0  # in-flight requests' grace at a stop


class HealthServer:
    """`app`: the service's own application, served with the probes mounted on it (it serves its own /metrics); None:
    a bare one that serves `registry` on /metrics. `reports`: what /readyz tells beside the checks, not gating them.
    `tls`: serve HTTPS."""

    def __init__(
        self,
        service: str,
        checks: Mapping[str, ReadinessCheck],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        registry: CollectorRegistry = REGISTRY,
        liveness: Mapping[str, LivenessCheck] | None = None,
        reports: Mapping[str, Report] | None = None,
        app: web.Application | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.service, self.checks, self.liveness, self.reports = service, checks, liveness or {}, reports or {}
        self.host, self.port, self.tls = host, port, tls
        self.registry = registry
        self.app = app
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = self.app if self.app is not None else self._bare_app()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        quiet_client_errors()  # a malformed request is a WARNING line, not an ERROR with a traceback
        self._runner = web.AppRunner(
            app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S, keepalive_timeout=KEEPALIVE_TIMEOUT_S
        )
        await self._runner.setup()
        self.port = await listen(self._runner, self.host, self.port, self.tls)

    def _bare_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        return app

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    async def readiness(self) -> dict[str, bool]:
        """Each readiness check's answer, all at once."""
        answers = await asyncio.gather(*(_bounded(check) for check in self.checks.values()))
        return dict(zip(self.checks, answers, strict=True))

    async def ready(self) -> bool:
        return all((await self.readiness()).values())

    async def _healthz(self, _: web.Request) -> web.Response:
        dead = [name for name, alive in self.liveness.items() if not alive()]
        if dead:
            return web.json_response({"service": self.service, "status": "dead", "dead": dead}, status=503)
        return web.json_response({"service": self.service, "status": "alive"})

    async def _readyz(self, _: web.Request) -> web.Response:
        results = await self.readiness()
        ready = all(results.values())
        body = {"service": self.service, "ready": ready, "checks": results}
        body |= {name: await report() for name, report in self.reports.items()}
        return web.json_response(body, status=200 if ready else 503)

    async def _metrics(self, _: web.Request) -> web.Response:
        ready_help = "1 while the service's readiness check passes (its dependency answers), 0 while it fails"
        ready = self._checks_family("lagwatch_service_ready", ready_help, await self.readiness())
        alive_help = "1 while the service's liveness check passes, 0 while not"
        alive = self._checks_family("lagwatch_service_alive", alive_help, {n: c() for n, c in self.liveness.items()})
        body = generate_latest(self.registry) + render([ready, alive])
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _checks_family(self, name: str, help_text: str, answers: Mapping[str, bool]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, help_text, labels=["service", "check"])
        for check, passed in answers.items():
            family.add_metric([self.service, check], float(passed))
        return family


async def _bounded(check: ReadinessCheck) -> bool:
    """The check's answer; False when it fails or does not answer in time (readiness must answer, not raise)."""
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            return bool(await check())
    except Exception:
        return False
