"""Forgetting stored windows: groups (deleted, expired or excluded), a topic of a group or of every group, and all
that a cluster's Kafka said. Key layout: `keys.py`."""

from __future__ import annotations

from collections.abc import Sequence

from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import WindowConfig
from lagwatch.shared.runtime import clock
from lagwatch.shared.runtime.redis_client import reply
from lagwatch.shared.windows import scripts
from lagwatch.shared.windows.script_calls import eval_many
from lagwatch.shared.windows.window_reads import WindowReads


class WindowDeletions:
    """Deletes of windows of every cluster in one Redis (or Redis Cluster) database."""

    def __init__(self, reads: WindowReads, config: WindowConfig) -> None:
        self.reads, self.redis, self.config = reads, reads.redis, config

    async def delete_group(self, cluster: str, group: str) -> bool:
        """Forget a group; True when it existed."""
        return await self.delete_groups(cluster, [group])

    async def delete_groups(self, cluster: str, groups: Sequence[str]) -> bool:
        """Forget many groups in one round trip; True when any of them existed."""
        if not groups:
            return False
        async with self.redis.pipeline(transaction=False) as pipe:
            for group in groups:
                pipe.delete(*keys.group_keys(cluster, group))
            pipe.zrem(keys.groups_index(cluster), *groups)
            return any(await pipe.execute())

    async def delete_group_topic(self, cluster: str, group: str, topic: str) -> bool:
        """Forget one topic of a group (its windows and owners); the group goes too when no topic is left, as in
        Burrow. True when the group existed."""
        windows_key, meta_key, _, _ = keys.group_keys(cluster, group)
        if not await self.redis.exists(meta_key):
            return False
        # the ingest worker holding the group in memory must drop the topic too, or its next write brings it back
        await reply(self.redis.hset(keys.topic_deletions(cluster), f"{group}\n{topic}", str(clock.now_ms())))
        await self._remove_topic(cluster, [group], topic)
        if not await self.redis.exists(windows_key):  # Redis drops an emptied hash
            await self.delete_group(cluster, group)
        return True

    async def delete_topic(self, cluster: str, topic: str) -> int:
        """Remove a deleted topic from every group and forget its broker offsets and log-end history (a topic
        re-created under the name starts afresh); returns partitions removed."""
        removed = await self._remove_topic(cluster, await self.reads.list_groups(cluster), topic)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(*keys.topic_keys(cluster, topic))
            pipe.hdel(keys.topics_index(cluster), topic)
            pipe.hdel(keys.topic_retention(cluster), topic)
            await pipe.execute()
        return sum(removed)

    async def _remove_topic(self, cluster: str, groups: Sequence[str], topic: str) -> list[int]:
        """The topic's windows and owners taken out of each group's; partitions removed, per group."""
        calls = []
        for group in groups:
            windows_key, _, owners_key, _ = keys.group_keys(cluster, group)
            calls.append((2, windows_key, owners_key, topic))
        return await eval_many(self.redis, scripts.DELETE_TOPIC_FROM_GROUP, calls)

    async def forget_kafka_data(self, cluster: str, chunk: int = 1000) -> tuple[list[str], list[str]]:
        """Forget what the cluster's Kafka said (its Kafka cluster was replaced under the name): every group's
        windows, metadata and owners, and every topic's log-end samples, partition count and retention, and the
        ingest's read-through marks and pending topic deletions. The evaluator's state of each group stays, for it
        to record the group NOTFOUND. Returns the groups and the topics forgotten."""
        groups = await self.reads.list_groups(cluster)
        for start in range(0, len(groups), chunk):
            await self.delete_groups(cluster, groups[start : start + chunk])
        topics = list(await self.reads.list_topics(cluster))
        async with self.redis.pipeline(transaction=False) as pipe:
            for topic in topics:
                pipe.delete(*keys.topic_keys(cluster, topic))
            pipe.delete(
                keys.topics_index(cluster),
                keys.topic_retention(cluster),
                keys.read_through(cluster),
                keys.topic_deletions(cluster),
            )
            await pipe.execute()
        return groups, topics

    async def unindex_expired(self, cluster: str, now_ms: int) -> int:
        """Take every group whose newest commit is older than `expire-group` out of the group index (its keys expire
        by themselves in Redis; the index would keep the name forever, listed and swept). One command, however
        many: a group committing again is re-added by its writer (ZADD GT keeps a newer score). Returns how many."""
        cutoff = now_ms - self.config.expire_group_ms
        return int(await self.redis.zremrangebyscore(keys.groups_index(cluster), "-inf", f"({cutoff}"))

    async def expire_groups(self, cluster: str, now_ms: int) -> list[str]:
        """Delete groups whose newest commit is older than `expire-group`; returns their names."""
        cutoff = now_ms - self.config.expire_group_ms
        expired = [g.decode() for g in await self.redis.zrangebyscore(keys.groups_index(cluster), "-inf", f"({cutoff}")]
        await self.delete_groups(cluster, expired)
        return expired
