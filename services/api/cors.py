"""Burrow's `general.access-control-allow-origin` (`api.access-control-allow-origin`): the header
`Access-Control-Allow-Origin` on every answer, so that a dashboard served from another origin (BurrowUI,
burrow-dashboard) may read the api from a browser.

As Burrow: reads only. A browser asks before a cross-origin DELETE or a request with `Authorization` (a preflight
OPTIONS), and the api's answer to it names no allowed method or header, so the token-guarded routes stay out of a
foreign page's reach.
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
