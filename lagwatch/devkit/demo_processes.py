"""The demo's service processes: `lagwatch run <service>` children that cannot outlive the supervisor.

Each service runs in its own session, so a Ctrl-C in the terminal reaches only the supervisor, which stops the
services itself (SIGTERM: each finishes what it holds, then exits) in a known order. Should the supervisor die
without that chance (SIGKILL), each child gets SIGTERM from the kernel (Linux `PR_SET_PDEATHSIG`, set by the small
launcher in `main` below before it execs the service, so no code runs between fork and exec in the supervisor).
A service that dies is started again by the supervisor (`restart`), with the same environment and health port.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import aiohttp

from lagwatch.devkit.processes import log_tail, stop_processes

PR_SET_PDEATHSIG = 1


class ServiceProcess:
    """`lagwatch run <name>` as a child process, logging to `log_file`, with its health server on `port`."""

    def __init__(self, name: str, port: int, log_file: Path) -> None:
        self.name = name
        self.port = port
        self.log_file = log_file
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0  # time.monotonic() of the latest start
        self.restarts = 0
        self.crash_loops = 0  # deaths in a row soon after a start (the supervisor's count)
        self.port_moves = 0  # starts on another port after something else took this one (the supervisor's count)
        self._launch: tuple[dict[str, str], Path] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, env: Mapping[str, str], cwd: Path) -> None:
        self._launch = (dict(env), cwd)
        self.started_at = time.monotonic()
        command = [sys.executable, "-m", "lagwatch.cli", "run", self.name]
        guarded = [sys.executable, "-m", __name__, str(os.getpid()), *command]
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(
                guarded,
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def restart(self) -> None:
        """Start it again as it was started (after it died: its state lives in Redis and Kafka)."""
        if self._launch is None:
            raise RuntimeError(f"{self.name} was never started")
        self.restarts += 1
        self.start(*self._launch)

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def exit_code(self) -> int | None:
        """None while it runs."""
        return None if self.proc is None else self.proc.poll()

    async def ready(self, session: aiohttp.ClientSession) -> bool:
        try:
            async with session.get(f"{self.url}/readyz", timeout=aiohttp.ClientTimeout(total=2)) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    def log_tail(self, lines: int = 15) -> str:
        return log_tail(self.log_file, lines)


def stop_all(processes: Sequence[ServiceProcess], timeout: float = 20.0) -> None:
    stop_processes([p.proc for p in processes if p.proc is not None], timeout)


def _die_with(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent_pid:  # the parent died before the guard was set
        sys.exit(1)


def main(argv: Sequence[str] = sys.argv[1:]) -> None:
    """`python -m lagwatch.devkit.demo_processes PARENT_PID COMMAND...`: COMMAND, with SIGTERM when the parent dies."""
    parent_pid, *command = argv
    _die_with(int(parent_pid))
    os.execv(command[0], command)  # the death signal survives exec


if __name__ == "__main__":
    main()
