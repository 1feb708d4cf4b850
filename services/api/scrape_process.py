"""The `/metrics` scrape of Redis runs in a worker process, so a big scrape never stalls the api's event loop.

A scrape is CPU work in Python: on the event loop it would hold every other request, in a thread it would still fight
them for the GIL. One spawned worker process does it on another core; it is started on the first scrape and kept,
and one that dies is replaced on the next scrape.

The body does not travel back through the pool's pipe (pickling it through a 64 KiB pipe costs more than rendering
it): the worker writes it to a file in a private directory (in RAM when /dev/shm has room) and answers with its
name; the api opens it (once for each scrape sharing the render, `shared_render.py`), unlinks it and streams it.
The worker holds no body in memory: it writes the body as it goes, and spools what the next scrape may reuse (a quiet
cluster's lines, `metrics.RenderedGroups`) to files in the system's temporary directory, on disk as they are the size
of a body; both directories go when the worker closes.
"""

from __future__ import annotations

import asyncio
import gc
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


def scrape_in_worker(config: Config, path: str, spool_dir: str) -> int:
    """Runs in the worker process (a plain function: it is pickled by name): renders the scrape into `path`,
    keeping what the next scrape may reuse under `spool_dir`. The garbage collector waits meanwhile: a render makes
    millions of short-lived lists (freed as they go), and the collections they trigger walked every object kept, a
    fifth of the render's time."""
    gc.disable()
    try:
        return asyncio.run(_scrape_into(config, path, spool_dir))
    finally:
        gc.enable()


async def _scrape_into(config: Config, path: str, spool_dir: str) -> int:
    from lagwatch.services.api.metrics import scrape_into

    redis = connect(config.redis)
    try:
        with open(path, "wb", buffering=0) as out:  # unbuffered: spooled blocks are copied into it by the kernel
            await scrape_into(config, redis, out, spool_dir)
            return out.tell()
    finally:
        await redis.aclose()


class ScrapeWorker:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._pool: ProcessPoolExecutor | None = None
        self._dir: str | None = None
        self._spool_dir: str | None = None  # the worker's reusable lines: on disk, as they are the size of a body
        self._names = itertools.count()

    async def render(self) -> str:
        """One scrape's body, rendered into a file: its path (the caller opens it as often as it needs to, then
        unlinks it)."""
        if self._pool is None:
            # spawn, not fork: forking a process that runs an event loop and threads copies their locks' state
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="lagwatch-scrape-", dir=body_dir())
        if self._spool_dir is None:
            self._spool_dir = tempfile.mkdtemp(prefix="lagwatch-scrape-spool-")
        path = os.path.join(self._dir, f"scrape-{next(self._names)}")
        job: Future[int] | None = None
        try:
            # raises too once the worker died idle
            job = self._pool.submit(scrape_in_worker, self.config, path, self._spool_dir)
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
        for directory in (self._dir, self._spool_dir):
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)
        self._dir = self._spool_dir = None
