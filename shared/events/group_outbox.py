"""What the evaluator keeps per group for each kind of event it publishes — a state hash and an outbox list of
events not yet acknowledged by Kafka (status_store.py, lag_state_store.py) — read for many groups at once, and
acknowledged events taken out of many outboxes at once.

On a single Redis server each is one script call however many groups (`READ_STATES_AND_OUTBOXES`,
`ACKNOWLEDGE_EVENTS`: a cold start reads every group, and redis-py's cost is per command); on Redis Cluster, whose
keys span slots, a pipeline of plain commands.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from lagwatch.shared.events import scripts
from lagwatch.shared.runtime.redis_client import pairs

KeyOf = Callable[[str, str], str]  # (cluster, group) -> key


async def read_states_and_outboxes(
    redis: Redis, cluster: str, groups: Sequence[str], state_key: KeyOf, outbox_key: KeyOf
) -> list[tuple[dict[bytes, bytes], list[bytes]]]:
    """(state hash, outbox events oldest first) per group, in the order given."""
    if not groups:
        return []
    if not isinstance(redis, RedisCluster):
        group_keys = [k for group in groups for k in (state_key(cluster, group), outbox_key(cluster, group))]
        replies = await redis.register_script(scripts.READ_STATES_AND_OUTBOXES)(keys=group_keys)
        return [(pairs(replies[i]), replies[i + 1]) for i in range(0, len(replies), 2)]
    async with redis.pipeline(transaction=False) as pipe:
        for group in groups:
            pipe.hgetall(state_key(cluster, group))
            pipe.lrange(outbox_key(cluster, group), 0, -1)
        replies = await pipe.execute()
    return [(replies[i], replies[i + 1]) for i in range(0, len(replies), 2)]


async def acknowledge(redis: Redis, cluster: str, events: Mapping[str, Sequence[bytes]], outbox_key: KeyOf) -> None:
    """Take acknowledged events ({group: events}) out of their groups' outboxes."""
    pending = [(outbox_key(cluster, group), event) for group, acked in events.items() for event in acked]
    if not pending:
        return
    if not isinstance(redis, RedisCluster):
        await redis.register_script(scripts.ACKNOWLEDGE_EVENTS)(
            keys=[k for k, _ in pending], args=[event for _, event in pending]
        )
        return
    async with redis.pipeline(transaction=False) as pipe:
        for key, event in pending:
            pipe.lrem(key, 1, event)
        await pipe.execute()
