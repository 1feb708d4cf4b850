"""Network helpers for tests that start servers of their own."""

import urllib.request
from pathlib import Path

from lagwatch.devkit.ports import free_port

__all__ = ["answers_ok", "free_port", "port_taken"]


def port_taken(log: Path) -> bool:
    """A service's log says its port was taken: chosen free a moment before it bound it, by another process since
    (a race of the test's, not a fault of the service's: start it again on another port)."""
    return "Address already in use" in log.read_text()


def answers_ok(port: int, path: str) -> bool:
    """Whether 127.0.0.1:`port` answers GET `path` with a 200 now (a health endpoint, say)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False
