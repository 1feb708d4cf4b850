"""A group's windows as their writer holds them: its packed rings read from Redis, changed commit by commit, written
back whole. Every writer of windows goes through here: the ingest (for the groups it owns, kept in memory between
batches: services/ingest/window_cache.py) and `WindowWrites.add_commits` (lagwatch's own group, tools, tests).

`GroupWindows.add` is the reference of a commit's step: `window.add_commit` on the packed ring. The ingest's compiled
pass (services/ingest/commit_pass.pyx) is its fast twin, held to it by a property test.

What a write sends (`write_commands`), plain commands, no script: per touched group an HSET of its changed rings and
one of `last`, PEXPIREAT only when its expiry moved; for them all one ZADD of the group index. Redis only stores
bytes. The ingest's compiled flush (services/ingest/flush_encoding.pyx) writes the same commands straight into the
Redis protocol; a property test holds the two to the same bytes. Keys: `keys.py`; rings: `packing.py`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import WindowConfig
from lagwatch.shared.runtime import packed_commands
from lagwatch.shared.windows.window import AddOutcome, add_to_ring, expired

LOAD_CHUNK = 1000  # groups per Redis round trip when loading


@dataclass(slots=True)
class GroupWrite:
    """What one write stores for one group."""

    group: str
    group_keys: tuple[str, str, str, str]  # keys.group_keys(cluster, group): windows, meta, owners, rebalances
    rings: dict[str, bytes]  # "<topic>:<partition>" -> packed ring, the changed ones (all of them if `replace`)
    last: int | None  # newest commit timestamp (ms); None: the group has no stored commit (deleted, nothing since)
    expires_at: int | None = None  # PEXPIREAT for every key of the group, when it moved
    replace: bool = False  # delete what Redis holds for the group first (a group tombstone, or an expired group)
    had_last: bool = False  # the writer believes Redis holds a `last` for the group (it loaded or wrote one)
    removed: tuple[str, ...] = ()  # rings to delete before `rings` are written (offset-commit tombstones)


@dataclass(slots=True)
class GroupWindows:
    # its name, the very string the window cache is keyed by, which the ingest hands on (its stored groups, to the
    # probe schedule and the change notices' cache): one copy per group, and its keys built when written, not kept
    group: str
    rings: dict[str, bytes] = field(default_factory=dict)  # "<topic>:<partition>" -> packed ring
    last: int | None = None  # newest stored commit timestamp (ms)
    had_last: bool = False  # Redis holds a `last` for it, as far as its writer knows
    expires_at: int = 0  # the PEXPIREAT last written
    changed: set[str] | None = None  # rings changed since the last write (None, not an empty set: memory)
    removed: set[str] | None = None  # rings removed since the last write (offset-commit tombstones; rare)
    replace: bool = False  # the next write deletes the group's keys first
    partition: int = -1  # the offsets-topic partition its commits come from (the ingest's)

    def restart(self) -> None:
        """Empty the group: an expired one starts afresh, a deleted one is gone; the next write replaces its keys."""
        self.rings, self.changed, self.last, self.replace = {}, None, None, True

    def open(self, now_ms: int, config: WindowConfig) -> None:
        """Before commits are added: a group whose newest commit is older than `expire-group` starts afresh, as the
        evaluator's expiry would leave it."""
        if self.last is not None and expired(self.last, now_ms, config):
            self.restart()
        if self.changed is None:
            self.changed = set()

    def add(
        self,
        field_name: str,
        offset: int,
        timestamp: int,
        order: int,
        observed_at: int,
        latest_broker_offset: int | None,
        now_ms: int,
        config: WindowConfig,
    ) -> AddOutcome:
        """One commit to the ring of `field_name` ("<topic>:<partition>"), once the group is open."""
        ring = self.rings.get(field_name, b"")
        latest = latest_broker_offset
        outcome, changed = add_to_ring(ring, offset, timestamp, order, observed_at, latest, now_ms, config)
        if changed is not None:
            self.rings[field_name] = changed
            self.changed.add(field_name)  # type: ignore[union-attr]  # set by `open`
            if self.last is None or timestamp > self.last:
                self.last = timestamp
        return outcome

    def take_write(self, cluster: str, expire_ms: int, slack_ms: int) -> GroupWrite | None:
        """What changed since the last write (None: nothing), the group then marked written. The keys' expiry moves
        once `last` passed it, `slack_ms` beyond `expire-group` (a busy group then costs one PEXPIREAT per slack,
        not one per commit)."""
        if not self.changed and not self.replace and not self.removed:
            return None
        expires_at = None
        if self.last is not None and (self.replace or self.last + expire_ms > self.expires_at):  # a DEL took it
            expires_at = self.expires_at = self.last + expire_ms + slack_ms
        write = GroupWrite(
            self.group,
            keys.group_keys(cluster, self.group),
            {f: self.rings[f] for f in self.changed or ()},
            self.last,
            expires_at=expires_at,
            replace=self.replace,
            had_last=self.had_last,
            removed=tuple(self.removed or ()),
        )
        self.had_last = self.last is not None
        self.changed = self.removed = None
        self.replace = False
        return write


async def load_groups(redis: Redis, cluster: str, wanted: Mapping[str, int]) -> dict[str, GroupWindows]:
    """The groups (group -> the offsets-topic partition its commits come from) as Redis holds them. A group without
    `last` holds no commit: rings left without one are not its."""
    loaded = {}
    groups = list(wanted)
    for start in range(0, len(groups), LOAD_CHUNK):
        chunk = groups[start : start + LOAD_CHUNK]
        group_keys = [keys.group_keys(cluster, g) for g in chunk]
        commands = [c for k in group_keys for c in (("HGETALL", k[0]), ("HGET", k[1], "last"))]
        replies = await packed_commands.execute(redis, commands)
        for i, group in enumerate(chunk):
            rings, last = _as_pairs(replies[2 * i]), replies[2 * i + 1]
            loaded[group] = GroupWindows(
                group,
                # one copy of each field name, whatever the groups naming it: a fresh string per ring would cost
                # memory in proportion to the partitions held
                {sys.intern(f.decode()): bytes(r) for f, r in rings} if last is not None else {},
                None if last is None else int(last),
                had_last=last is not None,
                partition=wanted[group],
            )
    return loaded


def _as_pairs(hgetall_reply: list[Any] | dict[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    """An HGETALL reply as (field, value) pairs: raw it is a flat list, through redis-py's callbacks a dict."""
    if isinstance(hgetall_reply, dict):
        return list(hgetall_reply.items())
    return list(zip(hgetall_reply[::2], hgetall_reply[1::2], strict=True))


def write_commands(cluster: str, writes: Sequence[GroupWrite]) -> tuple[list[tuple[Any, ...]], list[tuple[int, str]]]:
    """The commands that store the groups' windows, and their probes: by command index, the `HSET <meta> last` of
    each group whose `last` Redis should already hold (a reply of 1 there: someone deleted the group meanwhile)."""
    commands: list[tuple[Any, ...]] = []
    probes: list[tuple[int, str]] = []
    for w in writes:
        group_commands(w, commands, probes)
    return commands + index_commands(cluster, writes), probes


def group_commands(w: GroupWrite, commands: list[tuple[Any, ...]], probes: list[tuple[int, str]]) -> None:
    """One group's commands, added to `commands` (all on its keys, which share a hash slot), its probe to `probes`."""
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


def index_commands(cluster: str, writes: Sequence[GroupWrite]) -> list[tuple[Any, ...]]:
    """The group index's and the cluster list's commands (other hash slots than the groups')."""
    commands: list[tuple[Any, ...]] = []
    index = keys.groups_index(cluster)
    deleted = [w.group for w in writes if w.replace]
    if deleted:
        commands.append(("ZREM", index, *deleted))
    newest = [x for w in writes if w.last is not None for x in (w.last, w.group)]
    if newest:
        commands.append(("ZADD", index, "GT", *newest))
        commands.append(("SADD", keys.CLUSTERS, cluster))
    return commands
