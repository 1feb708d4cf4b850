"""`lagwatch run api`: the aiohttp application (`create_app`), and the service that serves it until SIGTERM/SIGINT on
the Service base's health server, which mounts /healthz and /readyz on it.
"""

from __future__ import annotations

import logging

from aiohttp import web

from lagwatch.services.api import (
    burrow_routes,
    config_routes,
    cors,
    dashboard,
    health_routes,
    listener_tls,
    silence_routes,
    subscription_routes,
)
from lagwatch.services.api.context import CONTEXT, ApiContext
from lagwatch.services.api.metrics_route import METRICS, ApiMetrics, handle_metrics
from lagwatch.services.api.middleware import errors_as_json, timed, trailing_slash
from lagwatch.shared.runtime.config import Config
from lagwatch.shared.runtime.health_server import ReadinessCheck, Report
from lagwatch.shared.runtime.service import Service
from lagwatch.shared.runtime.service_lifecycle import run_until_signalled

log = logging.getLogger(__name__)


def create_app(config: Config) -> web.Application:
    # `timed` is outermost, so error answers are timed too
    app = web.Application(middlewares=[timed, trailing_slash, errors_as_json])
    app[CONTEXT] = ApiContext.create(config)
    app[METRICS] = ApiMetrics(config)
    for module in (burrow_routes, config_routes, health_routes, subscription_routes, silence_routes):
        app.add_routes(module.routes)
    dashboard.install(app)
    cors.install(app, config.api.access_control_allow_origin)
    app.router.add_get("/metrics", handle_metrics)
    app.on_startup.append(_start)
    app.on_cleanup.append(_close)
    return app


async def _start(app: web.Application) -> None:
    app[CONTEXT].notices.start()


async def _close(app: web.Application) -> None:  # after the last request: what handlers use closes here
    await app[METRICS].close()
    await app[CONTEXT].notices.stop()


class ApiServer(Service):
    """Ready while Redis answers a PING (a replica during a failover still serves reads). Kafka's reachability is
    reported beside but does not gate: a Kafka outage must not take the api and the dashboard out of their Service
    just when operators look at them."""

    def __init__(self, config: Config, *, port: int | None = None) -> None:
        self.config = config
        self.tls = listener_tls.server_context(config.api)  # ConfigError before anything starts
        self.app = create_app(config)
        self.context = self.app[CONTEXT]
        port = config.api.port if port is None else port
        super().__init__("api", host=config.api.host, port=port, redis=self.context.redis, app=self.app, tls=self.tls)
        self.app[health_routes.HEALTH] = self.health

    @property
    def url(self) -> str:
        return self.health.url

    @property
    def port(self) -> int:
        return self.health.port

    def readiness(self) -> dict[str, ReadinessCheck]:
        return {"redis": self._redis_answers}

    def reports(self) -> dict[str, Report]:
        return {"kafka": self._kafka_reachable}

    async def _redis_answers(self) -> bool:
        return bool(await self.context.redis.ping())

    async def _kafka_reachable(self) -> dict[str, bool]:
        kafka = self.context.kafka
        return {cluster: await kafka.reachable(cluster) for cluster in sorted(self.config.clusters)}

    async def start_work(self) -> None:
        if self.tls is not None:
            self.spawn(listener_tls.reload_on_change(self.tls, self.config.api, self.stopping))


async def run_api(config: Config, *, port: int | None = None) -> None:
    await run_until_signalled(ApiServer(config, port=port))
    log.info("api: stopped")
