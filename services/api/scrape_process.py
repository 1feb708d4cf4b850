"""The `/metrics` scrape of Redis runs in a worker process, so a big scrape never stalls the api's event loop.

A scrape is CPU work in Python: on the event loop it would hold every other request, in a thread it would still fight
them for the GIL. One worker process does it on another core; it is started on the first scrape and kept, and one
that dies is replaced on the next scrape. It is a plain child process spoken to through its standard input and output
(a pickled request, then a pickled answer: the body's size or the exception), not a multiprocessing pool: a pool's
spawned process re-imports the api's main module, and its queues' semaphores start a third process (the resource
tracker), each a Python interpreter's memory; the worker imports what rendering needs only (`metrics.py`).

The body does not travel back through the worker's pipe (sending it through a 64 KiB pipe costs more than rendering
it): the worker writes it to a file in a private directory (in RAM when /dev/shm has room) and answers with its
size; the api opens it (once for each scrape sharing the render, `shared_render.py`), unlinks it and streams it.
The worker holds no body in memory: it writes the body as it goes, and spools what the next scrape may reuse (a quiet
cluster's lines, `metrics.RenderedGroups`) to files in the system's temporary directory, on disk as they are the size
of a body; both directories go when the worker closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import itertools
import os
import pickle
import shutil
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

from lagwatch.shared.runtime.config import Config
from lagwatch.shared.runtime.redis_client import connect

RAM_DIR = Path("/dev/shm")
RAM_DIR_MIN_FREE = 1 << 30  # /dev/shm is used only with this much room (Docker gives containers 64 MB of it)
FRAME = struct.Struct("!I")  # a message's length, before its pickle
WORKER = "from lagwatch.services.api.scrape_process import serve; serve()"
CLOSE_TIMEOUT_S = 10.0  # a worker still rendering when the api stops is killed after this


class WorkerDied(RuntimeError):
    """The worker process exited (killed, out of memory): a new one serves the next scrape."""


def body_dir() -> str | None:
    """Where the bodies go: RAM when there is room, else the system's temporary directory (None)."""
    try:
        stat = os.statvfs(RAM_DIR)
    except OSError:
        return None
    return str(RAM_DIR) if stat.f_bavail * stat.f_frsize >= RAM_DIR_MIN_FREE else None


def serve(source: BinaryIO | None = None, answers: BinaryIO | None = None) -> None:
    """The worker process: the api's configuration first, then requests (a body's path and the spool directory),
    each answered in turn, until the api closes its end. Its standard output carries the answers only (a stray
    print would corrupt them): anything else written there goes to its standard error."""
    source = source or sys.stdin.buffer
    if answers is None:
        answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    config = _read(source)
    while (request := _read(source)) is not None:
        try:
            answer: tuple[str, Any] = ("ok", scrape_in_worker(config, *request))
        except Exception as exc:  # the scrape fails in the api with it, as it would have there
            answer = ("error", exc)
        _write(answers, answer)


def _read(source: BinaryIO) -> Any:
    """The next message, None once the other end is closed."""
    head = source.read(FRAME.size)
    if len(head) < FRAME.size:
        return None
    return pickle.loads(source.read(FRAME.unpack(head)[0]))


def _write(out: BinaryIO, answer: tuple[str, Any]) -> None:
    try:
        data = pickle.dumps(answer)
    except Exception:  # an exception that does not pickle: its text, rather than the worker's end
        data = pickle.dumps(("error", RuntimeError(repr(answer[1]))))
    out.write(FRAME.pack(len(data)) + data)
    out.flush()


def scrape_in_worker(config: Config, path: str, spool_dir: str) -> int:
    """Runs in the worker process: renders the scrape into `path`, keeping what the next scrape may reuse under
    `spool_dir`. The garbage collector waits meanwhile: a render makes millions of short-lived lists (freed as they
    go), and the collections they trigger walked every object kept, a fifth of the render's time."""
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


def _drop_body(path: str, job: asyncio.Future[int]) -> None:
    """A scrape given up on: its body, once written, goes; how its render ended is nobody's to hear any more."""
    Path(path).unlink(missing_ok=True)
    if not job.cancelled():
        job.exception()  # retrieved: not logged as never retrieved


class ScrapeWorker:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._process: asyncio.subprocess.Process | None = None
        self._turn = asyncio.Lock()  # one request at a time on the worker's pipes, answered in order
        self._dir: str | None = None
        self._spool_dir: str | None = None  # the worker's reusable lines: on disk, as they are the size of a body
        self._names = itertools.count()

    async def render(self) -> str:
        """One scrape's body, rendered into a file: its path (the caller opens it as often as it needs to, then
        unlinks it)."""
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="lagwatch-scrape-", dir=body_dir())
        if self._spool_dir is None:
            self._spool_dir = tempfile.mkdtemp(prefix="lagwatch-scrape-spool-")
        path = os.path.join(self._dir, f"scrape-{next(self._names)}")
        # a task of its own: a scrape given up on (request timeout, client gone) still reads its answer off the
        # pipe, so the next scrape reads its own; its body goes once the worker wrote it
        job = asyncio.ensure_future(self._exchange(path, self._spool_dir))
        try:
            await asyncio.shield(job)
        except BaseException:
            job.add_done_callback(functools.partial(_drop_body, path))
            raise
        return path

    async def _exchange(self, path: str, spool_dir: str) -> int:
        async with self._turn:
            process = await self._started()
            assert process.stdin is not None and process.stdout is not None
            try:
                data = pickle.dumps((path, spool_dir))
                process.stdin.write(FRAME.pack(len(data)) + data)
                await process.stdin.drain()
                head = await process.stdout.readexactly(FRAME.size)
                status, value = pickle.loads(await process.stdout.readexactly(FRAME.unpack(head)[0]))
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                self._process = None  # the next scrape starts a new worker
                raise WorkerDied(f"the scrape process exited ({process.returncode})") from exc
        if status == "error":
            raise value
        return int(value)

    async def _started(self) -> asyncio.subprocess.Process:
        if self._process is None:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-c", WORKER, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
            )
            assert process.stdin is not None
            data = pickle.dumps(self.config)
            process.stdin.write(FRAME.pack(len(data)) + data)
            self._process = process
        return self._process

    async def close(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            assert process.stdin is not None
            process.stdin.close()  # the worker ends at its next request's read
            try:
                await asyncio.wait_for(process.wait(), CLOSE_TIMEOUT_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        for directory in (self._dir, self._spool_dir):
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)
        self._dir = self._spool_dir = None
