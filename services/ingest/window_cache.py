"""The windows of the groups this worker owns, in memory, written behind to Redis.

A group's commits all live in one offsets-topic partition, which one worker reads at a time: the worker is its
windows' only writer. So it applies commits to rings it holds (`group_windows.GroupWindows`, the stored layout),
loaded from Redis the first time one of a group's commits arrives, and flushes what changed once per batch, before
the batch's Kafka position is committed. Someone else deleting a group (the api) shows at the next flush: Redis had
no `last` though the worker wrote one; the worker then deletes what it wrote again and forgets the group.

A flush's commands are `group_windows.write_commands` (the reference), or the same bytes already in the Redis
protocol from the compiled encoder (flush_encoding.pyx, `PackedWrites`), sent in one round trip.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from lagwatch.shared.protocol.types import WindowConfig
from lagwatch.shared.runtime import packed_commands
from lagwatch.shared.windows.group_windows import GroupWindows, GroupWrite, load_groups, write_commands


@dataclass(frozen=True, slots=True)
class PackedWrites:
    """A flush already in the Redis protocol (the ingest's compiled encoder, services/ingest/flush_encoding.pyx):
    `payload` holds `count` commands; `probes` as `write_commands` gives them."""

    payload: bytes
    count: int
    probes: tuple[tuple[int, str], ...]


class WindowCache:
    def __init__(self, redis: Redis, cluster: str, config: WindowConfig) -> None:
        self.redis = redis
        self.cluster = cluster
        self.config = config
        # expiry is refreshed when it moves by more than this: keys then outlive their group's logical expiry (the
        # evaluator's, by `last`) by at most this much, and a busy group costs one PEXPIREAT a minute, not a commit
        self.expiry_slack_ms = min(config.expire_group_ms // 100, 60_000)
        self.groups: dict[str, GroupWindows] = {}
        self.dirty: dict[str, GroupWindows] = {}

    async def load(self, wanted: Mapping[str, int]) -> None:
        """Make sure the groups (group -> offsets-topic partition) are in memory, reading unknown ones from Redis."""
        missing = {group: partition for group, partition in wanted.items() if group not in self.groups}
        self.groups.update(await load_groups(self.redis, self.cluster, missing))

    # --- applying a batch -----------------------------------------------------------------------------------

    def delete_group(self, group: str, partition: int) -> None:
        """A group tombstone: the group is empty from here on and its keys go at the next flush."""
        cached = self.groups.get(group)
        if cached is None:
            cached = self.groups[group] = GroupWindows(group, partition=partition)
        cached.restart()
        self.dirty[group] = cached

    def delete_partition(self, group: str, field_name: str, partition: int) -> bool:
        """An offset-commit tombstone: the partition's ring goes at the next flush (a group left without rings is
        deleted). False when the group held no ring for it (nothing to forget). The group must be loaded."""
        cached = self.groups[group]
        if cached.rings.pop(field_name, None) is None:
            return False
        if cached.changed:
            cached.changed.discard(field_name)
        if cached.rings:
            cached.removed = (cached.removed or set()) | {field_name}
            self.dirty[group] = cached
        else:
            self.delete_group(group, partition)
        return True

    def take_writes(self) -> list[GroupWrite]:
        """What changed since the last call, as writes (the rings are immutable bytes: a snapshot)."""
        expire_ms, slack = self.config.expire_group_ms, self.expiry_slack_ms
        writes = [cached.take_write(self.cluster, expire_ms, slack) for cached in self.dirty.values()]
        self.dirty = {}
        return [w for w in writes if w is not None]

    async def write(self, writes: Sequence[GroupWrite] | PackedWrites) -> list[str]:
        """Write the groups' windows; returns the groups whose `last` field was created by this write although the
        cache had one (their keys were deleted meanwhile by someone else: the api, or expiry)."""
        if isinstance(writes, PackedWrites):
            replies = await packed_commands.execute_packed(self.redis, writes.payload, writes.count)
            probes: Sequence[tuple[int, str]] = writes.probes
        else:
            if not writes:
                return []
            commands, probes = write_commands(self.cluster, writes)
            replies = await packed_commands.execute(self.redis, commands)
        return [group for i, group in probes if replies[i] == 1]

    # --- forgetting -----------------------------------------------------------------------------------------

    def delete_topic_of_group(self, group: str, topic: str) -> bool:
        """The api deleted a topic from a group this worker holds: its rings go from memory and, again, from Redis at
        the next flush (a write in flight meanwhile may have put them back). False when the group is not held."""
        cached = self.groups.get(group)
        if cached is None:
            return False
        prefix = f"{topic}:"
        for field_name in [f for f in cached.rings if f.startswith(prefix)]:
            self.delete_partition(group, field_name, cached.partition)
        return True

    def forget_group(self, group: str) -> None:
        self.groups.pop(group, None)
        self.dirty.pop(group, None)

    def forget_partitions(self, partitions: Iterable[int]) -> int:
        """Drop the groups of offsets-topic partitions this worker no longer owns; returns how many."""
        gone = set(partitions)
        dropped = [g for g, cached in self.groups.items() if cached.partition in gone]
        for group in dropped:
            self.forget_group(group)
        return len(dropped)

    def forget_topics(self, topics: Iterable[str]) -> None:
        """Deleted topics: their rings go from memory (the poller removed them from Redis)."""
        gone = set(topics)
        for cached in self.groups.values():
            for name in [f for f in cached.rings if f.rpartition(":")[0] in gone]:
                del cached.rings[name]
                if cached.changed:
                    cached.changed.discard(name)
