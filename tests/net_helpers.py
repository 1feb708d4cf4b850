"""Network helpers for tests that start servers of their own."""

import urllib.request

from lagwatch.devkit.ports import free_port

__all__ = ["answers_ok", "free_port"]


def answers_ok(port: int, path: str) -> bool:
    """Whether 127.0.0.1:`port` answers GET `path` with a 200 now (a health endpoint, say)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False
