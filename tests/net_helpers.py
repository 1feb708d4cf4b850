"""Network helpers for tests that start servers of their own."""

import socket
import urllib.request


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers_ok(port: int, path: str) -> bool:
    """Whether 127.0.0.1:`port` answers GET `path` with a 200 now (a health endpoint, say)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False
