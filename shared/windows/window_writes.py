"""Writing the windows: commits (as the ingest stores its own: `group_windows.py`), the broker-offset poller's polls
and topic retention, and the groups' rebalances. Key layout: `keys.py`.

A commit's lag needs its partition's latest broker offset, which lives in another slot: `add_commits` reads those
first (one more round trip) unless the caller passes them in.
"""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from redis.crc import key_slot
from redis.exceptions import WatchError

from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Commit, WindowConfig
from lagwatch.shared.runtime import packed_commands
from lagwatch.shared.windows import scripts
from lagwatch.shared.windows.group_windows import GroupWindows, group_commands, index_commands, load_groups
from lagwatch.shared.windows.script_calls import eval_many
from lagwatch.shared.windows.stored_group import OWNER_SEPARATOR, TopicPartition
from lagwatch.shared.windows.window import AddOutcome
from lagwatch.shared.windows.window_reads import REBALANCE_WINDOW_MS, WindowReads

GROUPS_PER_CALL = 200  # groups per `add_commits` transaction on a single Redis server
# Numbers a window may hold: the Lua scripts reading `last` and the history's JSON readers take numbers as doubles,
# not exact past 2^53 (and written back in a form no reader parses)
MAX_SCRIPT_NUMBER = 2**53


class GroupMetadataUpdate(NamedTuple):
    """A classic group's rebalance outcome for `set_groups_metadata`."""

    group: str
    generation: int
    started_at: int
    owners: Mapping[TopicPartition, tuple[str, str]]  # (topic, partition) -> (client host, client id)

    def owner_fields(self) -> list[str]:
        """[partition field, its owner, ...], for the script."""
        owners = self.owners.items()
        return [v for (t, p), client in owners for v in (keys.partition_field(t, p), OWNER_SEPARATOR.join(client))]


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


class WindowWrites:
    """Writes to the windows of every cluster in one Redis (or Redis Cluster) database."""

    def __init__(self, reads: WindowReads, config: WindowConfig) -> None:
        self.reads, self.redis, self.config = reads, reads.redis, config

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
            broker_offsets = await self.reads.latest_broker_offsets(cluster, {(c.topic, c.partition) for c in commits})
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
                writes = [
                    w for windows in groups.values() if (w := windows.take_write(cluster, expire_ms, 0)) is not None
                ]
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

    def _calls(self, cluster: str, groups: list[str]) -> list[list[str]]:
        """Groups per transaction: all a transaction's keys must share a hash slot on Redis Cluster; a single server
        takes many groups per transaction (bounded, so one never blocks Redis for long)."""
        if self.reads.cluster_mode:
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
        rings = _topic_calls(keys.broker_ring, cluster, polls, self.config.intervals, sampled_at)
        await eval_many(self.redis, scripts.APPEND_BROKER_OFFSETS, rings)
        await self._add_samples(keys.offset_history, cluster, polls, sampled_at)
        counts = partition_counts or {}
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(
                keys.topics_index(cluster),
                mapping={topic: counts.get(topic, max(offsets) + 1) for topic, offsets in polls.items()},
            )
            pipe.sadd(keys.CLUSTERS, cluster)
            await pipe.execute()

    async def add_log_start_polls(self, cluster: str, polls: Mapping[str, Mapping[int, int]], sampled_at: int) -> None:
        """Record one poll of log-start offsets (topic -> {partition: offset}) in their histories (retention.py)."""
        await self._add_samples(keys.log_start_history, cluster, polls, sampled_at)

    async def _add_samples(
        self, key: Callable[[str, str], str], cluster: str, polls: Mapping[str, Mapping[int, int]], sampled_at: int
    ) -> None:
        """One poll's offsets as samples of the topics' histories (`key(cluster, topic)`), trimmed as configured."""
        cfg = self.config
        calls = _topic_calls(key, cluster, polls, cfg.lag_history_ms, cfg.lag_history_samples, sampled_at)
        await eval_many(self.redis, scripts.APPEND_OFFSET_HISTORY, calls)

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

    async def set_groups_metadata(
        self, cluster: str, updates: Sequence[GroupMetadataUpdate | MemberChange], now_ms: int
    ) -> None:
        """Several rebalances in one round trip or two: the classic ones in the given order, then each new-protocol
        group's records in theirs (one call per group: calls may run concurrently on a cluster). A group does not
        change protocol twice within one flush."""
        limits = (self.config.expire_group_ms, now_ms, REBALANCE_WINDOW_MS)
        classic: list[tuple[Any, ...]] = []
        members: dict[str, list[list[Any]]] = {}  # group -> its records' operations, in order
        for u in updates:
            if isinstance(u, MemberChange):
                members.setdefault(u.group, []).append(u.operation())
            else:
                classic.append(_metadata_call(cluster, u.group, u.generation, u.started_at, *limits, *u.owner_fields()))
        await eval_many(self.redis, scripts.SET_GROUP_METADATA, classic)
        calls = [
            _metadata_call(cluster, group, *limits, json.dumps(operations)) for group, operations in members.items()
        ]
        await eval_many(self.redis, scripts.APPLY_MEMBER_CHANGES, calls)


def _topic_calls(
    key: Callable[[str, str], str], cluster: str, polls: Mapping[str, Mapping[int, int]], *args: int
) -> list[tuple[Any, ...]]:
    """A script call per topic polled: its hash `key(cluster, topic)`, `args`, then partition, offset, ... in order."""
    return [
        (1, key(cluster, topic), *args, *(value for pair in sorted(offsets.items()) for value in pair))
        for topic, offsets in polls.items()
        if offsets
    ]


def _metadata_call(cluster: str, group: str, *args: object) -> tuple[Any, ...]:
    _, meta_key, owners_key, rebalances_key = keys.group_keys(cluster, group)
    return (3, meta_key, owners_key, rebalances_key, *args)


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
