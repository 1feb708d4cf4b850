"""A Redis that may evict lagwatch's keys is said at each service's start and on the api's /metrics, against real
redis-servers: one with the default (no maxmemory: it never evicts), one full with `volatile-lru` (AWS ElastiCache's
default policy), and a user that INFO is refused to."""

from __future__ import annotations

import logging

import pytest
from redis.asyncio import Redis
from redis.exceptions import OutOfMemoryError

from lagwatch.devkit.redis_server import RedisServer
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.redis_memory import RedisMemory, read_memory, takes_writes, warn_if_evicting

MB = 1024 * 1024


@pytest.fixture
async def evicting():
    """A redis-server of 4 MB that evicts keys with an expiry when full, and a client of it."""
    with RedisServer(extra_args=("--maxmemory", str(4 * MB), "--maxmemory-policy", "volatile-lru")) as server:
        client = Redis.from_url(server.url)
        yield client
        await client.aclose()


async def test_a_redis_without_maxmemory_never_evicts_and_no_warning_is_logged(redis, caplog):
    [server] = await read_memory(redis)
    assert (server.maxmemory, server.may_evict) == (0, False)
    assert not RedisMemory("redis", 4 * MB, "noeviction", 0).may_evict  # full, it refuses writes instead
    assert not RedisMemory("redis", 0, "allkeys-lru", 0).may_evict  # never full
    with caplog.at_level(logging.WARNING, logger="lagwatch.shared.runtime.redis_memory"):
        await warn_if_evicting(redis, "ingest prod")
    assert caplog.records == []


async def test_a_full_volatile_lru_redis_evicts_what_expires_and_each_start_says_so(evicting, caplog):
    [server] = await read_memory(evicting)
    assert (server.server, server.maxmemory, server.policy, server.evicted_keys) == ("redis", 4 * MB, "volatile-lru", 0)
    assert server.may_evict and 0 < server.used_memory < 4 * MB
    with caplog.at_level(logging.WARNING, logger="lagwatch.shared.runtime.redis_memory"):
        await warn_if_evicting(evicting, "ingest prod")
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("ingest prod: Redis (redis) evicts keys when full (maxmemory 4194304 bytes, ")
    assert "maxmemory-policy volatile-lru" in line and "Set maxmemory-policy noeviction" in line

    value = b"x" * 10_000  # keys with an expiry, as lagwatch's group keys are, past the 4 MB
    for i in range(800):
        await evicting.set(f"lw:g:{{prod/g{i}}}:w", value, ex=3600)
    [server] = await read_memory(evicting)
    assert server.evicted_keys > 0
    assert await evicting.dbsize() < 800


async def test_a_user_refused_info_is_not_judged(evicting, caplog):
    await evicting.execute_command("ACL", "SETUSER", "lagwatch", "on", ">pw", "~*", "+@all", "-info")
    port = evicting.connection_pool.connection_kwargs["port"]
    limited = Redis.from_url(f"redis://lagwatch:pw@127.0.0.1:{port}")
    try:
        assert await read_memory(limited) == []
        with caplog.at_level(logging.DEBUG, logger="lagwatch.shared.runtime.redis_memory"):
            await warn_if_evicting(limited, "api")
        assert [r.levelname for r in caplog.records] == []
    finally:
        await limited.aclose()


async def test_a_redis_that_does_not_answer_leaves_the_start_to_its_own_checks(caplog):
    with RedisServer() as server:
        url = server.url
    gone = Redis.from_url(url, socket_connect_timeout=0.5)
    try:
        with caplog.at_level(logging.DEBUG, logger="lagwatch.shared.runtime.redis_memory"):
            await warn_if_evicting(gone, "notifier")
        assert [r.levelname for r in caplog.records] == ["DEBUG"]
    finally:
        await gone.aclose()


async def make_full(client: Redis) -> None:
    """Redis over its maxmemory: the limit set below what it uses. (Filled to the limit instead, it hovers there:
    a write whose request pushes it over is refused, a smaller one after it may pass.)"""
    used = (await client.info("memory"))["used_memory"]
    await client.config_set("maxmemory", used // 2)


async def test_a_full_noeviction_redis_answers_ping_but_takes_no_write_and_is_not_ready_until_it_has_room():
    with RedisServer(extra_args=("--maxmemory-policy", "noeviction")) as server:
        client = Redis.from_url(server.url)
        try:
            assert await takes_writes(client)
            await make_full(client)
            with pytest.raises(OutOfMemoryError):
                await client.set("one", b"x")
            assert await client.ping()  # what readiness asked before
            assert not await takes_writes(client)
            [memory] = await read_memory(client)
            assert memory.refuses_writes and not memory.may_evict and memory.evicted_keys == 0
            await client.config_set("maxmemory", 0)  # room again
            assert await takes_writes(client)
            assert not await client.exists(keys.READINESS_PROBE)  # the probe writes nothing
        finally:
            await client.aclose()


def test_an_info_a_redis_compatible_server_words_otherwise_is_read_where_it_can_be_and_not_judged_elsewhere():
    from lagwatch.shared.runtime.redis_memory import _server

    assert _server("kv", {"maxmemory_policy": "noeviction"}) == RedisMemory("kv", 0, "noeviction", 0, 0)
    assert _server("kv", {"maxmemory": "lots", "maxmemory_policy": "allkeys-lru"}) is None
    assert _server("kv", {"maxmemory": 5}) is None
