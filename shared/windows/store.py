"""The window store on Redis: the windows of docs/rules.md §2, persisted, atomic and batched. Key layout: `keys.py`.

Commits are stored as the ingest stores them (`group_windows.py`), a group's read and write one transaction. A
commit's lag needs its partition's latest broker offset, which lives in another slot: the store reads those first
(one more round trip) unless the caller passes them in.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import NoScriptError, WatchError

from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Commit, OffsetEntry, PartitionInput, Sample, WindowConfig
from lagwatch.shared.runtime import clock, packed_commands
from lagwatch.shared.runtime.redis_client import pairs, reply
from lagwatch.shared.windows import scripts
from lagwatch.shared.windows.group_windows import GroupWindows, group_commands, index_commands, load_groups
from lagwatch.shared.windows.packing import COMMIT_ENTRY, commit_entry_at, unpack_broker_ring, unpack_commit_ring
from lagwatch.shared.windows.window import AddOutcome, padded_ring

TopicPartition = tuple[str, int]
log = logging.getLogger(__name__)
OWNER_SEPARATOR = "\x1f"
REBALANCE_WINDOW_MS = 3_600_000  # rebalances are counted over the last hour
GROUPS_PER_CALL = 200  # groups per `add_commits` transaction on a single Redis server
# Numbers a window may hold: the Lua scripts reading `last` and the history's JSON readers take numbers as doubles;
# past 2^53 they are not exact (a timestamp of 2^62 once came back as "4.6116860184273879e+18", which every reader
# then failed to parse)
MAX_SCRIPT_NUMBER = 2**53
WARNED_MAX = 1000
_WARNED: set[bytes] = set()  # unreadable window fields already logged


class GroupMetadataUpdate(NamedTuple):
    """A classic group's rebalance outcome for `set_groups_metadata`."""

    group: str
    generation: int
    started_at: int
    owners: Mapping[TopicPartition, tuple[str, str]]  # (topic, partition) -> (client host, client id)


class MemberChange(NamedTuple):
    """One record of a new-protocol (KIP-848) group for `set_groups_metadata`: a member's client, or its assignment.
    Redis keeps each member's latest of both (in the group's metadata hash) and derives the owners and the
    generation (the highest member epoch) from all of them, so whichever worker reads the next record, after a
    restart or a rebalance of lagwatch's workers, changes the owners of that member only."""

    group: str
    member_id: str
    started_at: int  # the record's time: a new generation's rebalance starts then
    client: tuple[str, str] | None = None  # a member record: (client host, client id)
    assignment: tuple[int, Mapping[str, Sequence[int]]] | None = None  # an assignment: (epoch, partitions by topic)
    # neither: a tombstone; of the member (it left, its assignment goes with it) or, `of_assignment`, of its assignment
    of_assignment: bool = False

    def operation(self) -> list[Any]:
        """[member id, "m" (member) or "a" (assignment), its value or None (a tombstone), time], for the script."""
        if self.client is not None:
            return [self.member_id, "m", OWNER_SEPARATOR.join(self.client), self.started_at]
        if self.assignment is not None:
            epoch, partitions = self.assignment
            fields = [keys.partition_field(t, p) for t, parts in partitions.items() for p in parts]
            return [self.member_id, "a", {"epoch": epoch, "fields": fields}, self.started_at]
        return [self.member_id, "a" if self.of_assignment else "m", None, self.started_at]


@dataclass(slots=True)
class StoredPartition:
    """A partition of a group as stored: its commit ring (unpacked only when asked), its topic's broker ring and
    its owner. Most partitions of a healthy cluster are caught up, and rule 1 judges those from the newest entry."""

    topic: str
    partition: int
    packed: bytes
    broker_offsets: list[int]
    owner: str = ""
    client_id: str = ""
    history: list[Sample] = field(default_factory=list)  # log-end samples, for lag in seconds
    _entries: list[OffsetEntry] | None = None
    log_start: list[Sample] = field(default_factory=list)  # log-start samples, for retention risk
    retention_ms: int | None = None  # its topic's `retention.ms` where the broker let us read it

    @property
    def unpacked(self) -> bool:
        """Whether the ring was unpacked already (reading its ends alone is cheaper until it is)."""
        return self._entries is not None

    @property
    def entries(self) -> list[OffsetEntry]:
        if self._entries is None:
            self._entries = unpack_commit_ring(self.packed)
        return self._entries

    @property
    def current_lag(self) -> int:
        """Latest broker offset minus the newest committed offset, floored at 0 (0 when either is unknown)."""
        if not self.packed or not self.broker_offsets:
            return 0
        return max(0, self.broker_offsets[-1] - commit_entry_at(self.packed, -1).offset)

    def to_rule_input(self, intervals: int) -> PartitionInput:
        return PartitionInput(
            topic=self.topic,
            partition=self.partition,
            offsets=padded_ring(self.entries, intervals),
            broker_offsets=tuple(self.broker_offsets),
            current_lag=self.current_lag,
            owner=self.owner,
            client_id=self.client_id,
        )


@dataclass(slots=True)
class StoredGroup:
    cluster: str
    group: str
    last_commit_ms: int
    partitions: list[StoredPartition] = field(default_factory=list)  # sorted by (topic, partition)
    generation: int | None = None
    rebalances_last_hour: int = 0


TOPICS_PER_CALL = 1000  # per READ_TOPIC_FIELDS call (a script holds Redis while it runs: a few ms here)


class WindowStore:
    """Async access to every window of every cluster in one Redis (or Redis Cluster) database."""

    def __init__(self, redis: Redis, config: WindowConfig | None = None) -> None:
        self.redis = redis
        self.config = config or WindowConfig()
        self.cluster_mode = isinstance(redis, RedisCluster)

    # --- writes -------------------------------------------------------------------------------------------

    async def add_commits(
        self,
        cluster: str,
        commits: Sequence[Commit],
        now_ms: int,
        broker_offsets: Mapping[TopicPartition, int | None] | None = None,
    ) -> list[AddOutcome]:
        """Store a batch of commits, in order, as the ingest stores its own (`group_windows.py`); returns each
        commit's outcome, in input order. `broker_offsets` maps (topic, partition) to the latest log-end offset; when
        omitted it is read from Redis."""
        if not commits:
            return []
        _check_script_numbers(commits, now_ms)
        if broker_offsets is None:
            broker_offsets = await self.latest_broker_offsets(cluster, {(c.topic, c.partition) for c in commits})
        by_group: dict[str, list[Commit]] = defaultdict(list)
        for c in commits:
            by_group[c.group].append(c)
        added: dict[str, list[AddOutcome]] = {}
        for call in self._calls(cluster, list(by_group)):
            added |= await self._add_atomically(cluster, {g: by_group[g] for g in call}, broker_offsets, now_ms)
        of_group = {group: iter(outcomes) for group, outcomes in added.items()}
        return [next(of_group[c.group]) for c in commits]

    async def _add_atomically(
        self,
        cluster: str,
        commits: Mapping[str, Sequence[Commit]],
        broker_offsets: Mapping[TopicPartition, int | None],
        now_ms: int,
    ) -> dict[str, list[AddOutcome]]:
        """The groups' commits (groups of one hash slot) applied to their windows in one optimistic transaction.

        Unlike the ingest's groups, whose windows only the worker reading their offsets partition writes, these may
        have several writers: lagwatch's own group, whose partitions each ingest worker reports, and tools or tests.
        So the groups' keys are watched before they are read, and written back in MULTI/EXEC: a writer in between
        fails the EXEC, and it all starts again from a fresh read. No writer's commits are lost, none waits on a
        lock a dead writer would hold, and a write is only ever the rings its own commits changed."""
        watched = [k for group in commits for k in keys.group_keys(cluster, group)[:2]]  # windows, meta
        expire_ms = self.config.expire_group_ms
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                await pipe.watch(*watched)
                groups = await load_groups(self.redis, cluster, dict.fromkeys(commits, -1))
                added = {g: self._apply(groups[g], c, broker_offsets, now_ms) for g, c in commits.items()}
                writes = [w for g, windows in groups.items() if (w := windows.take_write(g, expire_ms, 0)) is not None]
                if not writes:
                    return added
                commands: list[tuple[Any, ...]] = []
                for write in writes:
                    group_commands(write, commands, [])
                pipe.multi()  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
                for command in commands:
                    pipe.execute_command(*command)
                with contextlib.suppress(WatchError):  # another writer came between: read again
                    await pipe.execute()
                    break
        await packed_commands.execute(self.redis, index_commands(cluster, writes))
        return added

    def _apply(
        self, windows: GroupWindows, commits: Sequence[Commit], latest: Mapping[TopicPartition, int | None], now: int
    ) -> list[AddOutcome]:
        windows.open(now, self.config)
        return [
            windows.add(
                keys.partition_field(c.topic, c.partition),
                c.offset,
                c.timestamp,
                c.order,
                c.observed_at,
                latest.get((c.topic, c.partition)),
                now,
                self.config,
            )
            for c in commits
        ]

    async def _eval_many(self, source: str, calls: list[tuple[Any, ...]]) -> list[Any]:
        """Many calls of one script, each `(numkeys, *keys, *args)`, in one round trip: a pipeline on a single
        server; concurrent calls on a cluster, whose redis-py client cannot pipeline scripts. EVALSHA straight
        away, loading the script only when Redis lacks it (redis-py's script objects ask SCRIPT EXISTS before
        every pipeline: a round trip that kept Redis idle while the ingest decoded). Calls refused for a missing
        script are re-run once it is loaded; the others are not run twice."""
        sha = hashlib.sha1(source.encode()).hexdigest()
        results = await self._eval_each(sha, calls)
        missing = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
        if missing:
            await self.redis.script_load(source)
            for i, result in zip(missing, await self._eval_each(sha, [calls[i] for i in missing]), strict=True):
                results[i] = result
        for result in results:
            if isinstance(result, Exception):
                raise result
        return results

    async def _eval_each(self, sha: str, calls: list[tuple[Any, ...]]) -> list[Any]:
        if self.cluster_mode:
            replies = (reply(self.redis.evalsha(sha, *c)) for c in calls)
            return list(await asyncio.gather(*replies, return_exceptions=True))
        async with self.redis.pipeline(transaction=False) as pipe:
            for call in calls:
                pipe.evalsha(sha, *call)
            return await pipe.execute(raise_on_error=False)

    def _calls(self, cluster: str, groups: list[str]) -> list[list[str]]:
        """Groups per script call: all a call's keys must share a hash slot on Redis Cluster; a single server
        takes many groups per call (bounded, so one call never blocks Redis for long)."""
        if self.cluster_mode:
            by_slot: dict[int, list[str]] = defaultdict(list)
            for group in groups:
                by_slot[key_slot(keys.group_windows(cluster, group).encode())].append(group)
            return list(by_slot.values())
        return [groups[i : i + GROUPS_PER_CALL] for i in range(0, len(groups), GROUPS_PER_CALL)]

    async def add_broker_offsets(
        self,
        cluster: str,
        topic: str,
        offsets: Sequence[int] | Mapping[int, int],
        sampled_at: int,
        partition_count: int | None = None,
    ) -> None:
        """Record one poll of a topic's log-end offsets: `offsets[p]` for partition p (a list or a mapping)."""
        by_partition = dict(offsets) if isinstance(offsets, Mapping) else dict(enumerate(offsets))
        counts = {} if partition_count is None else {topic: partition_count}
        await self.add_broker_polls(cluster, {topic: by_partition}, sampled_at, counts)

    async def add_broker_polls(
        self,
        cluster: str,
        polls: Mapping[str, Mapping[int, int]],
        sampled_at: int,
        partition_counts: Mapping[str, int] | None = None,
    ) -> None:
        """Record one poll of many topics at once: each topic's broker ring and its log-end history, in a few round
        trips whatever the number of topics. `polls` maps topic -> {partition: log-end offset}."""
        polls = {topic: offsets for topic, offsets in polls.items() if offsets}
        if not polls:
            return
        cfg = self.config
        rings, histories = [], []
        for topic, offsets in polls.items():
            pairs = [value for partition, offset in sorted(offsets.items()) for value in (partition, offset)]
            rings.append((1, keys.broker_ring(cluster, topic), cfg.intervals, sampled_at, *pairs))
            histories.append(
                (
                    1,
                    keys.offset_history(cluster, topic),
                    cfg.lag_history_ms,
                    cfg.lag_history_samples,
                    sampled_at,
                    *pairs,
                )
            )
        await self._eval_many(scripts.APPEND_BROKER_OFFSETS, rings)
        await self._eval_many(scripts.APPEND_OFFSET_HISTORY, histories)
        counts = partition_counts or {}
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(
                keys.topics_index(cluster),
                mapping={topic: counts.get(topic, max(offsets) + 1) for topic, offsets in polls.items()},
            )
            pipe.sadd(keys.CLUSTERS, cluster)
            await pipe.execute()

    async def offset_histories(
        self, cluster: str, partitions: Iterable[TopicPartition], key: Callable[[str, str], str] = keys.offset_history
    ) -> dict[TopicPartition, list[Sample]]:
        """The log-end histories (for lag in seconds) of the given partitions; [] where none. With
        `key=keys.log_start_history`, their log-start histories."""
        raw = await self._topic_fields(cluster, partitions, key)
        return {tp: [Sample(o, t) for o, t in unpack_broker_ring(data)] if data else [] for tp, data in raw.items()}

    async def add_log_start_polls(self, cluster: str, polls: Mapping[str, Mapping[int, int]], sampled_at: int) -> None:
        """Record one poll of log-start offsets (topic -> {partition: offset}) in their histories (retention.py)."""
        cfg = self.config
        calls = [
            (
                1,
                keys.log_start_history(cluster, topic),
                cfg.lag_history_ms,
                cfg.lag_history_samples,
                sampled_at,
                *(v for partition, offset in sorted(offsets.items()) for v in (partition, offset)),
            )
            for topic, offsets in polls.items()
            if offsets
        ]
        if calls:
            await self._eval_many(scripts.APPEND_OFFSET_HISTORY, calls)

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

    async def set_group_metadata(
        self,
        cluster: str,
        group: str,
        *,
        generation: int,
        started_at: int,
        owners: Mapping[TopicPartition, tuple[str, str]],
        now_ms: int,
    ) -> None:
        """Record a rebalance's outcome: the generation, and each partition's (client host, client id)."""
        await self.set_groups_metadata(cluster, [GroupMetadataUpdate(group, generation, started_at, owners)], now_ms)

    async def set_groups_metadata(
        self, cluster: str, updates: Sequence[GroupMetadataUpdate | MemberChange], now_ms: int
    ) -> None:
        """Several rebalances in one round trip or two: the classic ones in the given order, then each new-protocol
        group's records in theirs (one call per group: calls may run concurrently on a cluster). A group does not
        change protocol twice within one flush."""
        calls = []
        members: dict[str, list[list[Any]]] = {}  # group -> its records' operations, in order
        for u in updates:
            if isinstance(u, MemberChange):
                members.setdefault(u.group, []).append(u.operation())
                continue
            _, meta_key, owners_key, rebalances_key = keys.group_keys(cluster, u.group)
            args: list[object] = [u.generation, u.started_at, self.config.expire_group_ms, now_ms, REBALANCE_WINDOW_MS]
            for (topic, partition), (host, client) in u.owners.items():
                args += [keys.partition_field(topic, partition), f"{host}{OWNER_SEPARATOR}{client}"]
            calls.append((3, meta_key, owners_key, rebalances_key, *args))
        if calls:
            await self._eval_many(scripts.SET_GROUP_METADATA, calls)
        member_calls = []
        for group, operations in members.items():
            _, meta_key, owners_key, rebalances_key = keys.group_keys(cluster, group)
            limits = (self.config.expire_group_ms, now_ms, REBALANCE_WINDOW_MS)
            member_calls.append((3, meta_key, owners_key, rebalances_key, *limits, json.dumps(operations)))
        if member_calls:
            await self._eval_many(scripts.APPLY_MEMBER_CHANGES, member_calls)

    # --- deletes and expiry ----------------------------------------------------------------------------------

    async def delete_group(self, cluster: str, group: str) -> bool:
        """Forget a group; True when it existed."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(*keys.group_keys(cluster, group))
            pipe.zrem(keys.groups_index(cluster), group)
            deleted_keys, removed = await pipe.execute()
        return bool(deleted_keys or removed)

    async def delete_groups(self, cluster: str, groups: Sequence[str]) -> None:
        """Forget many groups in one round trip."""
        if not groups:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for group in groups:
                pipe.delete(*keys.group_keys(cluster, group))
            pipe.zrem(keys.groups_index(cluster), *groups)
            await pipe.execute()

    async def delete_group_topic(self, cluster: str, group: str, topic: str) -> bool:
        """Forget one topic of a group (its windows and owners); the group goes too when no topic is left, as in
        Burrow. True when the group existed."""
        windows_key, meta_key, owners_key, _ = keys.group_keys(cluster, group)
        if not await self.redis.exists(meta_key):
            return False
        # the ingest worker holding the group in memory must drop the topic too, or its next write brings it back
        await reply(self.redis.hset(keys.topic_deletions(cluster), f"{group}\n{topic}", str(clock.now_ms())))
        await self._eval_many(scripts.DELETE_TOPIC_FROM_GROUP, [(2, windows_key, owners_key, topic)])
        if not await self.redis.exists(windows_key):  # Redis drops an emptied hash
            await self.delete_group(cluster, group)
        return True

    async def delete_topic(self, cluster: str, topic: str) -> int:
        """Remove a deleted topic from every group and forget its broker offsets and log-end history (a topic
        re-created under the name starts afresh); returns partitions removed."""
        groups = await self.list_groups(cluster)
        calls = []
        for group in groups:
            windows_key, _, owners_key, _ = keys.group_keys(cluster, group)
            calls.append((2, windows_key, owners_key, topic))
        removed = await self._eval_many(scripts.DELETE_TOPIC_FROM_GROUP, calls) if calls else []
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(*keys.topic_keys(cluster, topic))
            pipe.hdel(keys.topics_index(cluster), topic)
            pipe.hdel(keys.topic_retention(cluster), topic)
            await pipe.execute()
        return sum(removed)

    async def forget_kafka_data(self, cluster: str, chunk: int = 1000) -> tuple[list[str], list[str]]:
        """Forget what the cluster's Kafka said (its Kafka cluster was replaced under the name): every group's
        windows, metadata and owners, and every topic's log-end samples, partition count and retention, and the
        ingest's read-through marks and pending topic deletions. The evaluator's state of each group stays, for it
        to record the group NOTFOUND. Returns the groups and the topics forgotten."""
        groups = await self.list_groups(cluster)
        for start in range(0, len(groups), chunk):
            await self.delete_groups(cluster, groups[start : start + chunk])
        topics = list(await self.list_topics(cluster))
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

    # --- reads --------------------------------------------------------------------------------------------

    async def list_clusters(self) -> list[str]:
        return sorted(c.decode() for c in await reply(self.redis.smembers(keys.CLUSTERS)))

    async def list_groups(self, cluster: str) -> list[str]:
        return sorted(g.decode() for g in await self.redis.zrange(keys.groups_index(cluster), 0, -1))

    async def list_topics(self, cluster: str) -> dict[str, int]:
        """Topics seen by the broker-offset poller, with their partition counts."""
        raw = await reply(self.redis.hgetall(keys.topics_index(cluster)))
        return {t.decode(): int(n) for t, n in sorted(raw.items())}

    async def partition_counts(self, cluster: str, topics: Iterable[str]) -> dict[str, int]:
        """The partition counts of these topics, as the broker-offset poller last saw them (unknown ones left out)."""
        return await self._topic_numbers(keys.topics_index(cluster), topics)

    async def set_topic_retention(self, cluster: str, retention_ms: Mapping[str, int | None]) -> None:
        """Record the topics' `retention.ms` as read from the broker (None: unlimited or compact-only)."""
        known = {topic: ms for topic, ms in retention_ms.items() if ms is not None}
        unlimited = [topic for topic, ms in retention_ms.items() if ms is None]
        async with self.redis.pipeline(transaction=False) as pipe:
            if known:
                pipe.hset(keys.topic_retention(cluster), mapping=known)
            if unlimited:
                pipe.hdel(keys.topic_retention(cluster), *unlimited)
            await pipe.execute()

    async def topic_retention_ms(self, cluster: str, topics: Iterable[str]) -> dict[str, int]:
        """The `retention.ms` of these topics where it is known (set_topic_retention)."""
        return await self._topic_numbers(keys.topic_retention(cluster), topics)

    async def _topic_numbers(self, key: str, topics: Iterable[str]) -> dict[str, int]:
        """A per-topic number from a topic -> number hash, for the topics that have one."""
        names = sorted(topics)
        if not names:
            return {}
        values = await reply(self.redis.hmget(key, names))
        return {topic: int(n) for topic, n in zip(names, values, strict=True) if n is not None}

    async def topic_offsets(self, cluster: str, topic: str) -> list[int | None] | None:
        """Latest log-end offset per partition of a topic, or None for an unknown topic."""
        count = await reply(self.redis.hget(keys.topics_index(cluster), topic))
        if count is None:
            return None
        rings = await self.broker_rings(cluster, [(topic, p) for p in range(int(count))])
        return [ring[-1] if ring else None for ring in rings.values()]

    async def latest_broker_offsets(
        self, cluster: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        rings = await self.broker_rings(cluster, partitions)
        return {tp: (ring[-1] if ring else None) for tp, ring in rings.items()}

    async def broker_rings(self, cluster: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, list[int]]:
        """The broker-offset rings (offsets only, oldest first) of the given partitions; [] where none."""
        raw = await self._topic_fields(cluster, partitions, keys.broker_ring)
        return {tp: [offset for offset, _ in unpack_broker_ring(data)] if data else [] for tp, data in raw.items()}

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
        """Several groups in two round trips (group keys, then the broker rings their partitions need). On a single
        server the group keys are read by one script call (`READ_GROUPS`): four commands per group cost redis-py
        more than everything the evaluator does with their replies."""
        if not groups:
            return []
        since = (now_ms if now_ms is not None else clock.now_ms()) - REBALANCE_WINDOW_MS
        raw_groups = await self._read_group_keys(cluster, groups, since)
        needed = {tp for windows, meta, _, _ in raw_groups if meta[0] is not None for tp in windows}
        rings, histories, starts, counts, retention = await asyncio.gather(
            self.broker_rings(cluster, needed),
            self.offset_histories(cluster, needed),
            self.offset_histories(cluster, needed, keys.log_start_history),
            self.partition_counts(cluster, {topic for topic, _ in needed}),
            self.topic_retention_ms(cluster, {topic for topic, _ in needed}),
        )
        result: list[StoredGroup | None] = []
        for group, (windows, (last, generation), owners, rebalances) in zip(groups, raw_groups, strict=True):
            if last is None:  # never stored a commit, expired or deleted
                result.append(None)
                continue
            result.append(
                StoredGroup(
                    cluster,
                    group,
                    int(last),
                    _partitions(windows, owners, rings, histories, counts, starts, retention),
                    generation=None if generation is None else int(generation),
                    rebalances_last_hour=rebalances,
                )
            )
        return result

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


def _partitions(
    windows: Mapping[TopicPartition, tuple[bytes, bytes]],
    owners: Mapping[bytes, bytes],
    rings: Mapping[TopicPartition, list[int]],
    histories: Mapping[TopicPartition, list[Sample]],
    partition_counts: Mapping[str, int],
    log_starts: Mapping[TopicPartition, list[Sample]],
    retention_ms: Mapping[str, int] | None = None,
) -> list[StoredPartition]:
    """The group's partitions: those with a window, and every other partition of the topics it commits on (as
    Burrow creates all of a topic's partitions at a group's first commit on it): no commit, lag 0, status OK,
    complete 0, counted in `partition_count` and the group's `complete`."""
    parts = []
    seen: set[TopicPartition] = set()
    for tp, (raw_field, packed) in windows.items():
        seen.add(tp)
        owner, _, client_id = owners.get(raw_field, b"").decode().partition(OWNER_SEPARATOR)
        parts.append(
            StoredPartition(
                tp[0],
                tp[1],
                packed,
                rings.get(tp, []),
                owner,
                client_id,
                histories.get(tp, []),
                log_start=log_starts.get(tp, []),
                retention_ms=(retention_ms or {}).get(tp[0]),
            )
        )
    for topic in {topic for topic, _ in seen}:
        for partition in range(partition_counts.get(topic, 0)):
            if (topic, partition) not in seen:
                owned_by = owners.get(keys.partition_field(topic, partition).encode(), b"")
                owner, _, client_id = owned_by.decode().partition(OWNER_SEPARATOR)
                parts.append(StoredPartition(topic, partition, b"", [], owner, client_id))
    parts.sort(key=lambda p: (p.topic, p.partition))
    return parts


def _check_script_numbers(commits: Sequence[Commit], now_ms: int) -> None:
    """ValueError unless every number is an integer its readers take exactly (MAX_SCRIPT_NUMBER): the batch is
    refused before anything is written, so no window or `last` ever holds one they cannot read."""
    if not 0 <= now_ms < MAX_SCRIPT_NUMBER:
        raise ValueError(f"now_ms {now_ms!r} is not in [0, 2^53)")
    for c in commits:
        for name in ("offset", "timestamp", "order", "observed_at"):
            value = getattr(c, name)
            if not (isinstance(value, int) and 0 <= value < MAX_SCRIPT_NUMBER):
                where = f"a commit of {c.group!r} on {c.topic}:{c.partition}"
                raise ValueError(f"{where}: {name} {value!r} is not an integer in [0, 2^53)")
