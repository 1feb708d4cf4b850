"""Bearer-token guard for the mutating routes. An empty `api.token` switches mutations off (403); tokens are compared in
constant time; during a rotation `api.previous-tokens` are accepted too, and `lagwatch_api_token_uses_total{token}`
says when no client uses an old one any more.
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import Awaitable, Callable

from aiohttp import web

from lagwatch.services.api.context import CONTEXT
from lagwatch.services.api.metrics_route import METRICS
from lagwatch.services.api.responses import ApiError
from lagwatch.shared.runtime.config import ApiConfig

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
REALM = 'Bearer realm="lagwatch"'


def check_token(authorization: str | None, api: ApiConfig) -> str:
    """Raise the ApiError a request with this Authorization header deserves; when it may mutate, return which token
    it carries: "current" (`api.token`) or "previous" (one of `api.previous-tokens`)."""
    if not api.token:
        raise ApiError(403, "mutations are disabled: no api.token is configured")
    scheme, _, given = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise ApiError(401, "a bearer token is required", headers={"WWW-Authenticate": REALM})
    # surrogateescape: aiohttp decodes header bytes that way, so any header round-trips to its bytes
    presented = given.strip().encode("utf-8", "surrogateescape")
    if hmac.compare_digest(presented, api.token.encode()):
        return "current"
    # every previous token compared, whichever matches: the time taken says nothing of which one did
    if sum(hmac.compare_digest(presented, t.encode()) for t in api.previous_tokens):
        return "previous"
    raise ApiError(401, "invalid bearer token", headers={"WWW-Authenticate": f'{REALM}, error="invalid_token"'})


def _accepted(request: web.Request) -> None:
    """Raise unless the request carries an accepted token; count which one it was."""
    which = check_token(request.headers.get("Authorization"), request.app[CONTEXT].config.api)
    if (metrics := request.app.get(METRICS)) is not None:
        metrics.token_uses.labels(which).inc()


def has_token(request: web.Request) -> bool:
    """Whether the request carries an accepted token (for what open routes show to token holders only)."""
    try:
        _accepted(request)
    except ApiError:
        return False
    return True


def requires_token(handler: Handler) -> Handler:
    @functools.wraps(handler)
    async def guarded(request: web.Request) -> web.StreamResponse:
        _accepted(request)
        return await handler(request)

    return guarded
