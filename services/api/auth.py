"""Bearer-token guard for the mutating routes (DELETE a group).

`api.token` empty means mutations are switched off altogether (403), so a deployment that never set a token cannot
have its groups deleted by anyone who reaches the port. Tokens are compared in constant time.
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import Awaitable, Callable

from aiohttp import web

from lagwatch.services.api.context import CONTEXT
from lagwatch.services.api.responses import ApiError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
REALM = 'Bearer realm="lagwatch"'


def check_token(authorization: str | None, token: str) -> None:
    """Raise the ApiError a request with this Authorization header deserves; return when it may mutate."""
    if not token:
        raise ApiError(403, "mutations are disabled: no api.token is configured")
    scheme, _, given = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise ApiError(401, "a bearer token is required", headers={"WWW-Authenticate": REALM})
    # surrogateescape: aiohttp decodes header bytes that way, so any header round-trips to its bytes
    if not hmac.compare_digest(given.strip().encode("utf-8", "surrogateescape"), token.encode()):
        raise ApiError(401, "invalid bearer token", headers={"WWW-Authenticate": f'{REALM}, error="invalid_token"'})


def has_token(request: web.Request) -> bool:
    """Whether the request carries the configured token (for what open routes show to token holders only)."""
    try:
        check_token(request.headers.get("Authorization"), request.app[CONTEXT].config.api.token)
    except ApiError:
        return False
    return True


def requires_token(handler: Handler) -> Handler:
    """Decorate a handler so it only runs for requests carrying the configured token."""

    @functools.wraps(handler)
    async def guarded(request: web.Request) -> web.StreamResponse:
        check_token(request.headers.get("Authorization"), request.app[CONTEXT].config.api.token)
        return await handler(request)

    return guarded
