"""Where a Python process's GIL goes: py-spy samples the threads holding it (`--gil`), and `summarize` sums them.

The ingest is bound by its GIL when history is on (bench_vs_burrow.py: 1.00 cores with history), so CPU seconds per
thread do not say what takes the lock. py-spy (`pip install py-spy`; it reads the process's memory with ptrace, so
it needs root or `kernel.yama.ptrace_scope` 0) samples without stopping the process (`--nonblocking`) and records,
per sample, the stack of each thread then holding the GIL. A sample is 1/rate seconds: their sum is the time the
GIL was held, and the samples whose stack passes through a file of an area (the history's code) its share.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

RATE = 200  # samples per second: the bench's runs last ~5-12 s
# the ingest's history code: its writer thread, the queue between store and commit, the records' text
HISTORY_FILES = ("history_publisher.py", "archive_queue.py", "records/history.py")


def py_spy() -> str | None:
    """py-spy's path: next to this Python (the project's venv) or on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


@dataclass
class GilSummary:
    held_s: float  # the GIL was held by some thread
    area_s: float  # ... by a thread whose stack passes through the area's files
    top: list[tuple[str, float]] = field(default_factory=list)  # the area's innermost functions, seconds, largest first


def summarize(raw: str, rate: int = RATE, area: tuple[str, ...] = HISTORY_FILES, top: int = 5) -> GilSummary:
    """Sum py-spy's raw (collapsed) output: one line per distinct stack, `frame;frame;... count`, outermost first,
    each frame `function (file:line)`."""
    held, in_area = 0, 0
    innermost: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        held += n
        frames = [f for f in stack.split(";") if any(name in f for name in area)]
        if frames:
            in_area += n
            innermost[frames[-1].split(" (")[0]] += n
    return GilSummary(held / rate, in_area / rate, [(name, n / rate) for name, n in innermost.most_common(top)])


def format_summary(s: GilSummary) -> str:
    share = f" ({100 * s.area_s / s.held_s:.1f} %)" if s.held_s else ""
    parts = ", ".join(f"{name} {seconds:.2f}" for name, seconds in s.top)
    return f"GIL held {s.held_s:.2f} s (py-spy --gil, {RATE}/s); in the history's code {s.area_s:.2f} s{share}" + (
        f": {parts}" if parts else ""
    )


class GilProfile:
    """py-spy recording one process (and its children: the workers) from `start` until `stop`."""

    def __init__(self, pid: int, out: Path) -> None:
        self.pid, self.out = pid, out
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> bool:
        """False when py-spy is not installed (the bench says so and goes on)."""
        exe = py_spy()
        if exe is None:
            return False
        command = [exe, "record", "--pid", str(self.pid), "--gil", "--nonblocking", "--subprocesses"]
        command += ["--rate", str(RATE), "--format", "raw", "--output", str(self.out)]
        log = self.out.with_suffix(".log").open("wb")
        self._proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        return True

    def stop(self) -> GilSummary | None:
        """Stop recording (py-spy writes its file on SIGINT) and sum it; None when nothing was recorded."""
        if self._proc is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            self._proc.send_signal(signal.SIGINT)
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if not self.out.exists():
            return None
        return summarize(self.out.read_text())
