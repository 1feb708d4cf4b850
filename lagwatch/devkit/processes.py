"""The dev kit's child processes (Redis, the Kafka mock, the demo's services): their stop and their log's last lines."""

import contextlib
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def stop_processes(processes: Sequence[subprocess.Popen[Any]], timeout: float) -> None:
    """SIGTERM every running process at once, then wait; SIGKILL whatever is still there after `timeout`."""
    running = [proc for proc in processes if proc.poll() is None]
    for proc in running:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in running:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10) -> int:
    """SIGTERM `proc`, SIGKILL it if it has not exited after `timeout`; returns the exit code."""
    stop_processes([proc], timeout)
    return proc.returncode


def log_tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "<no log>"
