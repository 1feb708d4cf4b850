"""Reading the stored windows: groups with their partitions (`stored_group.py`), the listings of clusters, groups and
topics, and the topics' broker rings and histories. Key layout: `keys.py`.

A group's partitions need their topics' broker rings and histories, which live in other slots: a group read is two
round trips (group keys, then topic keys)."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import ProbedLog, Sample
from lagwatch.shared.runtime import clock
from lagwatch.shared.runtime.redis_client import pairs, reply
from lagwatch.shared.windows import scripts
from lagwatch.shared.windows.clock_offset import CoordinatorClocks
from lagwatch.shared.windows.log_probes import probes_of
from lagwatch.shared.windows.packing import COMMIT_ENTRY, unpack_broker_ring
from lagwatch.shared.windows.stored_group import StoredGroup, TopicData, TopicPartition, stored_partitions

log = logging.getLogger(__name__)
REBALANCE_WINDOW_MS = 3_600_000  # rebalances are counted over the last hour
TOPICS_PER_CALL = 1000  # per READ_TOPIC_FIELDS call (a script holds Redis while it runs: a few ms here)
WARNED_MAX = 1000
_WARNED: set[bytes] = set()  # unreadable window fields already logged


class WindowReads:
    """Reads of every window of every cluster in one Redis (or Redis Cluster) database."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self.cluster_mode = isinstance(redis, RedisCluster)

    async def list_clusters(self) -> list[str]:
        return sorted(c.decode() for c in await reply(self.redis.smembers(keys.CLUSTERS)))

    async def list_groups(self, cluster: str) -> list[str]:
        return sorted(g.decode() for g in await self.redis.zrange(keys.groups_index(cluster), 0, -1))

    async def list_topics(self, cluster: str) -> dict[str, int]:
        """Topics seen by the broker-offset poller, with their partition counts."""
        raw = await reply(self.redis.hgetall(keys.topics_index(cluster)))
        return {t.decode(): int(n) for t, n in sorted(raw.items())}

    async def topic_offsets(self, cluster: str, topic: str) -> list[int | None] | None:
        """Latest log-end offset per partition of a topic, or None for an unknown topic."""
        count = await reply(self.redis.hget(keys.topics_index(cluster), topic))
        if count is None:
            return None
        return list((await self.latest_broker_offsets(cluster, [(topic, p) for p in range(int(count))])).values())

    async def latest_broker_offsets(
        self, cluster: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        rings = await self.broker_rings(cluster, partitions)
        return {tp: (ring[-1] if ring else None) for tp, ring in rings.items()}

    async def broker_rings(self, cluster: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, list[int]]:
        """The broker-offset rings (offsets only, oldest first) of the given partitions; [] where none."""
        raw = await self._topic_fields(cluster, partitions, keys.broker_ring)
        return {tp: [offset for offset, _ in unpack_broker_ring(data)] if data else [] for tp, data in raw.items()}

    async def offset_histories(
        self, cluster: str, partitions: Iterable[TopicPartition], key: Callable[[str, str], str] = keys.offset_history
    ) -> dict[TopicPartition, list[Sample]]:
        """The log-end histories (for lag in seconds) of the given partitions; [] where none. With
        `key=keys.log_start_history`, their log-start histories."""
        raw = await self._topic_fields(cluster, partitions, key)
        return {tp: [Sample(o, t) for o, t in unpack_broker_ring(data)] if data else [] for tp, data in raw.items()}

    async def rebalance_times(self, cluster: str, groups: Sequence[str], now_ms: int) -> dict[str, list[int]]:
        """When each of these groups' generations of the last hour started (ms, oldest first)."""
        if not groups:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for group in groups:
                pipe.zrangebyscore(
                    keys.group_rebalances(cluster, group), now_ms - REBALANCE_WINDOW_MS, "+inf", withscores=True
                )
            replies = await pipe.execute()
        return {group: [int(at) for _, at in reply] for group, reply in zip(groups, replies, strict=True)}

    async def get_group(self, cluster: str, group: str) -> StoredGroup | None:
        """A group's windows with their broker rings and owners, or None when the group is unknown."""
        return (await self.get_groups(cluster, [group]))[0]

    async def get_groups(
        self, cluster: str, groups: Sequence[str], now_ms: int | None = None
    ) -> list[StoredGroup | None]:
        """Several groups in two round trips (group keys, then their topics' keys). On a single server the group keys
        are read by one script call (`READ_GROUPS`), far cheaper for redis-py than four commands per group."""
        if not groups:
            return []
        since = (now_ms if now_ms is not None else clock.now_ms()) - REBALANCE_WINDOW_MS
        raw_groups = await self._read_group_keys(cluster, groups, since)
        topics = await self._topic_data(
            cluster, {tp for windows, meta, _, _ in raw_groups if meta[0] is not None for tp in windows}
        )
        return [
            None  # never stored a commit, expired or deleted
            if last is None
            else StoredGroup(
                cluster,
                group,
                int(last),
                stored_partitions(windows, owners, topics),
                generation=None if generation is None else int(generation),
                rebalances_last_hour=rebalances,
                clock_offset_ms=topics.clocks.of_group(group),
            )
            for group, (windows, (last, generation), owners, rebalances) in zip(groups, raw_groups, strict=True)
        ]

    async def _read_group_keys(self, cluster: str, groups: Sequence[str], since: int) -> list[list[Any]]:
        """Per group: its windows by partition (`_readable_windows`), (last, generation), owners and rebalances since
        `since`."""
        if self.cluster_mode:
            async with self.redis.pipeline(transaction=False) as pipe:
                for group in groups:
                    windows_key, meta_key, owners_key, rebalances_key = keys.group_keys(cluster, group)
                    pipe.hgetall(windows_key)
                    pipe.hmget(meta_key, ["last", "generation"])
                    pipe.hgetall(owners_key)
                    pipe.zcount(rebalances_key, since, "+inf")
                replies = await pipe.execute()
        else:
            group_keys = [k for group in groups for k in keys.group_keys(cluster, group)]
            replies = await self.redis.register_script(scripts.READ_GROUPS)(keys=group_keys, args=[since])
            for i in range(0, len(replies), 4):
                replies[i], replies[i + 2] = pairs(replies[i]), pairs(replies[i + 2])
        raw_groups = [replies[i : i + 4] for i in range(0, len(replies), 4)]
        for raw in raw_groups:
            raw[0] = _readable_windows(cluster, raw[0])
        return raw_groups

    async def _topic_data(self, cluster: str, partitions: set[TopicPartition]) -> TopicData:
        """What these partitions' topics hold for them: broker rings, log-end and log-start histories, and the topics'
        partition counts and `retention.ms` (where known)."""
        topics = {topic for topic, _ in partitions}
        rings, histories, log_starts, counts, retention, (clocks, caught_up, unread) = await asyncio.gather(
            self.broker_rings(cluster, partitions),
            self.offset_histories(cluster, partitions),
            self.offset_histories(cluster, partitions, keys.log_start_history),
            self._topic_numbers(keys.topics_index(cluster), topics),
            self._topic_numbers(keys.topic_retention(cluster), topics),
            self._clocks_and_probes(cluster, partitions),
        )
        return TopicData(rings, histories, log_starts, counts, retention, clocks, caught_up, unread)

    async def _clocks_and_probes(
        self, cluster: str, partitions: set[TopicPartition]
    ) -> tuple[CoordinatorClocks, dict[TopicPartition, ProbedLog], dict[TopicPartition, ProbedLog]]:
        """The coordinators' commit clocks, and the log probe's answers for these partitions: those that found only
        markers, and those that found an unread record."""
        clocks, caught_up, unread = await asyncio.gather(
            reply(self.redis.hgetall(keys.commit_clock(cluster))),
            self._topic_fields(cluster, partitions, keys.log_probes),
            self._topic_fields(cluster, partitions, keys.log_probes_unread),
        )
        return CoordinatorClocks.parse(clocks), probes_of(caught_up), probes_of(unread)

    async def _topic_numbers(self, key: str, topics: Iterable[str]) -> dict[str, int]:
        """A per-topic number from a topic -> number hash, for the topics that have one."""
        names = sorted(topics)
        if not names:
            return {}
        values = await reply(self.redis.hmget(key, names))
        return {topic: int(n) for topic, n in zip(names, values, strict=True) if n is not None}

    async def _topic_fields(
        self, cluster: str, partitions: Iterable[TopicPartition], key: Callable[[str, str], str]
    ) -> dict[TopicPartition, bytes | None]:
        """The per-partition values of a per-topic hash (`key(cluster, topic)`), one HMGET per topic."""
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, partition in partitions:
            by_topic[topic].append(partition)
        if not by_topic:
            return {}
        if self.cluster_mode:
            async with self.redis.pipeline(transaction=False) as pipe:
                for topic, parts in by_topic.items():
                    pipe.hmget(key(cluster, topic), parts)
                replies = await pipe.execute()
        else:  # script calls of up to TOPICS_PER_CALL topics: an evaluation of 500 groups reads ~500 topics, twice
            read = self.redis.register_script(scripts.READ_TOPIC_FIELDS)
            topics = list(by_topic.items())
            replies = []
            for i in range(0, len(topics), TOPICS_PER_CALL):
                chunk = topics[i : i + TOPICS_PER_CALL]
                replies += await read(
                    keys=[key(cluster, topic) for topic, _ in chunk],
                    args=[" ".join(map(str, parts)) for _, parts in chunk],
                )
        return {
            (topic, partition): raw
            for (topic, parts), values in zip(by_topic.items(), replies, strict=True)
            for partition, raw in zip(parts, values, strict=True)
        }


def _readable_windows(cluster: str, windows: Mapping[bytes, bytes]) -> dict[TopicPartition, tuple[bytes, bytes]]:
    """The group's windows hash as partition -> (field, ring), each field parsed once. Fields that do not name a
    partition (`<topic>:<n>`), or hold no whole ring of entries, are left out: lagwatch never writes them, and one
    would otherwise fail the read of every group asked for with it (an evaluator chunk, retried for ever)."""
    readable = {}
    for name, packed in windows.items():
        try:
            tp = keys.parse_partition_field(name)
        except (ValueError, UnicodeDecodeError):
            tp = None
        if tp is not None and len(packed) % COMMIT_ENTRY.size == 0:
            readable[tp] = (name, packed)
        elif name not in _WARNED and len(_WARNED) < WARNED_MAX:  # one line per field, not one per evaluation
            _WARNED.add(name)
            log.warning("%s: window field %r is not a partition's ring; skipped", cluster, name[:200])
    return readable
