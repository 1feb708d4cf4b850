"""API-created subscriptions in Redis (`lw:n:{notify}:subs`, shared/protocol/keys.py): the api writes them, the
notifiers read them (and pick changes up when the version moves), the evaluators read the lag-seconds index."""

from __future__ import annotations

import json
import logging

from redis.asyncio import Redis
from redis.exceptions import WatchError

from lagwatch.shared.notifications.subscriptions.documents import kebab, to_document
from lagwatch.shared.notifications.subscriptions.lag_threshold_index import index_entry
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.config import SubscriptionConfig, build_section
from lagwatch.shared.runtime.redis_client import reply

log = logging.getLogger(__name__)


def _parse_stored(sub_id: str, text: bytes | str) -> SubscriptionConfig | None:
    try:
        config: SubscriptionConfig = build_section(
            SubscriptionConfig, kebab(json.loads(text)), f"subscription {sub_id}"
        )
        return config
    except Exception as exc:  # unreadable (stored by an older, laxer version, say): the others still count
        log.error("subscription %s in Redis is invalid and ignored: %s", sub_id, exc)
        return None


class SubscriptionStore:
    """API-created subscriptions in Redis; every change bumps a version the notifiers watch, and keeps the index of
    lag-seconds thresholds the evaluators read (`lw:n:{notify}:lag-thresholds`) in step, in the same transaction."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def version(self) -> int:
        return int(await self.redis.get(keys.SUBSCRIPTIONS_VERSION) or 0)

    async def all(self) -> dict[str, SubscriptionConfig]:
        raw = await reply(self.redis.hgetall(keys.SUBSCRIPTIONS))
        stored = {(k.decode() if isinstance(k, bytes) else k): text for k, text in raw.items()}
        return {k: config for k, text in stored.items() if (config := _parse_stored(k, text)) is not None}

    async def count(self) -> int:
        return int(await reply(self.redis.hlen(keys.SUBSCRIPTIONS)))

    async def get(self, sub_id: str) -> SubscriptionConfig | None:
        """The subscription, or None when there is none or it cannot be read (it can still be deleted)."""
        text = await reply(self.redis.hget(keys.SUBSCRIPTIONS, sub_id))
        return None if text is None else _parse_stored(sub_id, text)

    async def put(self, config: SubscriptionConfig, *, create: bool) -> bool:
        """Store a subscription; with `create`, only if the id is free (False otherwise)."""
        text = json.dumps(to_document(config), sort_keys=True)
        lag_entry = index_entry(config)
        while True:
            async with self.redis.pipeline(transaction=True) as pipe:
                if create:  # only if the id is free; watched, so nothing is written for a refused create
                    await pipe.watch(keys.SUBSCRIPTIONS)
                    if await reply(pipe.hexists(keys.SUBSCRIPTIONS, config.id)):
                        return False
                    pipe.multi()  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
                pipe.hset(keys.SUBSCRIPTIONS, config.id, text)
                if lag_entry is None:
                    pipe.hdel(keys.LAG_THRESHOLDS, config.id)
                else:
                    pipe.hset(keys.LAG_THRESHOLDS, config.id, lag_entry)
                pipe.incr(keys.SUBSCRIPTIONS_VERSION)
                try:
                    await pipe.execute()
                    return True
                except WatchError:  # another subscription was written meanwhile: look again
                    continue

    async def delete(self, sub_id: str) -> bool:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hdel(keys.SUBSCRIPTIONS, sub_id)
            pipe.hdel(keys.LAG_THRESHOLDS, sub_id)
            pipe.delete(keys.notify_state(sub_id))  # its announced incidents; repeats are dropped by the timer
            pipe.incr(keys.SUBSCRIPTIONS_VERSION)
            removed, *_ = await pipe.execute()
        return bool(removed)
