"""Health: Burrow's `GET /burrow/admin` (text `GOOD`) and `/burrow/admin/ready` (`READY` / `STARTING`), and
lagwatch's `/healthz` and `/readyz`.

`/healthz` says the process runs. `/readyz` says it can answer: Redis answers a PING. Whether each configured
cluster's Kafka accepts a connection is reported beside (`kafka`; the probe is cached: `shared/runtime/kafka_probe.py`)
but does not make the api unready: everything it serves is read from Redis, and a DELETE's change notice to the
evaluator is best effort (`notices.py`). A Kafka outage — or one cluster's of several — must not take the api and
the dashboard out of their Service just when operators look at them.
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
    check as `/readyz`, so Kubernetes probes copied from a Burrow deployment keep working."""
    if await _redis_ok(request):
        return web.Response(text="READY")
    return web.Response(text="STARTING", status=503)


@routes.get("/healthz")
async def healthz(_: web.Request) -> web.Response:
    return web.json_response({"service": "api", "status": "alive"})


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    context = request.app[CONTEXT]
    ready = await _redis_ok(request)
    kafka = {cluster: await context.kafka.reachable(cluster) for cluster in sorted(context.config.clusters)}
    body = {"service": "api", "ready": ready, "checks": {"redis": ready}, "kafka": kafka}  # kafka: not gating
    return web.json_response(body, status=200 if ready else 503)


async def _redis_ok(request: web.Request) -> bool:
    try:
        async with asyncio.timeout(REDIS_PING_TIMEOUT_S):
            return bool(await request.app[CONTEXT].redis.ping())
    except Exception:  # any failure means "not ready", and readiness must answer, not raise
        return False
