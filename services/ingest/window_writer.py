"""Write-behind of whole windows: the ingest's in-memory rings to Redis, as plain commands in one round trip.

The ingest is the only writer of its groups' windows (a group's commits live in one offsets-topic partition, read
by one worker), so it computes each ring in memory and writes the result: per touched group one HSET of its changed
rings and one HSET of `last`, PEXPIREAT only when the group's expiry moved, one ZADD for the group index per flush.
No script runs per group; Redis only stores bytes. Key layout: `keys.py`; ring layout: `packing.py`.

The commands of a flush go in one round trip (`packed_commands.execute`: packed with hiredis on a single server,
redis-py's cluster pipeline on Redis Cluster). `write_commands` is the reference for what they are: the ingest's
compiled encoder (services/ingest/flush_encoding.pyx) writes the same commands straight into the Redis protocol
(`PackedWrites`), and tests hold the two to the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime import packed_commands


@dataclass(slots=True)
class GroupWrite:
    """What one flush writes for one group."""

    group: str
    group_keys: tuple[str, str, str, str]  # keys.group_keys(cluster, group): windows, meta, owners, rebalances
    rings: dict[str, bytes]  # "<topic>:<partition>" -> packed ring, the changed ones (all of them if `replace`)
    last: int | None  # newest commit timestamp (ms); None: the group has no stored commit (deleted, nothing since)
    expires_at: int | None = None  # PEXPIREAT for every key of the group, when it moved
    replace: bool = False  # delete what Redis holds for the group first (a group tombstone, or an expired group)
    had_last: bool = False  # the writer believes Redis holds a `last` for the group (it loaded or wrote one)
    removed: tuple[str, ...] = ()  # rings to delete before `rings` are written (offset-commit tombstones)


@dataclass(frozen=True, slots=True)
class PackedWrites:
    """A flush already in the Redis protocol (the ingest's compiled encoder, services/ingest/flush_encoding.pyx):
    `payload` holds `count` commands; `probes` names, by reply index, the `HSET <meta> last` of each group whose
    `last` Redis should already hold (a reply of 1 there: someone deleted the group meanwhile)."""

    payload: bytes
    count: int
    probes: tuple[tuple[int, str], ...]


def write_commands(cluster: str, writes: Sequence[GroupWrite]) -> tuple[list[tuple[Any, ...]], list[tuple[int, str]]]:
    """The commands that store the groups' windows, and their probes (as `PackedWrites.probes`)."""
    commands: list[tuple[Any, ...]] = []
    probes: list[tuple[int, str]] = []
    index = keys.groups_index(cluster)
    deleted = [w.group for w in writes if w.replace]
    for w in writes:
        windows_key, meta_key = w.group_keys[0], w.group_keys[1]
        if w.replace:
            commands.append(("DEL", *w.group_keys))
        if w.removed:
            commands.append(("HDEL", windows_key, *w.removed))
        if w.rings:
            commands.append(("HSET", windows_key, *[x for item in w.rings.items() for x in item]))
        if w.last is not None:
            if w.had_last and not w.replace:
                probes.append((len(commands), w.group))
            commands.append(("HSET", meta_key, "last", w.last))
        if w.expires_at is not None:
            commands.extend(("PEXPIREAT", key, w.expires_at) for key in w.group_keys)
    if deleted:
        commands.append(("ZREM", index, *deleted))
    newest = [x for w in writes if w.last is not None for x in (w.last, w.group)]
    if newest:
        commands.append(("ZADD", index, "GT", *newest))
        commands.append(("SADD", keys.CLUSTERS, cluster))
    return commands, probes


class WindowWriter:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def write(self, cluster: str, writes: Sequence[GroupWrite] | PackedWrites) -> list[str]:
        """Write the groups' windows; returns the groups whose `last` field was created by this write although the
        caller had one (their keys were deleted meanwhile by someone else: the api, or expiry)."""
        if isinstance(writes, PackedWrites):
            replies = await packed_commands.execute_packed(self.redis, writes.payload, writes.count)
            probes: Sequence[tuple[int, str]] = writes.probes
        else:
            if not writes:
                return []
            commands, probes = write_commands(cluster, writes)
            replies = await packed_commands.execute(self.redis, commands)
        return [group for i, group in probes if replies[i] == 1]
