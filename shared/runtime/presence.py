"""Which instances of a service run now, as Redis sees it: each says so every RENEW_S and its word holds HOLD_MS.

Two readers need it. The api's `/metrics` counts each cluster's ingest workers, evaluators and notifiers: a cluster
left with none of one is said there (`LagwatchServiceNotRunning`), where the services' own series, gone with them,
cannot say it. And `lagwatch forget-cluster` deletes every key of a cluster: an ingest worker or an evaluator still
running would write its windows, statuses, results and counters back at once. Instances on several hosts agree on
Redis's clock (the scripts read it), not on theirs. An instance killed leaves its entry, which lapses HOLD_MS later;
one stopped takes it away at once (`keys.instances`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

from redis.asyncio import Redis
from redis.exceptions import RedisError

from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.lua import SERVER_MS
from lagwatch.shared.runtime.redis_client import reply, text
from lagwatch.shared.runtime.service_lifecycle import pause

# A running service instance says so (this module): its entry holds until ARGV[2] ms from now on Redis's
# clock (the instances' clocks may disagree by more than that), and those past theirs (an instance killed) go.
# KEYS: the instances' zset; ARGV: instance id, ms its entry holds
ANNOUNCE_PRESENCE = f"""{SERVER_MS}
local key, now, hold_ms = KEYS[1], server_ms(), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
redis.call('ZADD', key, now + hold_ms, ARGV[1])
if redis.call('PTTL', key) < hold_ms then redis.call('PEXPIRE', key, hold_ms) end  -- the key goes with the last word
return 0
"""

# The instances whose entries hold now, on Redis's clock. KEYS: the instances' zset
PRESENT_INSTANCES = SERVER_MS + "\nreturn redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. server_ms(), '+inf')\n"
log = logging.getLogger(__name__)

SERVICES = ("ingest", "evaluator", "notifier")  # those of a cluster that say they run
RENEW_S = 10.0
WITHDRAW_WAIT_S = 1.0  # a stop does not wait on a Redis that does not answer: the entry lapses by itself
HOLD_MS = 30_000  # three renewals: a Redis failover or a long pause of one does not make an instance look gone


class Presence:
    """One instance's entry among the service's of the cluster (a zset: instance id -> until when, ms on Redis's
    clock)."""

    def __init__(
        self, redis: Redis, cluster: str, service: str, *, renew_s: float = RENEW_S, hold_ms: int = HOLD_MS
    ) -> None:
        self.redis = redis
        self.key = keys.instances(cluster, service)
        self.instance = uuid.uuid4().hex
        self.renew_s = renew_s
        self.hold_ms = hold_ms
        self._announce = redis.register_script(ANNOUNCE_PRESENCE)
        self._running: asyncio.Task[None] | None = None

    def start(self, stopping: asyncio.Event) -> None:
        self._running = asyncio.create_task(self.keep_announcing(stopping), name=f"presence {self.key}")

    async def stop(self) -> None:
        """Withdraw now: the service writes nothing more (call it before closing the Redis client)."""
        if self._running is not None:
            self._running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._running
            # the cancel may have cut short the withdrawal a stop had begun: the entry would stay until it lapses
            await self.withdraw()

    async def announce(self) -> None:
        await self._announce(keys=[self.key], args=[self.instance, self.hold_ms])

    async def keep_announcing(self, stopping: asyncio.Event) -> None:
        """Announce every `renew_s` until `stopping`, then withdraw. Redis away: tried again at the next renewal
        (the service's own Redis checks say it is away; the entry lapses meanwhile, as it should)."""
        try:
            while not stopping.is_set():
                try:
                    await self.announce()
                except RedisError as exc:
                    log.debug("presence under %s not renewed: %s", self.key, exc)
                except Exception:  # never die silently: the instance would look gone and raise an alert
                    log.exception("presence under %s not renewed; trying again", self.key)
                await pause(stopping, self.renew_s)
        finally:
            await self.withdraw()

    async def withdraw(self) -> None:
        try:
            async with asyncio.timeout(WITHDRAW_WAIT_S):
                await reply(self.redis.zrem(self.key, self.instance))
        except (RedisError, TimeoutError) as exc:  # it lapses by itself
            log.debug("presence under %s not withdrawn: %s", self.key, exc)


async def present(redis: Redis, cluster: str, service: str) -> list[str]:
    """The ids of the service's instances running for the cluster (their entries hold now)."""
    found = await redis.register_script(PRESENT_INSTANCES)(keys=[keys.instances(cluster, service)])
    return [text(instance) for instance in found]


async def running_counts(redis: Redis, cluster: str) -> dict[str, int]:
    """How many instances of each service run for the cluster (the api's metric and dashboard)."""
    return {service: len(await present(redis, cluster, service)) for service in SERVICES}
