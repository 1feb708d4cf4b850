"""What Redis says of its memory: whether it may evict lagwatch's keys, and whether it is full.

A Redis with a `maxmemory` and a `maxmemory-policy` other than `noeviction` deletes keys to make room once it is full:
with a `volatile-*` policy (the default of AWS ElastiCache's parameter groups is volatile-lru) the keys that have an
expiry, which are the groups' windows, statuses and results (keys.py: they expire `expire-group` after a group's newest
commit); with an `allkeys-*` policy any key, the outboxes of events and alerts not yet sent among them. An evicted
window reads as a group gone, an evicted outbox entry as an alert never sent, and nothing says so. lagwatch cannot
prevent it, so it tells: each service logs a warning at its start (`warn_if_evicting`), and the api's `/metrics` carries
`lagwatch_redis_may_evict` and the server's `lagwatch_redis_evicted_keys`, which `LagwatchRedisMayEvict` and
`LagwatchRedisEvicted` alert on.

Full with `noeviction`, Redis refuses every write (OOM) but still answers PING and reads: the services' readiness
asks `takes_writes`, so a writer (ingest, evaluator, notifier) is not ready meanwhile; the api, which mostly reads,
stays ready (the dashboard is needed most then). The api's `/metrics` also has each server's
`lagwatch_redis_memory_used_bytes` and `lagwatch_redis_maxmemory_bytes`, for `LagwatchRedisMemoryHigh`.
On a Redis Cluster every primary is looked at.

The source is INFO (managed services refuse CONFIG GET); a server that refuses INFO too is not judged.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import OutOfMemoryError, RedisError, ResponseError

from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.redis_client import reply

log = logging.getLogger(__name__)
CHECK_TIMEOUT_S = 3.0  # a start-up look: a Redis that does not answer is the service's own start's concern
SAFE_POLICY = "noeviction"


@dataclass(frozen=True, slots=True)
class RedisMemory:
    """One server's memory settings and evictions so far (INFO's `maxmemory`, `maxmemory_policy`, `evicted_keys`)."""

    server: str
    maxmemory: int
    policy: str
    evicted_keys: int
    used_memory: int = 0

    @property
    def may_evict(self) -> bool:
        """Without a `maxmemory` Redis never evicts, whatever the policy."""
        return self.maxmemory > 0 and self.policy != SAFE_POLICY

    @property
    def refuses_writes(self) -> bool:
        """Full with `noeviction`. About only: Redis refuses a write when its memory, less some buffers, is over
        `maxmemory` at that instant."""
        return self.policy == SAFE_POLICY and 0 < self.maxmemory <= self.used_memory


async def read_memory(redis: Redis) -> list[RedisMemory]:
    """Each server's settings (a Redis Cluster: each primary's); [] where INFO is refused (an ACL).
    RedisError when Redis does not answer."""
    # a Redis Cluster's INFO goes to one node unless told: each primary holds keys to evict
    nodes: dict[str, str] = {"target_nodes": RedisCluster.PRIMARIES} if isinstance(redis, RedisCluster) else {}
    try:
        info: dict[str, Any] = await reply(redis.info(**nodes))
    except ResponseError:  # refused (NoPermissionError), or renamed away (`rename-command INFO ""`)
        return []
    by_server = {"redis": info} if "maxmemory_policy" in info else info  # a cluster answers per node
    servers = (_server(str(name), node) for name, node in sorted(by_server.items()) if isinstance(node, dict))
    return [server for server in servers if server is not None]


def _server(name: str, node: dict[str, Any]) -> RedisMemory | None:
    """One server's INFO; None where it does not say its policy in numbers (a Redis-compatible server may not)."""
    try:
        return RedisMemory(
            name,
            int(node.get("maxmemory", 0)),
            str(node["maxmemory_policy"]),
            int(node.get("evicted_keys", 0)),
            int(node.get("used_memory", 0)),
        )
    except (KeyError, TypeError, ValueError):
        return None


async def takes_writes(redis: Redis) -> bool:
    """The services' readiness check of Redis: it answers, and takes writes. `SET <probe> "" XX` writes nothing (the
    key never exists) but is refused like any write when Redis is full; it reaches one node of a Redis Cluster, so
    each primary's INFO is looked at as well. RedisError when Redis does not answer."""
    try:
        await reply(redis.set(keys.READINESS_PROBE, b"", xx=True))
    except OutOfMemoryError:
        return False
    if not isinstance(redis, RedisCluster):
        return True
    return not any(server.refuses_writes for server in await read_memory(redis))


async def warn_if_evicting(redis: Redis, service: str) -> None:
    """At a service's start: a warning line when Redis may evict lagwatch's keys (nothing when it may not, or does not
    answer within CHECK_TIMEOUT_S)."""
    try:
        servers = await asyncio.wait_for(read_memory(redis), CHECK_TIMEOUT_S)
    except (RedisError, TimeoutError) as exc:
        log.debug("%s: Redis's memory policy not read (%s)", service, exc)
        return
    for server in servers:
        if server.may_evict:
            log.warning(
                "%s: Redis (%s) evicts keys when full (maxmemory %d bytes, maxmemory-policy %s): it would delete "
                "windows, statuses or undelivered alerts without a word. Set maxmemory-policy noeviction "
                "(docs/operations.md, Scaling out: Redis)",
                service,
                server.server,
                server.maxmemory,
                server.policy,
            )
