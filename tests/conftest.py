"""Shared fixtures: a real redis-server for the whole session, a clean database per test."""

from __future__ import annotations

import aiohttp
import pytest
from redis.asyncio import Redis

from lagwatch.devkit.redis_server import RedisServer

LONG_DIRECTORIES = ("tests/system/", "tests/spark/")  # end-to-end: each file runs for tens of seconds


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files that take longest first: `make test` hands whole files to two processes in this order (xdist's
    `--dist loadfile --no-loadscope-reorder`), so that the short ones fill in at the end and both finish together.
    Given in the order of most tests first (xdist's default), the end-to-end files came last and one process ran
    them for minutes alone. Long: the end-to-end directories, and any file with a test marked `slow`."""
    long_files = {item.path for item in items if item.get_closest_marker("slow")}
    long_files |= {item.path for item in items if item.nodeid.startswith(LONG_DIRECTORIES)}
    items.sort(key=lambda item: item.path not in long_files)  # stable: the order within each part stays


@pytest.fixture(scope="session")
def _shared_redis_server():
    with RedisServer() as server:
        server.start()
        yield server


@pytest.fixture
def redis_server(_shared_redis_server):
    """The session's redis-server, emptied for this test."""
    import redis as sync_redis

    with sync_redis.Redis.from_url(_shared_redis_server.url) as client:
        client.flushdb()
    return _shared_redis_server


@pytest.fixture
async def redis(redis_server):
    client = Redis.from_url(redis_server.url)
    await client.flushdb()
    yield client
    await client.aclose()


@pytest.fixture
def three_brokers():
    """A Kafka mock cluster of three brokers (`leaders_spread` places a topic's partitions on all of them), so one
    broker's outage takes some partitions away and leaves the others."""
    from lagwatch.devkit.mock_kafka import MockKafkaCluster

    cluster = MockKafkaCluster()
    cluster.start(brokers=3)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def kafka():
    """A fresh Kafka mock cluster per test (isolation is free: it starts in milliseconds)."""
    from lagwatch.devkit.mock_kafka import MockKafkaCluster
    from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OFFSETS_TOPIC

    with MockKafkaCluster() as cluster:
        cluster.start()
        cluster.create_topic(OFFSETS_TOPIC, DEFAULT_PARTITIONS)
        yield cluster


@pytest.fixture
async def http():
    """An HTTP client for tests that talk to lagwatch's servers."""
    async with aiohttp.ClientSession() as session:
        yield session
