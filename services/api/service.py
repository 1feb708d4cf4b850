"""`lagwatch run api`: the aiohttp application, and the server that runs it until SIGTERM/SIGINT.

`create_app(config)` builds the Application (Burrow's /v3 routes, health, /metrics, the dashboard, JSON errors);
`ApiServer` serves it on a host and port (port 0 = a free one, see `.url`), like the other services' runners.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiohttp import web

from lagwatch.services.api import (
    burrow_routes,
    config_routes,
    cors,
    dashboard,
    group_routes,
    health_routes,
    listener_tls,
    silence_routes,
    subscription_routes,
)
from lagwatch.services.api.context import CONTEXT, ApiContext
from lagwatch.services.api.metrics import METRICS, ApiMetrics, handle_metrics
from lagwatch.services.api.middleware import errors_as_json, timed, trailing_slash
from lagwatch.shared.runtime.config import Config
from lagwatch.shared.runtime.http_client_errors import quiet_client_errors
from lagwatch.shared.runtime.listen import listen
from lagwatch.shared.runtime.service_lifecycle import run_until_signalled

log = logging.getLogger(__name__)
# A connection must complete a request's headers within this long of opening (or of its previous answer), or it is
# closed. aiohttp's AppRunner default is 3630 s: idle or header-dripping connections (slow-loris) then hold file
# descriptors for an hour, until the api can accept nothing more. 75 s as aiohttp's run_app and nginx.
KEEPALIVE_TIMEOUT_S = 75.0


def create_app(config: Config) -> web.Application:
    # `timed` is outermost, so error answers are timed too
    app = web.Application(middlewares=[timed, trailing_slash, errors_as_json])
    context = ApiContext.create(config)
    app[CONTEXT] = context
    app[METRICS] = ApiMetrics(config)
    app.add_routes(burrow_routes.routes)
    app.add_routes(group_routes.routes)
    app.add_routes(config_routes.routes)
    app.add_routes(health_routes.routes)
    app.add_routes(subscription_routes.routes)
    app.add_routes(silence_routes.routes)
    dashboard.install(app)
    cors.install(app, config.api.access_control_allow_origin)
    app.router.add_get("/metrics", handle_metrics)
    app.on_startup.append(_start)
    app.on_cleanup.append(_close)
    return app


async def _start(app: web.Application) -> None:
    await app[CONTEXT].start()


async def _close(app: web.Application) -> None:
    await app[METRICS].close()
    await app[CONTEXT].close()


class ApiServer:
    def __init__(self, config: Config, *, host: str | None = None, port: int | None = None) -> None:
        self.config = config
        self.host = host or config.api.host
        self.port = config.api.port if port is None else port
        self.tls = listener_tls.server_context(config.api)  # ConfigError before anything starts
        self.stopping = asyncio.Event()
        self.started = asyncio.Event()  # set once the socket listens (and `port` is the real one)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    async def run(self) -> None:
        """Serve until `stopping` is set; in-flight requests get a short grace period at shutdown."""
        quiet_client_errors()  # a malformed request is a WARNING line, not an ERROR with a traceback
        runner = web.AppRunner(
            create_app(self.config), access_log=None, shutdown_timeout=5.0, keepalive_timeout=KEEPALIVE_TIMEOUT_S
        )
        await runner.setup()
        reloading = None
        try:
            self.port = await listen(runner, self.host, self.port, self.tls)
            if self.tls is not None:
                reloading = asyncio.create_task(listener_tls.reload_on_change(self.tls, self.config.api, self.stopping))
            self.started.set()
            log.info("api: serving on %s", self.url)
            await self.stopping.wait()
        finally:
            if reloading is not None:
                reloading.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reloading
            await runner.cleanup()


async def run_api(config: Config, *, port: int | None = None) -> None:
    await run_until_signalled(ApiServer(config, port=port))
    log.info("api: stopped")
