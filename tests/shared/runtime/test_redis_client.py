"""The services' Redis connection (shared/runtime/redis_client.py): commands packed by hiredis, byte for byte as
redis-py's own asyncio packer writes them, and used against a real server."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from lagwatch.shared.runtime.config import RedisConfig
from lagwatch.shared.runtime.redis_client import HiredisPackedConnection, connect

ARGUMENT = st.one_of(
    st.binary(max_size=8000),  # past redis-py's buffer cutoff too, where it packs in pieces
    st.text(max_size=300),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
)
COMMAND = st.sampled_from(["HSET", b"EVALSHA", "CONFIG GET", b"SCRIPT LOAD"])


@given(COMMAND, st.lists(ARGUMENT, max_size=40))
def test_commands_are_packed_as_redis_py_packs_them(command, arguments):
    python, hiredis = Connection(), HiredisPackedConnection()
    assert b"".join(hiredis.pack_command(command, *arguments)) == b"".join(python.pack_command(command, *arguments))


def test_an_argument_redis_cannot_take_is_refused_as_redis_py_refuses_it():
    for connection in (Connection(), HiredisPackedConnection()):
        with pytest.raises(DataError):
            connection.pack_command("SET", "key", True)


async def test_the_services_client_talks_to_a_real_server(redis_server):
    redis = connect(RedisConfig(url=redis_server.url))
    assert redis.connection_pool.connection_class is HiredisPackedConnection
    try:
        await redis.hset("h", mapping={"text": "é", "number": 7, "float": 0.1, b"raw": b"\x00\xff"})
        assert await redis.hgetall("h") == {
            b"text": "é".encode(),
            b"number": b"7",
            b"float": b"0.1",
            b"raw": b"\x00\xff",
        }
    finally:
        await redis.aclose()
