"""The `/metrics` scrape of Redis runs in a worker process, so a big scrape never stalls the api's event loop.

A scrape is CPU work in Python: on the event loop it would hold every other request, in a thread it would still fight
them for the GIL. One spawned worker process does it on another core; it is started on the first scrape and kept,
and one that dies is replaced on the next scrape.

The body does not travel back through the pool's pipe (pickling it through a 64 KiB pipe costs more than rendering
it): the worker writes it to a file in a private directory (in RAM when /dev/shm has room) and answers with its
name; the api opens it (once for each scrape sharing the render, `shared_render.py`), unlinks it and streams it.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import shutil
import tempfile
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from lagwatch.shared.runtime.config import Config
from lagwatch.shared.runtime.redis_client import connect

RAM_DIR = Path("/dev/shm")
RAM_DIR_MIN_FREE = 1 << 30  # /dev/shm is used only with this much room (Docker gives containers 64 MB of it)


def body_dir() -> str | None:
    """Where the bodies go: RAM when there is room, else the system's temporary directory (None)."""
    try:
        stat = os.statvfs(RAM_DIR)
    except OSError:
        return None
    return str(RAM_DIR) if stat.f_bavail * stat.f_frsize >= RAM_DIR_MIN_FREE else None


def scrape_in_worker(config: Config, path: str) -> int:
    """Runs in the worker process (a plain function: it is pickled by name): renders the scrape into `path`."""
    return asyncio.run(_scrape_into(config, path))


async def _scrape_into(config: Config, path: str) -> int:
    """The body never is the result of `asyncio.run`: in the main thread Python 3.11's runner formats a repr of its
    task while restoring SIGINT's handler, and the task's repr holds its result's (slow for a large body, twice)."""
    from lagwatch.services.api.metrics import scrape_results

    redis = connect(config.redis)
    try:
        body = await scrape_results(config, redis)
    finally:
        await redis.aclose()
    with open(path, "wb") as out:
        out.write(body)
    return len(body)


class ScrapeWorker:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._pool: ProcessPoolExecutor | None = None
        self._dir: str | None = None
        self._names = itertools.count()

    async def render(self) -> str:
        """One scrape's body, rendered into a file: its path (the caller opens it as often as it needs to, then
        unlinks it)."""
        if self._pool is None:
            # spawn, not fork: forking a process that runs an event loop and threads copies their locks' state
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="lagwatch-scrape-", dir=body_dir())
        path = os.path.join(self._dir, f"scrape-{next(self._names)}")
        job: Future[int] | None = None
        try:
            job = self._pool.submit(scrape_in_worker, self.config, path)  # raises too once the worker died idle
            await asyncio.wrap_future(job)
        except BaseException as exc:
            if isinstance(exc, BrokenProcessPool):
                self._pool = None  # the worker died (killed, out of memory): a new one serves the next scrape
            if job is not None:  # given up on (request timeout, client gone): the body goes once the worker wrote it
                job.add_done_callback(lambda _: Path(path).unlink(missing_ok=True))
            raise
        return path

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
