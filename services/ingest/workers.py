"""`lagwatch run ingest --workers N`: N ingest worker processes under one command, to use every core.

Each worker is `lagwatch run ingest --workers 1` with this command's other arguments, sharing the offsets topic's
partitions in the ingest's consumer group; worker 0 serves HTTP on the configured port, the others on ports the
system picks. This process only supervises: SIGTERM/SIGINT are passed on, a worker that dies is started again after
a back-off, and should this process be killed outright the kernel sends each worker SIGTERM (`PR_SET_PDEATHSIG`).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from lagwatch.shared.runtime.backoff import doubling

log = logging.getLogger(__name__)
SUPERVISOR_ENV = "LAGWATCH_INGEST_SUPERVISOR"  # set in each worker: the supervisor's pid
SHARD_ENV = "LAGWATCH_INGEST_WORKER"  # set in each worker: "<index>/<count>" (admin mode splits groups by it)
PR_SET_PDEATHSIG = 1
# glibc mallopt parameters
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MMAP_THRESHOLD = 4 * 1024 * 1024  # bytes: smaller blocks come from the heap
TRIM_THRESHOLD = 64 * 1024 * 1024  # bytes free at the heap's top before it is given back
CGROUP_ROOT = Path("/sys/fs/cgroup")
STOP_TIMEOUT_S = 60.0
MAX_BACKOFF_S = 30.0
GC_YOUNG_THRESHOLD = 50_000  # new tracked objects between collections (Python: 700); see collect_garbage_less_often
GIL_SWITCH_INTERVAL_S = 0.0005  # Python: 0.005; see switch_threads_sooner


def default_workers() -> int:
    """One worker per CPU but one: a worker keeps one core busy and needs part of another for librdkafka's threads,
    Redis and the history producer."""
    return max(1, available_cpus() - 1)


def available_cpus() -> int:
    """The CPUs this process may use, fewer under a container's cgroup CPU limit (rounded up), which
    `os.cpu_count()` does not see."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cgroup_cpu_limit(CGROUP_ROOT)
    return max(1, min(cpus, math.ceil(quota)) if quota else cpus)


def cgroup_cpu_limit(root: Path) -> float | None:
    """CPUs allowed by the cgroup's quota under `root` (v2, then v1); None when unlimited or unreadable."""
    with contextlib.suppress(OSError, ValueError):
        quota, _, period = (root / "cpu.max").read_text().partition(" ")  # v2: "<quota|max> <period>"
        return None if quota == "max" else _cpus(int(quota), int(period))
    with contextlib.suppress(OSError, ValueError):
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())  # v1: -1 when unlimited
        return _cpus(quota_us, int((root / "cpu" / "cpu.cfs_period_us").read_text()))
    return None


def _cpus(quota: int, period: int) -> float | None:
    return quota / period if quota > 0 and period > 0 else None  # anything else: no limit we can read


def tune_malloc() -> None:
    """glibc's allocator for a worker's churn of short-lived buffers; call before any thread starts. One arena (one
    per thread fragments), and batch-sized buffers from the heap, kept there (not mapped afresh every batch)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None)
            libc.mallopt(M_ARENA_MAX, 1)
            libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)


def collect_garbage_less_often() -> None:
    """A batch brings thousands of tracked objects and the worker makes few reference cycles: collect less often, with
    what start-up loaded frozen out of the collector's walks."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 50, 100)


def switch_threads_sooner() -> None:
    """The consumer's thread and the event loop's hand batches to each other: a shorter GIL switch interval than
    Python's 5 ms lets them overlap."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)


def die_with_supervisor() -> None:
    """In a worker: get SIGTERM when the supervisor dies (and exit now if it already has)."""
    supervisor = os.environ.get(SUPERVISOR_ENV)
    if not supervisor:
        return
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(supervisor):
        sys.exit(1)


def worker_command(argv: Sequence[str], index: int) -> list[str]:
    """This command's arguments for worker `index`: one worker, and a port of its own unless it is worker 0."""
    args = _without_option(list(argv), "--workers")
    if index > 0:
        args = [*_without_option(args, "--http-port"), "--http-port", "0"]
    return [sys.executable, "-m", "lagwatch.cli", *args, "--workers", "1"]


def _without_option(args: list[str], name: str) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == name:
            skip = True
        elif not a.startswith(f"{name}="):
            out.append(a)
    return out


def worker_shard() -> tuple[int, int]:
    """(this worker's index, the number of workers): (0, 1) outside `--workers N`."""
    with contextlib.suppress(KeyError, ValueError):
        index, count = (int(x) for x in os.environ[SHARD_ENV].split("/"))
        if 0 <= index < count:
            return index, count
    return 0, 1


class _Slot:
    def __init__(self, index: int, command: list[str], count: int) -> None:
        self.index = index
        self.count = count
        self.command = command
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.quick_deaths = 0
        self.due = 0.0  # monotonic time of the next start

    def start(self) -> None:
        env = dict(os.environ, **{SUPERVISOR_ENV: str(os.getpid()), SHARD_ENV: f"{self.index}/{self.count}"})
        self.proc = subprocess.Popen(self.command, env=env, stdin=subprocess.DEVNULL)
        self.started_at = time.monotonic()
        log.info("ingest worker %d started (pid %d)", self.index, self.proc.pid)


def supervise(argv: Sequence[str], workers: int) -> int:
    """Run `workers` workers until SIGTERM/SIGINT; returns the exit code."""
    stopping = threading.Event()

    def stop(signum: int, frame: object) -> None:
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    slots = [_Slot(i, worker_command(argv, i), workers) for i in range(workers)]
    for slot in slots:
        slot.start()
    while not stopping.wait(0.5):
        for slot in slots:
            _tend(slot)
    return _stop_all(slots)


def _tend(slot: _Slot) -> None:
    """Start a dead worker again, backing off when it keeps dying soon after its start."""
    now = time.monotonic()
    if slot.proc is not None:
        code = slot.proc.poll()
        if code is None:
            return
        slot.proc = None
        slot.quick_deaths = slot.quick_deaths + 1 if now - slot.started_at < MAX_BACKOFF_S else 0
        delay = doubling(0.5, MAX_BACKOFF_S, slot.quick_deaths)
        slot.due = now + delay
        log.warning("ingest worker %d exited with %s; starting it again in %.1fs", slot.index, code, delay)
    if now >= slot.due:
        slot.start()


def _stop_all(slots: list[_Slot]) -> int:
    running = [s.proc for s in slots if s.proc is not None and s.proc.poll() is None]
    for proc in running:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    codes = []
    for proc in running:
        try:
            codes.append(proc.wait(max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append(proc.wait())
    return max((abs(c) for c in codes if c not in (0, -signal.SIGTERM)), default=0)
