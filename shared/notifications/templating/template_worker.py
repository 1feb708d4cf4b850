"""Templates are compiled and rendered in worker processes, never in the process that serves requests or events.

A template is code a token holder wrote: loops, huge arithmetic and filters (`center(10**9)`) cost CPU and memory,
and Jinja2 evaluates constant expressions while compiling. In a worker process that work never holds the caller's
event loop (a call blocks a thread: `asyncio.to_thread` it), and has a wall-clock budget (`timeout_s`: past it the
worker is killed) and a memory budget (`memory_bytes` beyond the worker's own, RLIMIT_AS: past it the worker is
replaced). A template over either budget is not rendered again for `quarantine_s` (OverBudget at once): each such
render costs a worker's whole budget, and a few hostile subscriptions would otherwise keep the shared pool busy.

`WORKERS` is the process's pool (started on first use; spawned, not forked: the services run threads).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import multiprocessing
import queue
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from lagwatch.shared.notifications.templating.templates import MAX_OUTPUT_CHARS, TemplateProblem

log = logging.getLogger(__name__)
TIMEOUT_S = 1.0  # a real template renders in a millisecond
MEMORY_BYTES = 256 * 1024 * 1024
START_TIMEOUT_S = 60.0  # importing Jinja2 in a fresh process on a loaded machine
QUARANTINE_S = 600.0  # a template over its time or memory budget is not rendered again for this long
MAX_QUARANTINED = 100_000  # sources remembered (by hash); the oldest are forgotten beyond this


class OverBudget(TemplateProblem):
    """The template ran over its time or memory budget (or killed its worker): a costly failure."""


def _serve(conn: Connection, memory_bytes: int) -> None:
    """The worker's loop: ("check", source) or ("render", source, context, max_chars) -> ("ok", value) | ("error",
    message) | ("retired", message): the last after a MemoryError (its heap may be left fragmented), when it
    exits. It exits too when the pipe closes."""
    from lagwatch.shared.notifications.templating import templates

    _limit_memory(memory_bytes)
    conn.send(("ready", None))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        op, *args = request
        try:
            if op == "check":
                templates.compile_template(*args)
                conn.send(("ok", None))
            else:
                conn.send(("ok", templates.render_limited(*args)))
        except TemplateProblem as exc:
            conn.send(("error", str(exc)))
        except MemoryError:
            conn.send(("retired", f"template failed: over its memory budget ({memory_bytes // 2**20} MiB)"))
            return
        except Exception as exc:  # anything else a template can raise
            conn.send(("error", f"template failed: {type(exc).__name__}: {exc}"))


def _limit_memory(budget: int) -> None:
    try:
        import resource

        with open("/proc/self/status") as status:
            size_kib = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
        limit = size_kib * 1024 + budget
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, OSError, StopIteration, ValueError) as exc:  # not Linux: the time budget still holds
        log.warning("template worker: no memory limit (%s)", exc)


class _Worker:
    def __init__(self, memory_bytes: int) -> None:
        self.memory_bytes = memory_bytes
        self.process: multiprocessing.process.BaseProcess | None = None
        self.conn: Connection | None = None

    def call(self, request: tuple[Any, ...], timeout_s: float) -> Any:
        conn = self._started()
        conn.send(request)
        if not conn.poll(timeout_s):
            self.stop()
            raise OverBudget(f"template failed: it ran over its time budget ({timeout_s:g}s)")
        try:
            status, value = conn.recv()
        except (EOFError, OSError):
            self.stop()
            raise OverBudget("template failed: its worker process died") from None
        if status == "retired":
            self.stop()
            raise OverBudget(value)
        if status != "ok":
            raise TemplateProblem(value)
        return value

    def _started(self) -> Connection:
        if self.process is not None and self.process.is_alive() and self.conn is not None:
            return self.conn
        self.stop()
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        process = context.Process(
            target=_serve, args=(child, self.memory_bytes), name="lagwatch-template-worker", daemon=True
        )
        process.start()
        child.close()
        if not parent.poll(START_TIMEOUT_S):
            process.kill()
            raise TemplateProblem("template failed: its worker process did not start")
        parent.recv()
        self.process, self.conn = process, parent
        return parent

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.join(5)
        if self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.close()
        self.process = self.conn = None


class TemplateWorkers:
    """A pool of template worker processes; `check` and `render` block the calling thread, never longer than
    about `timeout_s` once a worker is up."""

    def __init__(
        self,
        size: int = 2,
        *,
        timeout_s: float = TIMEOUT_S,
        memory_bytes: int = MEMORY_BYTES,
        quarantine_s: float = QUARANTINE_S,
    ) -> None:
        self.timeout_s = timeout_s
        self.quarantine_s = quarantine_s
        self._quarantined: dict[bytes, float] = {}  # sha256 of a source -> when it may be rendered again
        self._lock = threading.Lock()  # calls come from many threads
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        for _ in range(size):
            self._idle.put(_Worker(memory_bytes))

    def check(self, source: str) -> None:
        """TemplateProblem when the template does not compile (compiling evaluates its constant expressions)."""
        self._call(("check", source))

    def render(self, source: str, context: dict[str, Any], max_chars: int = MAX_OUTPUT_CHARS) -> str:
        key = hashlib.sha256(source.encode("utf-8", "surrogatepass")).digest()
        with self._lock:
            until = self._quarantined.get(key)
        if until is not None and time.monotonic() < until:
            raise OverBudget(
                "template failed: it ran over its budget lately; not rendered again for"
                f" {until - time.monotonic():.0f}s"
            )
        try:
            return str(self._call(("render", source, context, max_chars)))
        except OverBudget:
            self._quarantine(key)
            raise

    def _quarantine(self, key: bytes) -> None:
        now = time.monotonic()
        with self._lock:
            self._quarantined.pop(key, None)  # re-inserted last: the dict stays in expiry order
            self._quarantined[key] = now + self.quarantine_s
            while self._quarantined:
                oldest, until = next(iter(self._quarantined.items()))
                if until > now and len(self._quarantined) <= MAX_QUARANTINED:
                    break
                del self._quarantined[oldest]

    def close(self) -> None:
        """Stop the idle workers (a later call starts them again)."""
        workers = []
        while True:
            try:
                workers.append(self._idle.get_nowait())
            except queue.Empty:
                break
        for worker in workers:
            worker.stop()
            self._idle.put(worker)

    def _call(self, request: tuple[Any, ...]) -> Any:
        worker = self._idle.get()
        try:
            return worker.call(request, self.timeout_s)
        finally:
            self._idle.put(worker)


WORKERS = TemplateWorkers()
