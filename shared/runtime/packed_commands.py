"""Many plain commands in one round trip, for the ingest's hot path: packed with hiredis, replies parsed in bulk.

redis-py's pipeline spends more CPU per command than the ingest spends per commit, and its `read_response` arms an
asyncio timer per reply. Here the commands go down one pooled connection as one write, and every reply is read
under a single deadline (`socket_timeout`, the same bound as any other command: a frozen Redis is an error, not a
hang). Replies are raw (an HGETALL is a flat list), as hiredis gives them. On Redis Cluster the commands go through
redis-py's cluster pipeline, which routes each to its slot's node (its replies pass redis-py's callbacks).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import hiredis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

_AsyncHiredisParser: type[Any] | None
try:  # the parser redis-py uses when hiredis is installed (it is a dependency of ours)
    from redis._parsers.hiredis import NOT_ENOUGH_DATA, _AsyncHiredisParser
except ImportError:  # pragma: no cover - another redis-py layout: the per-reply path below still works
    NOT_ENOUGH_DATA, _AsyncHiredisParser = object(), None


async def execute(redis: Redis, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Send the commands in order and return their replies; the first error reply is raised after all are read."""
    if not commands:
        return []
    if isinstance(redis, RedisCluster):
        async with redis.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            return await pipe.execute()
    return await execute_packed(redis, b"".join(map(hiredis.pack_command, commands)), len(commands))


async def execute_packed(redis: Redis, payload: bytes, count: int) -> list[Any]:
    """`execute` of commands already in the Redis protocol: `payload` holds `count` of them (a single server)."""
    if not count:
        return []
    pool = redis.connection_pool
    connection = await pool.get_connection()  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
    try:
        await connection.send_packed_command(payload, check_health=False)
        try:
            async with asyncio.timeout(connection.socket_timeout):
                replies = await _read_replies(connection, count)
        except TimeoutError:
            raise RedisTimeoutError(f"Timeout reading {count} replies from Redis") from None
    except BaseException:
        await connection.disconnect()  # replies may be left unread: the connection is not reusable
        raise
    finally:
        await pool.release(connection)
    for reply in replies:
        if isinstance(reply, ResponseError):
            raise reply
    return replies


async def _read_replies(connection: AbstractConnection, count: int) -> list[Any]:
    parser = connection._parser  # private: the bulk read below is why this module exists
    if _AsyncHiredisParser is None or not isinstance(parser, _AsyncHiredisParser):
        return [await connection.read_response(disconnect_on_error=False) for _ in range(count)]
    reader: Any = parser._reader  # hiredis.Reader
    replies: list[Any] = []
    while len(replies) < count:
        reply = reader.gets()
        if reply is NOT_ENOUGH_DATA:
            await parser.read_from_socket()
        else:
            replies.append(reply)
    return replies
