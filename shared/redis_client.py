"""The one way services connect to Redis: a single server or a Redis Cluster, from `redis.url`."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from lagwatch.shared.config import RedisConfig


def connect(config: RedisConfig) -> Redis:
    """A client for the configured Redis. Connection errors surface on first use, so callers can retry them."""
    if config.cluster_mode:
        return RedisCluster.from_url(config.url)  # type: ignore[return-value]  # same command surface
    return Redis.from_url(config.url, health_check_interval=30, socket_keepalive=True)
