"""The `/metrics` scrape of Redis runs in a worker process, so a big scrape never stalls the api's event loop.

A scrape is CPU work in Python (parsing the ready results and rendering ~430k samples for 100k partitions: most of a
second on a small machine). Done on the event loop it would hold every other request for that long; in a thread it
would still fight them for the GIL. One spawned worker
process does it on another core; the api only waits for its bytes. The worker is started on the first scrape
and kept; one that dies is replaced on the next scrape.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from lagwatch.shared.config import Config


def scrape_in_worker(config: Config) -> bytes:
    """Runs in the worker process (a plain function: it is pickled by name)."""
    from lagwatch.services.api.metrics import scrape

    return asyncio.run(scrape(config))


class ScrapeWorker:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._pool: ProcessPoolExecutor | None = None

    async def scrape(self) -> bytes:
        if self._pool is None:
            # spawn, not fork: forking a process that runs an event loop and threads copies their locks' state
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, scrape_in_worker, self.config)
        except BrokenProcessPool:
            self._pool = None  # the worker died (killed, out of memory): a new one serves the next scrape
            raise

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)
