"""Health: Burrow's `GET /burrow/admin` (text `GOOD`) and `/burrow/admin/ready` (`READY` / `STARTING`), and
lagwatch's `/healthz` and `/readyz`.

`/healthz` says the process runs. `/readyz` says it can answer: Redis answers a PING, and every configured
cluster's Kafka accepts a connection (the probe is cached: `shared/kafka/kafka_probe.py`). Kafka is part of readiness
because a DELETE's change notice needs it; reads only need Redis.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from lagwatch.services.api.context import CONTEXT

routes = web.RouteTableDef()
REDIS_PING_TIMEOUT_S = 2.0


@routes.get("/burrow/admin")
async def burrow_admin(_: web.Request) -> web.Response:
    return web.Response(text="GOOD")


@routes.get("/burrow/admin/ready")
async def burrow_ready(request: web.Request) -> web.Response:
    """Burrow's readiness probe: `READY` (200) once the api can answer, `STARTING` (503) until then; the same
    checks as `/readyz`, so Kubernetes probes copied from a Burrow deployment keep working."""
    if all((await _checks(request)).values()):
        return web.Response(text="READY")
    return web.Response(text="STARTING", status=503)


@routes.get("/healthz")
async def healthz(_: web.Request) -> web.Response:
    return web.json_response({"service": "api", "status": "alive"})


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    checks = await _checks(request)
    ready = all(checks.values())
    return web.json_response({"service": "api", "ready": ready, "checks": checks}, status=200 if ready else 503)


async def _checks(request: web.Request) -> dict[str, bool]:
    context = request.app[CONTEXT]
    checks = {"redis": await _redis_ok(request)}
    for cluster in sorted(context.config.clusters):
        checks[f"kafka:{cluster}"] = await context.kafka.reachable(cluster)
    return checks


async def _redis_ok(request: web.Request) -> bool:
    try:
        async with asyncio.timeout(REDIS_PING_TIMEOUT_S):
            return bool(await request.app[CONTEXT].redis.ping())
    except Exception:  # any failure means "not ready", and readiness must answer, not raise
        return False
