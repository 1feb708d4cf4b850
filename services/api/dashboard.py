"""The dashboard: one page (`/dashboard`, and `/` redirects to it) and the JSON it polls.

    GET /dashboard                                  the page (HTML; its script and style under /dashboard/assets/)
    GET /dashboard/api/overview[?cluster=NAME]      clusters; for one cluster (default: the first) its groups worst
                                                    first, open incidents, recent status changes
    GET /dashboard/api/group/{cluster}/{group}      a group's status with every partition and its window

The overview's rows are the evaluator's ready results (`results_store.py`, the same /metrics reads) with lags from
the topics' log ends now; a group's detail is computed from its windows at request time, as for Burrow's routes
(`statuses.py`); open incidents and recent changes are the evaluator's records (`status_store.py`). All of these are
empty while no evaluator has run. Overview requests within `OVERVIEW_REUSE_S` of one share it (every open page polls
it); `generated_at` says when it was computed.
Like the api's other reads these need no token; the page mutates nothing. It loads no third-party code (the
machines it runs on may have no internet), and its Content-Security-Policy allows only its own script and style.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from aiohttp import web

from lagwatch.services.api import statuses
from lagwatch.services.api.context import CONTEXT, ApiContext
from lagwatch.services.api.dashboard_cache import SharedRecentResults
from lagwatch.services.api.dashboard_data import group_detail, group_row, incident_json, severity_order
from lagwatch.services.api.responses import ApiError, ok
from lagwatch.shared.clock import now_ms
from lagwatch.shared.domain.status_event import QUIET
from lagwatch.shared.store.results_store import ResultsStore
from lagwatch.shared.store.status_store import GroupState, StatusStore
from lagwatch.shared.subscriptions.silences import EXPIRED, SilenceStore

routes = web.RouteTableDef()
ASSETS = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
RECENT_CHANGES_SHOWN = 50
OVERVIEW_REUSE_S = 5.0  # the page's default refresh: one computation per cluster per refresh, however many viewers
OVERVIEWS = web.AppKey("lagwatch_dashboard_overviews", SharedRecentResults)
PAGE_HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}


def install(app: web.Application) -> None:
    """The dashboard's routes, and the overviews its requests share."""
    app[OVERVIEWS] = SharedRecentResults(OVERVIEW_REUSE_S)
    app.add_routes(routes)


def _static(name: str) -> bytes:
    return resources.files("lagwatch.services.api").joinpath("static", name).read_bytes()


@routes.get("/")
async def root(_: web.Request) -> web.Response:
    raise web.HTTPFound("/dashboard")


@routes.get("/dashboard")
async def page(_: web.Request) -> web.Response:
    return web.Response(body=_static("dashboard.html"), content_type="text/html", headers=PAGE_HEADERS)


@routes.get("/dashboard/assets/{name}")
async def asset(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in ASSETS:
        raise ApiError(404, "no such dashboard asset")
    return web.Response(body=_static(name), content_type=ASSETS[name], headers=PAGE_HEADERS)


@routes.get("/dashboard/api/overview")
async def overview(request: web.Request) -> web.Response:
    context = request.app[CONTEXT]
    clusters = await context.clusters()
    cluster = request.query.get("cluster") or (clusters[0] if clusters else None)
    body: dict[str, Any] = {
        "clusters": clusters,
        "cluster": cluster,
        "generated_at": now_ms(),
        "groups": [],
        "incidents": [],
        "changes": [],
        "silences": await _silences(context),
    }
    if cluster is not None:
        await context.require_cluster(cluster)
        body.update(await request.app[OVERVIEWS].get(cluster, lambda: _cluster_overview(context, cluster)))
    return ok(request, "dashboard overview returned", **body)


@routes.get("/dashboard/api/group/{cluster}/{group}")
async def group(request: web.Request) -> web.Response:
    context = request.app[CONTEXT]
    cluster = await context.require_cluster(request.match_info["cluster"])
    now = await context.judging_clock(cluster)  # as the evaluator and the status route judge
    stored = await context.live_group(cluster, request.match_info["group"], now)
    if stored is None:
        raise ApiError(404, "consumer group not found")
    status = statuses.evaluate(stored, now, context.config)
    body = statuses.with_lag_seconds(status.to_json(), stored, now)
    body = await statuses.with_velocity(body, status, stored, now, context)
    return ok(request, "dashboard group returned", status=group_detail(body, stored, context.config.storage.intervals))


async def _silences(context: ApiContext) -> list[dict]:
    """The silences that hold now or will (all clusters: a silence need not name one), soonest end first."""
    now = now_ms() / 1000
    held = [s for s in await SilenceStore(context.redis).all() if s.state(now) != EXPIRED]
    return [s.to_json(now) for s in sorted(held, key=lambda s: (s.starts_at > now, s.ends_at))]


async def _cluster_overview(context: ApiContext, cluster: str) -> dict:
    history = StatusStore(context.redis, context.config.window().expire_group_ms)
    incidents = await _open_incidents(history, cluster)
    return {
        "generated_at": now_ms(),
        "groups": await _group_rows(context, cluster, incidents),
        "incidents": [
            {"group": g, "status": s.status.name, **(incident_json(s.incident) or {})} for g, s in incidents.items()
        ],
        "changes": await history.recent_changes(cluster, RECENT_CHANGES_SHOWN),
    }


async def _group_rows(context: ApiContext, cluster: str, incidents: dict[str, GroupState]) -> list[dict]:
    """Every evaluated group of the cluster as an overview row, worst first."""
    now, intervals = now_ms(), context.config.storage.intervals
    results = ResultsStore(context.redis)
    ready, sparklines = await results.all(cluster), await results.sparklines(cluster)
    counts = await context.store.list_topics(cluster)
    needed = {(p.topic, p.partition) for r in ready.values() for p in r.partitions if p.topic in counts}
    log_ends = {tp: end for tp, end in (await context.store.latest_broker_offsets(cluster, needed)).items() if end}
    rows = []
    for group, result in ready.items():
        state = incidents.get(group)
        incident = state.incident if state else None
        rows.append(group_row(result, log_ends, sparklines.get(group, ()), now, intervals, incident))
    return sorted(rows, key=severity_order)


async def _open_incidents(history: StatusStore, cluster: str) -> dict[str, GroupState]:
    """group -> the evaluator's state of it (status recorded, open incident), for groups it last saw in a bad state,
    by name."""
    bad = sorted(g for g, s in (await history.known_groups(cluster)).items() if s not in QUIET)
    states = await history.states(cluster, bad)
    return {g: state for g, state in zip(bad, states, strict=True) if state.incident.incident_id}
