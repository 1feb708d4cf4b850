"""What the evaluator keeps per group for each kind of event it publishes — a state hash and an outbox list of
events not yet acknowledged by Kafka (status_store.py, lag_state_store.py) — read for many groups in one round trip."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from redis.asyncio import Redis

KeyOf = Callable[[str, str], str]  # (cluster, group) -> key


async def read_states_and_outboxes(
    redis: Redis, cluster: str, groups: Sequence[str], state_key: KeyOf, outbox_key: KeyOf
) -> list[tuple[dict[bytes, bytes], list[bytes]]]:
    """(state hash, outbox events oldest first) per group, in the order given."""
    async with redis.pipeline(transaction=False) as pipe:
        for group in groups:
            pipe.hgetall(state_key(cluster, group))
            pipe.lrange(outbox_key(cluster, group), 0, -1)
        replies = await pipe.execute()
    return [(replies[i], replies[i + 1]) for i in range(0, len(replies), 2)]
