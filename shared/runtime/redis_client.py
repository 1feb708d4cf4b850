"""The one way services connect to Redis: a single server or a Redis Cluster, from `redis.url`.

Every command is bounded: a Redis that accepts connections but does not answer (frozen, swapping, a stuck script)
raises `redis.exceptions.TimeoutError` (a `RedisError`, which every caller already treats as "Redis unavailable":
the api answers 503, the ingest retries its batch) instead of holding the caller forever. Nothing lagwatch sends
blocks on the server side (no BLPOP, no blocking XREAD), and Redis itself refuses other clients once a script runs
past its 5 s `busy-reply-threshold`, so an answer slower than `SOCKET_TIMEOUT_S` means the server is not serving.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar, cast

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection
from redis.connection import HiredisRespSerializer

from lagwatch.shared.runtime.config import RedisConfig

SOCKET_TIMEOUT_S = 5.0  # per read or write on a connection: a frozen Redis is an error after this, not a hang
CONNECT_TIMEOUT_S = 2.0  # a refused or unroutable address fails sooner (localhost or a LAN hop away)


class HiredisPackedConnection(Connection):
    """redis-py's asyncio connection packs a command in Python, copying its buffer again at every argument; a command
    of thousands (an evaluation's script calls and writes of 500 groups) cost more CPU to pack than Redis spends
    running it. Packed by hiredis instead, as redis-py's blocking client packs: the same bytes, the same errors."""

    _packer = HiredisRespSerializer()

    def pack_command(self, *args: Any) -> list[bytes]:
        return cast(list[bytes], self._packer.pack(*args))


def connect(config: RedisConfig) -> Redis:
    """A client for the configured Redis. Connection errors surface on first use, so callers can retry them."""
    if config.cluster_mode:
        cluster = RedisCluster.from_url(
            config.url, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=CONNECT_TIMEOUT_S
        )
        return cast(Redis, cluster)  # not a subclass, but the same command surface
    client: Redis = Redis.from_url(
        config.url,
        connection_class=HiredisPackedConnection,  # a rediss:// or unix:// URL keeps its own
        health_check_interval=30,
        socket_keepalive=True,
        socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
    )
    return client


T = TypeVar("T")


def text(value: bytes | str) -> str:
    """A reply as text: lagwatch's clients do not decode replies (redis-py types them as str all the same)."""
    return value.decode() if isinstance(value, bytes) else value


def reply(command: Awaitable[T] | T) -> Awaitable[T]:
    """A command's reply to await. redis-py types its commands once for its blocking and its asyncio clients
    (`Awaitable[T] | T`); on the asyncio client they are always awaitable."""
    return cast("Awaitable[T]", command)


def pairs(flat: list[bytes]) -> dict[bytes, bytes]:
    """A hash as HGETALL answers inside a script (field, value, field, value ...)."""
    return dict(zip(flat[::2], flat[1::2], strict=True))
