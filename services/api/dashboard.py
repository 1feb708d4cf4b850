"""The dashboard: one page (`/dashboard`, and `/` redirects to it) and the JSON it polls (docs/dashboard.md):
`/dashboard/api/overview` (a cluster's worst groups, totals, open incidents, recent changes) and
`/dashboard/api/group` (a group's status with every partition and its window; POST names it in a JSON body, as a
group's name may not fit in a URL).

Overview rows are the evaluator's ready results (as /metrics reads them) with lags from the log ends now; a group's
detail is computed from its windows at request time, as for Burrow's routes.

Ranking a cluster of 100k groups is a second of CPU, so it runs in a thread and is shared (`dashboard_cache.py`) for
`OVERVIEW_REUSE_S`. What is shared is the cluster's ranking, not an answer: each request picks its rows matching its
`q` from it, and only these are decoded; keyed by `q` instead, every filter typed would rank the whole cluster again.
The page needs no token, mutates nothing and loads no third-party code (its machines may have no internet).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources

from aiohttp import web

from lagwatch.services.api import statuses
from lagwatch.services.api.context import CONTEXT, ApiContext
from lagwatch.services.api.dashboard_cache import SharedRecentResults
from lagwatch.services.api.dashboard_data import (
    OpenIncidents,
    Ranking,
    TopicPartition,
    Unranked,
    add_strays,
    group_detail,
    group_row,
    rank_results,
    sparkline_points,
)
from lagwatch.services.api.group_routes import named_group
from lagwatch.services.api.paths import named
from lagwatch.services.api.responses import ApiError, ok
from lagwatch.shared.events.status_event import QUIET
from lagwatch.shared.events.status_store import GroupState, StatusStore
from lagwatch.shared.notifications.subscriptions.silences import EXPIRED, SilenceStore
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.presence import running_counts
from lagwatch.shared.runtime.redis_client import reply
from lagwatch.shared.statuses.results_store import decode_result

log = logging.getLogger(__name__)
routes = web.RouteTableDef()
ASSETS = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
RECENT_CHANGES_SHOWN = 50
OVERVIEW_REUSE_S = 5.0  # the page's default refresh: one computation per cluster per refresh, however many viewers
# while the next one is computed, an overview this recent is answered at once (the page shows when it was made)
OVERVIEW_STALE_S = 300.0
WARM_FROM_GROUPS = 20_000  # a cluster with this many ready results has its overview computed at the api's start
DEFAULT_LIMIT, MAX_LIMIT = 200, 2000  # group rows (and open incidents) per overview
MAX_OFFSET = 10_000_000  # groups passed over: more than any cluster holds
MAX_QUERY_CHARS = 1000  # as the api's names (middleware.py)
LOG_ENDS_PER_READ = 20_000  # partitions per read of their log ends
RESULTS_PER_READ = 5_000  # stored results per read when ranking a cluster
STATES_PER_READ = 1_000  # groups per read of the evaluator's states
OVERVIEWS = web.AppKey("lagwatch_dashboard_overviews", SharedRecentResults)
WARMING = web.AppKey("lagwatch_dashboard_warming", asyncio.Task)
PAGE_HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}


def install(app: web.Application) -> None:
    app[OVERVIEWS] = SharedRecentResults(OVERVIEW_REUSE_S, OVERVIEW_STALE_S)
    app.add_routes(routes)
    app.on_startup.append(_start_warming)
    app.on_cleanup.append(_stop_warming)


async def _start_warming(app: web.Application) -> None:
    """A big cluster's overview is computed once at start, in the background: the first page an operator opens is
    then answered from it (and refreshed meanwhile) instead of waiting seconds for the cluster's ranking. A small
    one's is computed when asked: that takes less than a second."""
    app[WARMING] = asyncio.create_task(_warm(app))


async def _stop_warming(app: web.Application) -> None:
    app[WARMING].cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await app[WARMING]


async def _warm(app: web.Application) -> None:
    context = app[CONTEXT]
    try:
        for cluster in await context.clusters():
            if await reply(context.redis.hlen(keys.group_results(cluster))) >= WARM_FROM_GROUPS:
                await app[OVERVIEWS].get(cluster, functools.partial(_cluster_overview, context, cluster))
    except Exception as exc:  # Redis not answering yet: the first request computes it
        log.info("dashboard: no overview computed at start (%s)", exc)


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
    page = _page(request)
    context = request.app[CONTEXT]
    clusters = await context.clusters()
    cluster = request.query.get("cluster") or (clusters[0] if clusters else None)
    if cluster is None:
        shared = _no_cluster()
    else:
        await context.require_cluster(cluster)
        shared = await request.app[OVERVIEWS].get(cluster, lambda: _cluster_overview(context, cluster))
    body = await _shown(context, cluster or "", shared, page)  # no cluster: no rows to read
    return ok(request, "dashboard overview returned", clusters=clusters, cluster=cluster, **body)


@routes.get(named("/dashboard/api/group/{cluster}/{group}"))
@routes.post("/dashboard/api/group")
async def group_answer(request: web.Request) -> web.Response:
    (cluster, group, _), context = await named_group(request), request.app[CONTEXT]
    await context.require_cluster(cluster)
    now = await context.judging_clock(cluster)  # as the evaluator and the status route judge
    stored = await context.live_group(cluster, group, now)
    if stored is None:
        raise ApiError(404, "consumer group not found")
    body = await statuses.status_body(stored, now, context, only_bad_partitions=False)
    return ok(request, "dashboard group returned", status=group_detail(body, stored, context.config.storage.intervals))


async def _silences(context: ApiContext) -> list[dict]:
    """The silences that hold now or will (all clusters: a silence need not name one), soonest end first."""
    now = now_ms() / 1000
    held = [s for s in await SilenceStore(context.redis).all() if s.state(now) != EXPIRED]
    return [s.to_json(now) for s in sorted(held, key=lambda s: (s.starts_at > now, s.ends_at))]


@dataclass(frozen=True, slots=True)
class Page:
    q: str  # groups (and open incidents) whose group's name holds it, any case; all for ""
    limit: int  # rows at most, of groups and of open incidents each
    offset: int  # matching groups passed over, worst first: the page after `limit` rows is `offset=limit`
    incident_offset: int  # matching open incidents passed over, worst first (paged apart from the groups)


def _page(request: web.Request) -> Page:
    q = request.query.get("q", "")
    if len(q) > MAX_QUERY_CHARS:
        raise ApiError(400, f"q is longer than {MAX_QUERY_CHARS} characters")
    return Page(
        q,
        _whole_number(request, "limit", DEFAULT_LIMIT, MAX_LIMIT),
        _whole_number(request, "offset", 0, MAX_OFFSET),
        _whole_number(request, "incident_offset", 0, MAX_OFFSET),
    )


def _whole_number(request: web.Request, name: str, default: int, most: int) -> int:
    """The query parameter `name` (ASCII digits only: `int` takes other scripts' digits), `default` when absent."""
    raw = request.query.get(name)
    if raw is None:
        return default
    if not re.fullmatch(r"[0-9]{1,9}", raw) or int(raw) > most:
        raise ApiError(400, f"{name} must be a whole number from 0 to {most}")
    return int(raw)


@dataclass(frozen=True, slots=True)
class ClusterOverview:
    """What every request for a cluster's overview shares (within `OVERVIEW_REUSE_S`). No result and no log end is
    kept (they are the size of the fleet): the groups a request shows are read again."""

    generated_at: int
    ranking: Ranking
    incidents: dict[str, GroupState]  # the evaluator's state of each group with an open incident
    open_incidents: OpenIncidents  # as the overview lists them, worst first
    changes: list[dict]
    services: dict[str, int]  # instances of each of the cluster's services running (presence.py)


async def _cluster_overview(context: ApiContext, cluster: str) -> ClusterOverview:
    """Every group of the cluster ranked, in threads: the event loop keeps answering (`/healthz` above all)."""
    now = now_ms()
    history = StatusStore(context.redis, context.config.window().expire_group_ms)
    incidents = await _open_incidents(history, cluster)
    topics = await context.store.reads.list_topics(cluster)
    log_ends = await _log_ends(context, cluster, ((t, p) for t, n in topics.items() for p in range(n)))
    ranked = await _rank_stored(context, cluster, log_ends, topics)
    if ranked.strays:  # partitions past their topic's count, rare: their rows read their log ends too
        log_ends.update(await _log_ends(context, cluster, ranked.strays))
        add_strays(ranked, log_ends)
    del log_ends
    ranking = await asyncio.to_thread(Ranking.of, ranked)
    return ClusterOverview(
        now,
        ranking,
        incidents,
        await asyncio.to_thread(OpenIncidents.of, ranking, incidents),
        await history.recent_changes(cluster, RECENT_CHANGES_SHOWN),
        await running_counts(context.redis, cluster),
    )


async def _rank_stored(
    context: ApiContext, cluster: str, log_ends: dict[TopicPartition, int], topics: dict[str, int]
) -> Unranked:
    """The cluster's stored results ranked a slice at a time: the whole hash in one reply was the api's biggest
    allocation, and what it freed stayed the process's."""
    key, ranked = keys.group_results(cluster), Unranked()
    names = await reply(context.redis.hkeys(key))
    for i in range(0, len(names), RESULTS_PER_READ):
        some = names[i : i + RESULTS_PER_READ]
        stored = dict(zip(some, await reply(context.redis.hmget(key, some)), strict=True))
        await asyncio.to_thread(rank_results, stored, log_ends, topics, ranked)
    return ranked


async def _log_ends(
    context: ApiContext, cluster: str, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """The partitions' latest log ends (known and non-zero), read in slices: no one reply holds the event loop long."""
    ends: dict[TopicPartition, int] = {}
    remaining = iter(partitions)
    while wanted := list(itertools.islice(remaining, LOG_ENDS_PER_READ)):
        read = await context.store.reads.latest_broker_offsets(cluster, wanted)
        ends.update({tp: end for tp, end in read.items() if end})
    return ends


def _no_cluster() -> ClusterOverview:
    ranking = Ranking.of(Unranked())
    return ClusterOverview(now_ms(), ranking, {}, OpenIncidents.of(ranking, {}), [], {})


async def _shown(context: ApiContext, cluster: str, shared: ClusterOverview, page: Page) -> dict:
    """The overview of one request: the page's groups as rows (only these are read, decoded and have their
    sparklines read) and its open incidents (every one reachable, a page at a time), with the cluster's totals."""
    ranking, q, limit, start = shared.ranking, page.q, page.limit, page.offset
    matching = ranking.matching(q)
    passed = sum(1 for _ in itertools.islice(matching, start))
    names = list(itertools.islice(matching, limit))
    matched = len(ranking) if not q else passed + len(names) + sum(1 for _ in matching)
    rows = await _rows(context, cluster, shared, names)
    incidents = shared.open_incidents.matching(q)
    return {
        "generated_at": shared.generated_at,
        "groups": rows,
        "group_count": len(ranking),
        "status_counts": ranking.status_counts,
        "totallag": ranking.totallag,
        "matched": matched,
        "shown": len(rows),
        "truncated": start + len(rows) < matched,  # more groups match past these rows
        "limit": limit,
        "offset": start,
        "q": q,
        "incidents": incidents[page.incident_offset : page.incident_offset + limit],
        "incident_count": len(shared.open_incidents.rows),  # open in the cluster, whatever `q`
        "incident_matched": len(incidents),
        "incident_offset": page.incident_offset,
        "incidents_truncated": page.incident_offset + limit < len(incidents),  # more match past these
        "changes": shared.changes,
        "silences": await _silences(context),
        "services": shared.services,
    }


async def _rows(context: ApiContext, cluster: str, shared: ClusterOverview, names: list[str]) -> list[dict]:
    """The groups' rows, from their results and their partitions' log ends read now (a group deleted or unreadable
    since the ranking is left out: the next evaluation rewrites an unreadable one)."""
    if not names:
        return []
    raws = await reply(context.redis.hmget(keys.group_results(cluster), names))
    lines = await reply(context.redis.hmget(keys.group_sparklines(cluster), names))
    results = [decode_result(group, raw) if raw is not None else None for group, raw in zip(names, raws, strict=True)]
    partitions = {(p.topic, p.partition) for result in results if result is not None for p in result.partitions}
    log_ends = await _log_ends(context, cluster, partitions)
    now, intervals, rows = shared.generated_at, context.config.storage.intervals, []
    for result, line in zip(results, lines, strict=True):
        if result is not None:
            state = shared.incidents.get(result.group)
            incident = state.incident if state else None
            rows.append(group_row(result, log_ends, sparkline_points(line), now, intervals, incident))
    return rows


async def _open_incidents(history: StatusStore, cluster: str) -> dict[str, GroupState]:
    """group -> the evaluator's state of it, for the groups with an open incident."""
    bad = sorted(g for g, s in (await history.known_groups(cluster)).items() if s not in QUIET)
    open_ones = {}
    for i in range(0, len(bad), STATES_PER_READ):  # slices: one read of thousands held the event loop too long
        some = bad[i : i + STATES_PER_READ]
        states = await history.states(cluster, some)
        open_ones.update({g: state for g, state in zip(some, states, strict=True) if state.incident.incident_id})
    return open_ones
