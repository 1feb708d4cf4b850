"""Every answer is JSON in Burrow's envelope, whatever goes wrong; and every request is timed by route.

Unknown route 404, wrong method 405 (OPTIONS: 200 with `Allow`), a malformed path 400 (checked before any handler
runs, so handlers only see clean names); Redis unreachable or read-only, or a request over `api.request-timeout`:
503 (the client may retry); anything else 500, the traceback to the log, never to the client.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from urllib.parse import unquote_to_bytes

from aiohttp import web
from redis.exceptions import ClusterDownError, ReadOnlyError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from lagwatch.services.api.context import CONTEXT
from lagwatch.services.api.metrics_route import METRICS
from lagwatch.services.api.responses import ApiError, error_response

log = logging.getLogger(__name__)
MAX_NAME_CHARS = 1000  # far above Kafka's 249 for topics; group names have no limit in Kafka but need one here
LONG_GROUP_ROUTES = "POST /api/v1/consumer-groups/{status,lag,detail,delete}"  # group_routes.py: any name
BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
# ReadOnlyError: a write reached a replica, as during a failover until the connections move to the new primary;
# a ConnectionError includes BusyLoadingError (Redis still loading its data)
REDIS_UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, ClusterDownError, TryAgainError, ReadOnlyError)
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def check_path(request: web.Request) -> None:
    raw = request.rel_url.raw_path
    if BAD_ESCAPE.search(raw):
        raise ApiError(400, "malformed path: bad percent-encoding")
    try:
        unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "malformed path: not UTF-8") from None
    for name, value in request.match_info.items():
        if len(value) > MAX_NAME_CHARS:
            hint = f" ({LONG_GROUP_ROUTES} take the name in a JSON body)" if name == "group" else ""
            raise ApiError(400, f"malformed path: {name} is longer than {MAX_NAME_CHARS} characters{hint}")


@web.middleware
async def errors_as_json(request: web.Request, handler) -> web.StreamResponse:
    try:
        check_path(request)
        async with asyncio.timeout(request.app[CONTEXT].config.api.request_timeout):
            return await handler(request)
    except ApiError as exc:
        return error_response(request, exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise  # redirects and the like pass through
        return _from_http_exception(request, exc)
    except REDIS_UNAVAILABLE as exc:
        log.warning("api: %s %s: Redis unavailable (%s)", request.method, request.path, exc)
        return error_response(request, ApiError(503, "storage unavailable: Redis cannot be reached"))
    except TimeoutError:
        log.warning("api: %s %s: no answer within api.request-timeout", request.method, request.path)
        return error_response(request, ApiError(503, "request timed out"))
    except Exception:
        log.exception("api: %s %s failed", request.method, request.path)
        return error_response(request, ApiError(500, "internal server error"))


def _from_http_exception(request: web.Request, exc: web.HTTPException) -> web.Response:
    if isinstance(exc, web.HTTPMethodNotAllowed):
        if request.method == "OPTIONS":  # as Burrow's router (httprouter's HandleOPTIONS): the route's methods
            return web.Response(headers={"Allow": ", ".join(sorted({*exc.allowed_methods, "OPTIONS"}))})
        allowed = ", ".join(sorted(exc.allowed_methods))
        message = f"method {request.method} not allowed (allowed: {allowed})"
        return error_response(request, ApiError(405, message, headers={"Allow": allowed}))
    if isinstance(exc, web.HTTPNotFound):
        return error_response(request, ApiError(404, f"no such route: {request.method} {request.path}"))
    return error_response(request, ApiError(exc.status, exc.reason))


@web.middleware
async def trailing_slash(request: web.Request, handler) -> web.StreamResponse:
    """As Burrow's router (httprouter's RedirectTrailingSlash): a path that matches no route but would without its
    trailing slash is redirected there, 301 for GET and 307 (same method) for the others, the query kept."""
    raw = request.rel_url.raw_path
    if request.match_info.http_exception is None or len(raw) < 2 or not raw.endswith("/"):
        return await handler(request)
    target = request.rel_url.with_path(raw[:-1], encoded=True)
    match = await request.app.router.resolve(request.clone(rel_url=target))
    if match.http_exception is not None:
        return await handler(request)
    query = request.rel_url.raw_query_string
    redirect = web.HTTPMovedPermanently if request.method == "GET" else web.HTTPTemporaryRedirect
    raise redirect(location=raw[:-1] + (f"?{query}" if query else ""))


@web.middleware
async def timed(request: web.Request, handler) -> web.StreamResponse:
    """Observe each request's duration under its route template (bounded label values: never the raw path)."""
    started = time.perf_counter()
    try:
        return await handler(request)
    finally:
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        method = request.method if request.method in KNOWN_METHODS else "other"
        request.app[METRICS].request_seconds.labels(route, method).observe(time.perf_counter() - started)
