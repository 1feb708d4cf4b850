"""Burrow's response envelope: every JSON body carries `error`, `message` and `request` {`url`, `host`}, errors
(`ApiError`, turned into an answer by the middleware) included, so clients parse one shape whatever happened.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

from aiohttp import web

HOSTNAME = socket.gethostname()  # Burrow reports the responding host's name, not the Host header


class ApiError(Exception):
    """An answer other than success: its HTTP status, message, extra body fields and headers."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        fields: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.fields = dict(fields or {})
        self.headers = dict(headers or {})


def envelope(request: web.Request, message: str, *, error: bool = False, **fields: Any) -> dict[str, Any]:
    return {"error": error, "message": message, **fields, "request": {"url": request.path, "host": HOSTNAME}}


def ok(request: web.Request, message: str, *, http_status: int = 200, **fields: Any) -> web.Response:
    """`error: false`; Burrow answers an unknown group's status that way too, with a 404 (`http_status`)."""
    return web.json_response(envelope(request, message, **fields), status=http_status)


def error_response(request: web.Request, exc: ApiError) -> web.Response:
    body = envelope(request, exc.message, error=True, **exc.fields)
    return web.json_response(body, status=exc.status, headers=exc.headers)
