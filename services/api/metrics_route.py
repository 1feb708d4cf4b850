"""`GET /metrics` in the api process: the api's own series (its request histogram), and the scrape of Redis, rendered
by a worker process (`scrape_process.py`, which renders with `metrics.py`), concurrent scrapes sharing one render
(`shared_render.py`); the body is streamed from the file the worker wrote, in chunks.
"""

from __future__ import annotations

import os
from typing import BinaryIO

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from lagwatch.services.api.scrape_process import ScrapeWorker
from lagwatch.services.api.shared_render import SharedRender
from lagwatch.shared.runtime.config import Config

STREAM_CHUNK = 4 << 20  # bytes written to the response at a time
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class ApiMetrics:
    """This process's request histogram, plus the Redis scrape (done by a worker process, see `scrape_process`)."""

    def __init__(self, config: Config) -> None:
        self.registry = CollectorRegistry()
        self.request_seconds = Histogram(
            "lagwatch_api_request_seconds",
            "Time to answer an api request, by route template",
            ["route", "method"],
            buckets=REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.token_uses = Counter(
            "lagwatch_api_token_uses",
            "Requests carrying an accepted bearer token, by which: current (api.token) or previous "
            "(api.previous-tokens: a rotation is over once this stays flat)",
            ["token"],
            registry=self.registry,
        )
        for which in ("current", "previous"):  # both from the start: an increase from nothing is not lost
            self.token_uses.labels(which)
        self.renders = Counter(
            "lagwatch_api_metrics_renders",
            "Renders of the /metrics body started (scrapes asking while one runs share it)",
            registry=self.registry,
        )
        self.worker = ScrapeWorker(config)
        self.shared = SharedRender(self._render)

    async def scrape(self) -> tuple[BinaryIO, bytes]:
        """The scrape's body (an open file: the caller closes it) and this process's own series."""
        scraped = await self.shared.body()
        return scraped, generate_latest(self.registry)

    async def _render(self) -> str:
        self.renders.inc()
        return await self.worker.render()

    async def close(self) -> None:
        await self.shared.close()
        await self.worker.close()


METRICS = web.AppKey("lagwatch_api_metrics", ApiMetrics)


async def handle_metrics(request: web.Request) -> web.StreamResponse:
    scraped, own = await request.app[METRICS].scrape()
    with scraped:
        response = web.StreamResponse(headers={"Content-Type": CONTENT_TYPE_LATEST})
        response.content_length = os.fstat(scraped.fileno()).st_size + len(own)
        await response.prepare(request)
        if request.method != "HEAD":  # a streamed body is not held back for HEAD: sent, it breaks keep-alive
            while chunk := scraped.read(STREAM_CHUNK):
                await response.write(chunk)
            await response.write(own)
        await response.write_eof()
    return response
