"""Is a configured cluster's Kafka reachable? For `/readyz`: a TCP connect to a bootstrap server, cached.

A TCP connect is the cheapest check that says "the brokers are there" without speaking the protocol, TLS or SASL
(a full client bootstrap costs a metadata round trip and, with SASL, a handshake, on every probe). The answer is
cached for a few seconds so a busy readiness prober cannot turn into a connection storm against the brokers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping

from lagwatch.shared.runtime.config import ClusterConfig

CACHE_SECONDS = 5.0
CONNECT_TIMEOUT_S = 1.0


def split_address(server: str) -> tuple[str, int]:
    """`host:port` or `[v6]:port` (a missing port means Kafka's 9092)."""
    host, sep, port = server.strip().rpartition(":")
    if not sep or not port.isdigit():
        return server.strip().strip("[]"), 9092
    return host.strip("[]"), int(port)


class KafkaProbe:
    def __init__(self, clusters: Mapping[str, ClusterConfig], *, cache_seconds: float = CACHE_SECONDS) -> None:
        self.clusters = clusters
        self.cache_seconds = cache_seconds
        self._answers: dict[str, tuple[float, bool]] = {}

    async def reachable(self, cluster: str) -> bool:
        checked_at, answer = self._answers.get(cluster, (float("-inf"), False))
        if time.monotonic() - checked_at < self.cache_seconds:
            return answer
        answer = await self._any_server_accepts(self.clusters[cluster].bootstrap_servers)
        self._answers[cluster] = (time.monotonic(), answer)
        return answer

    async def _any_server_accepts(self, servers: list[str]) -> bool:
        for server in servers:
            host, port = split_address(server)
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    _, writer = await asyncio.open_connection(host, port)
            except (OSError, TimeoutError):
                continue
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return True
        return False
