"""Network helpers for tests that start servers of their own."""

import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path

from lagwatch.devkit.ports import free_port

__all__ = ["answers_ok", "free_port", "port_taken", "restart_where_port_taken"]


def port_taken(log: Path) -> bool:
    """A service's log says its port was taken: chosen free a moment before it bound it, by another process since
    (a race of the test's, not a fault of the service's: start it again on another port)."""
    return "Address already in use" in log.read_text()


def restart_where_port_taken(
    processes: dict[str, subprocess.Popen],
    ports: dict[str, int],
    logs: dict[str, Path],
    start: Callable[[str], subprocess.Popen],
) -> None:
    """Each service that exited because its port was taken gets another port and is started again (`start`)."""
    for service, process in list(processes.items()):
        if process.poll() is not None and port_taken(logs[service]):
            ports[service] = free_port()
            processes[service] = start(service)


def answers_ok(port: int, path: str) -> bool:
    """Whether 127.0.0.1:`port` answers GET `path` with a 200 now (a health endpoint, say)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False
