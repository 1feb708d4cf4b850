"""Burrow's probes: `GET /burrow/admin` (text `GOOD`) and `/burrow/admin/ready` (`READY` / `STARTING`). lagwatch's
`/healthz` and `/readyz` are the health server's (`shared/runtime/health_server.py`), mounted on the api's app."""

from __future__ import annotations

from aiohttp import web

from lagwatch.shared.runtime.health_server import HealthServer

routes = web.RouteTableDef()
HEALTH = web.AppKey("lagwatch_api_health", HealthServer)


@routes.get("/burrow/admin")
async def burrow_admin(_: web.Request) -> web.Response:
    return web.Response(text="GOOD")


@routes.get("/burrow/admin/ready")
async def burrow_ready(request: web.Request) -> web.Response:
    """`READY` (200) once the api can answer, `STARTING` (503) until then: `/readyz`'s checks, so Kubernetes probes
    copied from a Burrow deployment keep working."""
    if await request.app[HEALTH].ready():
        return web.Response(text="READY")
    return web.Response(text="STARTING", status=503)
