"""Burrow's `general.access-control-allow-origin` (`api.access-control-allow-origin`): the header on every answer, so a
dashboard served from another origin may read the api. As Burrow: reads only; a preflight names no allowed method
or header, so the token-guarded routes stay out of a foreign page's reach.
"""

from __future__ import annotations

from aiohttp import web

ALLOW_ORIGIN = "Access-Control-Allow-Origin"


def install(app: web.Application, origin: str) -> None:
    """Add the header to every response of `app` (errors, the dashboard and /metrics included) when `origin` is set."""
    if not origin:
        return

    async def add_header(request: web.Request, response: web.StreamResponse) -> None:
        response.headers[ALLOW_ORIGIN] = origin

    app.on_response_prepare.append(add_header)
