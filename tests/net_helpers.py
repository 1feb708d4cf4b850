"""Network helpers for tests that start servers of their own."""

import random
import socket
import urllib.request
from pathlib import Path


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, for a server the test starts later: drawn below the kernel's ephemeral
    range, as the kernel hands ports of that range out meanwhile (a client connection's local port, a server of
    another test worker bound to port 0), which once took a port between its choice and its server's start."""
    low = _ephemeral_range_start()
    for _ in range(200):
        port = random.randrange(max(1024, low - 12_000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port found below {low}")


def _ephemeral_range_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def answers_ok(port: int, path: str) -> bool:
    """Whether 127.0.0.1:`port` answers GET `path` with a 200 now (a health endpoint, say)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False
