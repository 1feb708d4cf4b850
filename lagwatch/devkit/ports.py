"""Ports for the local servers the dev kit, the tests and the benches start a moment after choosing them."""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
BELOW = 12_000  # how far below the ephemeral range the ports are drawn


_handed: set[int] = set()  # the ports this process chose: not chosen again (servers started apart may not bind yet)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, drawn below the kernel's ephemeral range: the kernel hands ports of that
    range out meanwhile (a client connection's local port, any server bound to port 0), and one once took the port
    a test's server was to bind between its choice and the server's start. Never one this process chose before
    (two draws for servers started together could meet). The system's pick where there is no room below the range."""
    low = _ephemeral_range_start()
    if low - BELOW >= 1024:
        for _ in range(200):
            port = random.randrange(low - BELOW, low)
            if port not in _handed and is_free(port):
                _handed.add(port)
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def is_free(port: int) -> bool:
    """Nothing listens on `port` of 127.0.0.1 now."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_range_start() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):  # not Linux: its default
        return 32768
