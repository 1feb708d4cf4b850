"""Slow clients cannot hold the api's connections: one that opens a connection and sends nothing, or drips a
request's headers a byte at a time (slow-loris), is closed `KEEPALIVE_TIMEOUT_S` after it connected (aiohttp's
AppRunner default, 3630 s, let a few thousand such connections use up the process's file descriptors for an hour,
after which no request was answered). A slow body is bounded by `api.request-timeout` (a 503).
The timeout is lowered to 1 s here; the api keeps answering other clients throughout.
"""

import asyncio
import contextlib
import time

from lagwatch.shared.runtime import health_server
from tests.services.api.test_hardening_http_parser import GOOD, api_on


async def closed_after(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, drip: bytes) -> float:
    """Send `drip` a byte every 0.2 s until the server closes the connection; seconds it took (at most 10)."""
    started = time.monotonic()
    for byte in [drip[i : i + 1] for i in range(len(drip))] or [b""] * 50:
        with contextlib.suppress(ConnectionError):
            writer.write(byte)
        with contextlib.suppress(TimeoutError):
            if await asyncio.wait_for(reader.read(1000), 0.2) == b"":
                return time.monotonic() - started
    return 10.0


async def test_idle_and_header_dripping_connections_are_closed(redis_server, monkeypatch):
    monkeypatch.setattr(health_server, "KEEPALIVE_TIMEOUT_S", 1.0)
    async with api_on(redis_server.url) as api:
        idle = await asyncio.open_connection("127.0.0.1", api.port)
        dripping = await asyncio.open_connection("127.0.0.1", api.port)
        request = b"GET /v3/kafka HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 50
        waited = await asyncio.gather(closed_after(*idle, b""), closed_after(*dripping, request))
        assert all(seconds < 4 for seconds in waited), waited

        reader, writer = await asyncio.open_connection("127.0.0.1", api.port)
        writer.write(GOOD)
        assert (await asyncio.wait_for(reader.read(), 5)).startswith(b"HTTP/1.1 200")
        for _, w in (idle, dripping, (reader, writer)):
            w.close()
