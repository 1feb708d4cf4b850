"""A real `redis-server` process on a free localhost port, for tests and the local demo.

`RedisServer` runs the Debian `redis-server` binary in the foreground (no `daemonize`, so we own
the process), in its own session so terminal signals aimed at pytest do not reach it, with its
data and log in a temporary (or given) directory.  `restart()` keeps the port and directory, so
with `appendonly=True` the data survives, which is how tests simulate a Redis outage.

RDB snapshots are disabled (`save ""`): persistence is opt-in through the AOF only, so a
non-appendonly server always restarts empty and never writes dump files behind our back.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self, cast

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from lagwatch.devkit.ports import free_port
from lagwatch.devkit.processes import log_tail, stop_process

_FALLBACK_DIRS = ("/usr/sbin", "/usr/bin", "/usr/local/bin")
LOG_FILE_NAME = "redis.log"
STARTUP_TIMEOUT_S = 10.0


class RedisServerError(RuntimeError):
    """redis-server is missing, failed to start, or did not become ready."""


def find_redis_server() -> Path:
    """Locate the binary: `$LAGWATCH_REDIS_SERVER`, then `PATH`, then the usual system dirs."""
    override = os.environ.get("LAGWATCH_REDIS_SERVER")
    if override:
        if not os.access(override, os.X_OK):
            raise RedisServerError(f"$LAGWATCH_REDIS_SERVER={override!r} is not an executable file")
        return Path(override)
    found = shutil.which("redis-server") or shutil.which("redis-server", path=os.pathsep.join(_FALLBACK_DIRS))
    if found:
        return Path(found)
    raise RedisServerError(
        "redis-server not found (looked at $LAGWATCH_REDIS_SERVER, PATH and "
        f"{', '.join(_FALLBACK_DIRS)}); install it with `apt-get install -y redis-server`"
    )


def _serving_pid(port: int, timeout: float = 0.5) -> int | None:
    """PID of the Redis answering on `port`, or None if none is ready yet.

    Asking for the PID rather than just PINGing tells our server apart from another one that
    already holds the port (ours then exits with "Address already in use"). INFO answers while
    the server still loads its AOF, when every other command is refused with -LOADING: a server
    whose `loading` is not 0 is not ready yet.
    """
    # No retries (a server not up yet is an answer), no CLIENT SETINFO (refused while loading).
    client = redis.Redis(
        port=port,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        lib_name=None,
        lib_version=None,
    )
    try:
        with client:
            info = cast(dict[str, Any], client.info())  # the sync client's (redis-py types both clients' as one)
    except (redis.RedisError, OSError):
        return None
    return None if info.get("loading", 1) != 0 or "process_id" not in info else int(info["process_id"])


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the server's process group (it leads it), reaping the leader."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


class RedisServer:
    """A `redis-server` child process bound to 127.0.0.1.

    A temporary directory (used when `dir` is None) is removed by `close()` / the context
    manager, or at interpreter exit at the latest; `stop()` keeps it so `start()` can resume.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        dir: Path | None = None,
        appendonly: bool = False,
        extra_args: Sequence[str] = (),
    ) -> None:
        self._requested_port = port
        self._port: int | None = port
        self.appendonly = appendonly
        self.extra_args = tuple(extra_args)
        self._proc: subprocess.Popen[bytes] | None = None
        self._proc_finalizer: weakref.finalize | None = None
        if dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="lagwatch-redis-"))
            self._dir_finalizer: weakref.finalize | None = weakref.finalize(
                self, shutil.rmtree, self.dir, ignore_errors=True
            )
        else:
            self.dir = Path(dir)
            self._dir_finalizer = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RedisServerError("port is chosen by start(); call it first")
        return self._port

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_file(self) -> Path:
        return self.dir / LOG_FILE_NAME

    def start(self) -> None:
        """Start the server and wait until it answers (as itself); a no-op if it is running."""
        if self.running:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        # An auto-picked port can be taken between probing and binding: retry with a new one.
        attempts = 1 if self._requested_port is not None or self._port is not None else 3
        for attempt in range(attempts):
            if self._port is None:
                self._port = free_port()
            try:
                self._launch()
                return
            except RedisServerError:
                if attempt == attempts - 1 or "Address already in use" not in log_tail(self.log_file, 20):
                    raise
                self._port = None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop gracefully (SIGTERM: AOF is flushed and fsynced), SIGKILL after `timeout`."""
        if self._proc is not None:
            stop_process(self._proc, timeout)
        self.kill()  # also sweeps AOF-rewrite children that could outlive a killed server

    def kill(self) -> None:
        """Crash the server (SIGKILL): writes not yet fsynced to the AOF may be lost."""
        proc, self._proc = self._proc, None
        if proc is not None:
            _kill_group(proc)
        if self._proc_finalizer is not None:
            self._proc_finalizer.detach()

    def restart(self) -> None:
        """Stop and start again on the same port and directory."""
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop and remove the temporary directory, if we created it."""
        self.stop()
        if self._dir_finalizer is not None:
            self._dir_finalizer()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RedisServer(port={self._port}, dir={str(self.dir)!r}, running={self.running})"

    def _command(self) -> list[str]:
        options = {"port": self.port, "bind": "127.0.0.1", "dir": self.dir, "logfile": self.log_file,
                   "daemonize": "no", "save": "", "appendonly": "yes" if self.appendonly else "no",
                   "appendfsync": "everysec"}  # fmt: skip
        flags = [arg for name, value in options.items() for arg in (f"--{name}", str(value))]
        return [str(find_redis_server()), *flags, *self.extra_args]

    def _launch(self) -> None:
        command = self._command()
        # Truncate so an error's log tail only shows this attempt.
        self.log_file.write_bytes(b"")
        proc = subprocess.Popen(
            command,
            cwd=self.dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._proc = proc
        # Kill it at interpreter exit if nobody calls stop() (e.g. a test crashed).
        self._proc_finalizer = weakref.finalize(self, _kill_group, proc)
        try:
            self._wait_ready(proc)
        except BaseException:
            self.kill()
            raise

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while proc.poll() is None and time.monotonic() < deadline:
            if _serving_pid(self.port) == proc.pid:
                return
            time.sleep(0.02)
        if proc.returncode is None:
            what = f"on port {self.port} not ready after {STARTUP_TIMEOUT_S}s"
        else:
            what = f"exited with code {proc.returncode} on port {self.port}"
        raise RedisServerError(f"redis-server {what}; log tail ({self.log_file}):\n{log_tail(self.log_file, 20)}")
