"""Write-behind of whole windows: the ingest's in-memory rings to Redis, as plain commands in one round trip.

The commands are `group_windows.write_commands` (the reference), or the same already in the Redis protocol from the
ingest's compiled encoder (services/ingest/flush_encoding.pyx, `PackedWrites`); tests hold the two to the same
bytes. They go in one round trip (`packed_commands`: packed with hiredis on a single server, redis-py's cluster
pipeline on Redis Cluster).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from lagwatch.shared.runtime import packed_commands
from lagwatch.shared.windows.group_windows import GroupWrite, write_commands


@dataclass(frozen=True, slots=True)
class PackedWrites:
    """A flush already in the Redis protocol (the ingest's compiled encoder, services/ingest/flush_encoding.pyx):
    `payload` holds `count` commands; `probes` as `write_commands` gives them."""

    payload: bytes
    count: int
    probes: tuple[tuple[int, str], ...]


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
