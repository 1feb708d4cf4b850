"""The windows of the groups this worker owns, in memory, written behind to Redis.

A group's commits all live in one offsets-topic partition, and one worker reads that partition at a time: the
worker is its windows' only writer. So it applies commits to rings it holds (`packed_window.add_to_ring`, the
stored layout) and flushes what changed, once per batch, before the batch's Kafka position is committed.

* A group is loaded from Redis the first time one of its commits arrives (the previous owner flushed before it let
  go of the partition), many groups per round trip.
* A group whose newest commit is older than `expire-group` starts afresh, as the evaluator's expiry would leave it.
* A group tombstone empties the group; the flush deletes its keys before writing what came after.
* An offset-commit tombstone (offsets deleted, or expired by the broker) removes that partition's ring; a group
  left without any is deleted as by its own tombstone.
* Groups of revoked partitions are dropped (their last batch was flushed first); a deleted topic leaves every ring.
* Someone else deleting a group (the api) shows at the next flush: Redis had no `last` though the worker wrote one.
  The worker then deletes what it wrote again and forgets the group (that batch's commits of it go with it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from redis.asyncio import Redis

from lagwatch.services.ingest.window_writer import GroupWrite
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import WindowConfig
from lagwatch.shared.runtime import packed_commands

TopicPartition = tuple[str, int]
LOAD_CHUNK = 1000  # groups per Redis round trip when loading


@dataclass(slots=True)
class CachedGroup:
    key_stem: str  # keys.group_key_stem: its keys are written from it (keys.keys_of_stem), not kept
    rings: dict[str, bytes] = field(default_factory=dict)  # "<topic>:<partition>" -> packed ring
    last: int | None = None  # newest stored commit timestamp (ms)
    had_last: bool = False  # Redis holds a `last` for it, as far as this worker knows
    expires_at: int = 0  # the PEXPIREAT last written
    changed: set[str] | None = None  # rings changed since the last flush (None, not an empty set: memory)
    removed: set[str] | None = None  # rings removed since the last flush (offset-commit tombstones; rare)
    replace: bool = False  # the next flush deletes the group's keys first
    partition: int = -1  # the offsets-topic partition its commits come from


class WindowCache:
    def __init__(self, redis: Redis, cluster: str, config: WindowConfig) -> None:
        self.redis = redis
        self.cluster = cluster
        self.config = config
        # expiry is refreshed when it moves by more than this: keys then outlive their group's logical expiry (the
        # evaluator's, by `last`) by at most this much, and a busy group costs one PEXPIREAT a minute, not a commit
        self.expiry_slack_ms = min(config.expire_group_ms // 100, 60_000)
        self.groups: dict[str, CachedGroup] = {}
        self.dirty: dict[str, CachedGroup] = {}

    # --- loading ----------------------------------------------------------------------------------------

    async def load(self, wanted: Mapping[str, int]) -> None:
        """Make sure the groups (group -> offsets-topic partition) are in memory, reading unknown ones from Redis."""
        missing = [g for g in wanted if g not in self.groups]
        for start in range(0, len(missing), LOAD_CHUNK):
            chunk = missing[start : start + LOAD_CHUNK]
            stems = [keys.group_key_stem(self.cluster, g) for g in chunk]
            group_keys = [keys.keys_of_stem(stem) for stem in stems]
            commands = [c for k in group_keys for c in (("HGETALL", k[0]), ("HGET", k[1], "last"))]
            replies = await packed_commands.execute(self.redis, commands)
            for i, (group, stem) in enumerate(zip(chunk, stems, strict=True)):
                rings, last = _as_pairs(replies[2 * i]), replies[2 * i + 1]
                self.groups[group] = CachedGroup(
                    stem,
                    {f.decode(): bytes(r) for f, r in rings} if last is not None else {},
                    None if last is None else int(last),
                    had_last=last is not None,
                    partition=wanted[group],
                )

    # --- applying a batch -----------------------------------------------------------------------------------

    def delete_group(self, group: str, partition: int) -> None:
        """A group tombstone: the group is empty from here on and its keys go at the next flush."""
        cached = self.groups.get(group)
        if cached is None:
            cached = self.groups[group] = CachedGroup(keys.group_key_stem(self.cluster, group), partition=partition)
        self.restart(cached)
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

    @staticmethod
    def restart(cached: CachedGroup) -> None:
        """Empty the group: an expired one starts afresh, a deleted one is gone; the next flush replaces its keys."""
        cached.rings, cached.changed, cached.last, cached.replace = {}, None, None, True

    # --- flushing -------------------------------------------------------------------------------------------

    def take_writes(self) -> list[GroupWrite]:
        """What changed since the last call, as writes (the rings are immutable bytes: a snapshot)."""
        writes = []
        slack = self.expiry_slack_ms
        expire_ms = self.config.expire_group_ms
        for group, cached in self.dirty.items():
            if not cached.changed and not cached.replace and not cached.removed:
                continue
            expires_at = None
            if cached.last is not None:
                due = cached.last + expire_ms
                if cached.replace or due > cached.expires_at:  # a DEL took the old expiry with the keys
                    expires_at = cached.expires_at = due + slack
            writes.append(
                GroupWrite(
                    group,
                    keys.keys_of_stem(cached.key_stem),
                    {f: cached.rings[f] for f in cached.changed or ()},
                    cached.last,
                    expires_at=expires_at,
                    replace=cached.replace,
                    had_last=cached.had_last,
                    removed=tuple(cached.removed or ()),
                )
            )
            cached.had_last = cached.last is not None
            cached.changed = cached.removed = None
            cached.replace = False
        self.dirty = {}
        return writes

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


def _as_pairs(hgetall_reply: list | dict) -> list[tuple[bytes, bytes]]:
    """An HGETALL reply as (field, value) pairs: raw it is a flat list, through redis-py's callbacks a dict."""
    if isinstance(hgetall_reply, dict):
        return list(hgetall_reply.items())
    return list(zip(hgetall_reply[::2], hgetall_reply[1::2], strict=True))
