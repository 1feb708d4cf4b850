"""Issue 18 row 14 (the rest): requests aiohttp's HTTP parser refuses before the application sees them.

A request with a method HTTP registers (PURGE, PROPFIND, ...) that no route takes gets the api's 405 JSON error like
any other. Requests the parser itself refuses (a method outside llhttp's table of registered methods, such as FOO,
or not a token at all; a request line or header over 8190 bytes; too many headers; an unknown HTTP version) get
aiohttp's short plain-text 400 and a closed connection: aiohttp answers them before any request object, middleware
or route exists and offers no public hook to shape that answer (see
docs/security.md). What holds, and is checked here: a 400, no traceback and no more than a short excerpt of the
input in the answer, one WARNING line in the log (never an ERROR with a traceback: aiohttp's own, which
shared/runtime/http_client_errors.py shortens), and the server goes on answering.
"""

import asyncio
import contextlib
import json
import logging
import socket

import pytest

from lagwatch.services.api.service import ApiServer
from lagwatch.shared.runtime.config import load_config
from tests.kafka_helpers import running

GOOD = b"GET /v3/kafka HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


@contextlib.asynccontextmanager
async def api_on(redis_url):
    async with running(ApiServer(load_config(env={"REDIS_URL": redis_url}), port=0)) as server:
        await asyncio.wait_for(server.started.wait(), 10)
        yield server


def exchange(port: int, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes; (status, headers, body) of the answer, read until the server closes."""
    head, _, body = read_all(port, data).partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in header_lines)}
    return int(status_line.split()[1]), headers, body


@pytest.mark.parametrize("method", [b"PURGE", b"PROPFIND", b"MKCOL"])
async def test_a_well_formed_but_unknown_method_gets_a_405_json_error(redis_server, method):
    async with api_on(redis_server.url) as api:
        request = method + b" /v3/kafka HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        status, headers, body = await asyncio.to_thread(exchange, api.port, request)
    assert (status, headers["content-type"].split(";")[0], headers["allow"]) == (405, "application/json", "GET, HEAD")
    assert json.loads(body)["error"] is True


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"G@T /v3/kafka HTTP/1.1\r\nHost: x\r\n\r\n",
        b"FOO /v3/kafka HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /v3/kafka/" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /v3/kafka HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 20_000 + b"\r\n\r\n",
        b"GET /v3/kafka HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(200)) + b"\r\n",
        b"GET /v3/kafka HTTP/9.9\r\nHost: x\r\n\r\n",
    ],
    ids=[
        "method-not-a-token",
        "method-not-in-llhttp",
        "path-over-8190-bytes",
        "header-over-8190-bytes",
        "200-headers",
        "http-9.9",
    ],
)
async def test_what_the_http_parser_refuses_is_a_short_400_and_the_api_keeps_answering(
    redis_server, request_bytes, caplog
):
    async with api_on(redis_server.url) as api:
        with caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
            status, _, body = await asyncio.to_thread(exchange, api.port, request_bytes)
        assert status == 400
        assert b"Traceback" not in body and len(body) < 512  # an excerpt at most, never the whole input
        good_status, _, good_body = await asyncio.to_thread(exchange, api.port, GOOD)
    assert (good_status, json.loads(good_body)["error"]) == (200, False)
    # in the log: one WARNING line at most (aiohttp logs an unknown first method at DEBUG), never a traceback
    logged = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert all(r.levelno <= logging.WARNING and not r.exc_info and len(r.getMessage()) < 400 for r in logged), [
        (r.levelname, r.getMessage()[:400], bool(r.exc_info)) for r in logged
    ]


async def test_head_on_the_streamed_metrics_sends_no_body_so_the_connection_stays_usable(redis_server):
    """HEAD /metrics then GET /healthz on one kept-alive connection: the second answer follows the first's headers."""
    async with api_on(redis_server.url) as api:
        pipelined = (
            b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        answer = await asyncio.to_thread(read_all, api.port, pipelined)
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"content-length" in head.lower()
    assert rest.startswith(b"HTTP/1.1 200"), rest[:80]
    assert b'"alive"' in rest


def read_all(port: int, data: bytes) -> bytes:
    """Send raw bytes; everything answered until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer
