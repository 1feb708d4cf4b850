"""Where a service's HTTP server starts listening: one place that turns a failed bind into a clear error.

`lagwatch run` checks the address before the service connects to anything, but a port can be taken between that
check and the bind (another process picked it meanwhile): the bind's own failure then says the same, not a
traceback from deep in the start-up."""

from __future__ import annotations

import os
import ssl

from aiohttp import web


class ListenError(Exception):
    """The server cannot listen where it is told (a port in use, an address not this machine's)."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        super().__init__(f"cannot listen on {host}:{port}: {reason}")
        self.reason = reason


async def listen(runner: web.AppRunner, host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> int:
    """Serve `runner` on host:port (HTTPS with `ssl_context`); the port it listens on (the one the system chose when
    `port` is 0)."""
    try:
        await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()
    except OSError as exc:  # asyncio words it "error while attempting to bind on address ...": the system's words
        raise ListenError(host, port, os.strerror(exc.errno) if exc.errno else str(exc)) from None
    bound: int = runner.addresses[0][1]
    return bound
