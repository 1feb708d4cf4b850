"""The ingest's leases in Redis (the broker poller's, the Kafka identity's forgetting): held by one worker at a time,
renewed by their holder, lapsing when it dies."""

from __future__ import annotations

import contextlib
import logging
import uuid
from typing import Any

from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.redis_client import reply

log = logging.getLogger(__name__)

# Take or renew if mine. KEYS: lease key; ARGV: owner id, ttl ms
RENEW_LEASE = """
local lease_key = KEYS[1]
local owner, ttl_ms = ARGV[1], ARGV[2]
if redis.call('SET', lease_key, owner, 'NX', 'PX', ttl_ms) then return 1 end
if redis.call('GET', lease_key) == owner then
  redis.call('PEXPIRE', lease_key, ttl_ms)
  return 1
end
return 0
"""

# Delete if mine. KEYS: lease key; ARGV: owner id
RELEASE_LEASE = """
local lease_key = KEYS[1]
local owner = ARGV[1]
if redis.call('GET', lease_key) == owner then return redis.call('DEL', lease_key) end
return 0
"""

# Which Kafka cluster a name stands for (services/ingest/kafka_identity.py). KEYS: the id recorded; ARGV: the id
# Kafka gave. Returns {verdict, the id recorded}: "same"; "first" (none recorded: this one is, from now on);
# "other" (another is recorded: its data is forgotten under a lease, then the id set)
CLAIM_KAFKA_ID = """
local id_key, seen = KEYS[1], ARGV[1]
local recorded = redis.call('GET', id_key)
if recorded == seen then return {'same', recorded} end
if not recorded then
  redis.call('SET', id_key, seen)
  return {'first', seen}
end
return {'other', recorded}
"""


class Lease:
    def __init__(self, redis: Any, key: str, owner: str | None = None) -> None:
        self.key = key
        self.owner = owner or uuid.uuid4().hex
        self._renew = redis.register_script(RENEW_LEASE)
        self._release = redis.register_script(RELEASE_LEASE)

    async def take(self, ttl_ms: int) -> bool:
        """Take the lease, or renew it when it is ours; False while another holds it."""
        return bool(await self._renew(keys=[self.key], args=[self.owner, ttl_ms]))

    async def release(self) -> None:
        """Hand it on at once rather than letting it lapse (nothing when it is not ours)."""
        await self._release(keys=[self.key], args=[self.owner])


class PollerLease(Lease):
    """The broker poller's lease (one worker polls the log ends), and each worker's word on whether its commits are
    behind (`keys.ingest_behind`): the poller holds its samples while any worker's are (each worker's groups are only
    its own to catch up)."""

    def __init__(self, redis: Any, cluster: str, offset_refresh: float) -> None:
        super().__init__(redis, keys.poller_lease(cluster))
        self.ttl_ms = int(offset_refresh * 3000)  # renewed every tick: a worker that died holds nobody for long
        self._redis = redis
        self._behind = keys.ingest_behind(cluster)

    async def announce(self, behind: bool) -> bool:
        """Say whether this worker's commits are behind; True while any other worker's are."""
        now = now_ms()
        async with self._redis.pipeline(transaction=False) as pipe:
            if behind:
                pipe.hset(self._behind, self.owner, str(now + self.ttl_ms))
            else:
                pipe.hdel(self._behind, self.owner)
            pipe.hgetall(self._behind)
            replies = await pipe.execute()
        others = {k: int(v) for k, v in replies[-1].items() if k.decode() != self.owner}
        stale = [k for k, until in others.items() if until <= now]
        if stale:  # a worker that died while behind: its word expires with the hold
            await reply(self._redis.hdel(self._behind, *stale))
        return any(until > now for until in others.values())

    async def release(self) -> None:
        """At a stop: withdraw this worker's word and hand the lease on. Redis may be the reason we stop: the word
        and the lease then lapse by themselves."""
        with contextlib.suppress(Exception):
            await reply(self._redis.hdel(self._behind, self.owner))
        try:
            await super().release()
        except Exception as exc:
            log.debug("could not release the poller lease: %s", exc)
