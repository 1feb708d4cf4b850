"""One batch of offsets-topic records: decoded and applied to the in-memory windows in one pass, then written behind.

`start` reads each record once: a commit of a group in memory, on a partition whose log end is known, goes straight
into its ring; any other is set aside with every later record of its group (keeping their order) until the groups
are loaded and the log ends asked for (`load_deferred`), then goes through the same pass (`finish`). The pass is
compiled (commit_pass.pyx); `_python_pass` is its reference, held to it by a property test.

`take_flush` snapshots what changed and `write` stores it (idempotent), so the worker can apply batch k+1 while
Redis stores batch k.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from redis.asyncio.cluster import RedisCluster

from lagwatch.services.ingest import metrics
from lagwatch.services.ingest.broker_offsets import BrokerOffsets
from lagwatch.services.ingest.group_changes import GroupChanges
from lagwatch.services.ingest.new_protocol_groups import Rebalance, TopicIds
from lagwatch.services.ingest.records import AdminStep, CommitKey, KeyCache, OffsetsDeleted, RecordLike
from lagwatch.services.ingest.window_cache import PackedWrites, WindowCache
from lagwatch.shared.protocol.group_filter import GroupFilter
from lagwatch.shared.protocol.types import Commit, Sample
from lagwatch.shared.records import offsets_codec as codec
from lagwatch.shared.records.history import HistoryMessages
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.windows.group_windows import GroupWindows, GroupWrite
from lagwatch.shared.windows.ingest_totals import type_label
from lagwatch.shared.windows.store import WindowStore
from lagwatch.shared.windows.window import commit_made_at
from lagwatch.shared.windows.window_writes import MAX_SCRIPT_NUMBER

try:  # installed without a C compiler (setup.py): the same steps run in Python
    from lagwatch.services.ingest.commit_pass import run_pass as compiled_pass  # type: ignore[import-untyped]
    from lagwatch.services.ingest.flush_encoding import encode_flush  # type: ignore[import-untyped]
except ImportError:
    compiled_pass = encode_flush = None

# offsets and timestamps at or beyond this are not real (and not exact as doubles: Lua and JSON readers)
MAX_EXACT = MAX_SCRIPT_NUMBER


@dataclass(slots=True)
class AppliedBatch:
    """What one batch did, for the worker: counters, positions to commit, groups to announce, history."""

    observed_at: int
    tally: Counter[str] = field(default_factory=Counter)
    positions: dict[int, int] = field(default_factory=dict)  # offsets-topic partition -> offset after its last record
    touched: dict[str, str] = field(default_factory=dict)  # group -> "commits" | "rebalance" | "deleted"
    history: HistoryMessages = field(default_factory=HistoryMessages)  # every commit's history record, when kept
    deferred: list[RecordLike | AdminStep] = field(default_factory=list)  # waiting for their group or log end
    waiting: dict[str, int] = field(default_factory=dict)  # group -> offsets-topic partition, for those records
    # group -> its windows as a group tombstone found them, its order and offsets partition (group_changes.py)
    tombstoned: dict[str, tuple] = field(default_factory=dict)
    # windows gone on offset-commit tombstones: (offsets partition, group, (topic, partition), tombstone's order)
    offsets_deleted: list[tuple[int, str, tuple[str, int], int]] = field(default_factory=list)
    # offsets partition -> the oldest and newest timestamps of its commits read for the first time: commit_clock.py
    commit_times: dict[int, tuple[int, int]] = field(default_factory=dict)
    # the log-end histories of set-aside commits made before their log end last moved, for the second pass
    histories: dict[tuple[str, int], list[Sample]] = field(default_factory=dict)

    def read_first(self, partition: int, oldest: int, newest: int) -> None:
        """Commits of the offsets partition read for the first time, stamped from `oldest` to `newest`."""
        known = self.commit_times.get(partition)
        if known is not None:
            oldest, newest = min(known[0], oldest), max(known[1], newest)
        self.commit_times[partition] = (oldest, newest)

    def set_aside(self, group: str, partition: int, record: RecordLike | AdminStep) -> None:
        """A record that waits for its group to be loaded (or its log end), with every later one of its group."""
        self.waiting[group] = partition
        self.deferred.append(record)


@dataclass(slots=True)
class Flush:
    """What batches changed, ready to write (immutable snapshots: later batches may change the cache)."""

    writes: list[GroupWrite] | PackedWrites = field(default_factory=list)  # packed: flush_encoding.pyx
    rebalances: list[Rebalance] = field(default_factory=list)
    now_ms: int = 0


class BatchProcessor:
    def __init__(
        self,
        cluster: str,
        store: WindowStore,
        broker_offsets: BrokerOffsets,
        group_filter: GroupFilter,
        *,
        keep_commits: bool = False,
        topic_ids: TopicIds | None = None,
    ) -> None:
        self.cluster = cluster
        self.store = store
        self.broker_offsets = broker_offsets
        self.group_filter = group_filter
        self.keep_commits = keep_commits  # the history topic wants every commit
        # history record parts (compiled pass): per group, per partition, message keys per offsets partition
        self.history_heads: list[dict] = [{}, {}, {}]
        self.keys = KeyCache(group_filter)
        self.cache = WindowCache(store.redis, cluster, store.config)
        self.group_changes = GroupChanges(cluster, self.cache, group_filter)  # rebalances, tombstones
        self.topic_ids = topic_ids  # names the topic ids of new-protocol assignments (None: left as ids)
        # offsets partition -> the position read up to; after a rewind, the position below which a record is read
        # again: its history record is stamped with its commit time, not the time it was read again (`read_again`)
        self.read_to: dict[int, int] = {}
        self.reread_until: dict[int, int] = {}
        # offsets partition -> its coordinator's commit clock against lagwatch's (commit_clock.py; absent: unknown,
        # commits taken as made when read): where a commit's time meets the log-end samples'
        self.clock_offsets: dict[int, int] = {}
        self.compiled = compiled_pass is not None  # the per-record loop of commit_pass.pyx, else _python_pass
        # the flush encoded by flush_encoding.pyx, else take_writes + write_commands; Redis Cluster routes commands
        self.packs_flush = encode_flush is not None and not isinstance(store.redis, RedisCluster)

    # --- applying -----------------------------------------------------------------------------------------

    def start(self, records: Sequence[RecordLike | AdminStep]) -> AppliedBatch:
        """The first pass (CPU only): applies what it can, sets aside the rest (`batch.deferred`)."""
        batch = AppliedBatch(now_ms())
        batch.tally["records"] += len(records)
        batch.tally["batches"] += 1
        self._pass(records, batch, defer=True)
        return batch

    def read_again(self) -> None:
        """A rewind after a history-topic outage: the commits up to where it had read go to the history stamped with
        their commit time, not the time they are read again (the replay would see the outage's commits at once)."""
        self.reread_until = dict(self.read_to)

    def _advance(self, positions: dict[int, int]) -> None:
        read_to = self.read_to
        for partition, position in positions.items():
            if position > read_to.get(partition, 0):
                read_to[partition] = position
        if self.reread_until:  # read past: the records from there on are read for the first time
            self.reread_until = {p: u for p, u in self.reread_until.items() if read_to.get(p, 0) < u}

    async def load_deferred(self, batch: AppliedBatch) -> bool:
        """What the set-aside records need: their groups from Redis, their partitions' log ends, and the log-end
        histories of those whose commits were made before their log end last moved (retryable)."""
        if batch.waiting:
            await self.cache.load(batch.waiting)
        commits = list(_set_aside_commits(batch.deferred, self.keys))
        missing = {tp for _, tp, _ in commits} - self.broker_offsets.latest.keys()
        if missing:
            await self.broker_offsets.lookup(missing)
        now, offsets = batch.observed_at, self.clock_offsets
        batch.histories = await self.broker_offsets.histories(
            (tp, commit_made_at(at, now, offsets.get(part))) for part, tp, at in commits
        )
        return True

    def finish(self, batch: AppliedBatch) -> None:
        """The second pass, over the set-aside records, once `load_deferred` succeeded."""
        deferred, batch.deferred = batch.deferred, []
        if deferred:
            positions, batch.positions, batch.waiting = batch.positions, {}, {}  # the first pass saw every record
            self._pass(deferred, batch, defer=False)
            batch.positions = positions
        self._advance(batch.positions)  # after both passes: a set-aside commit read again is still known as one
        if self.keep_commits and (batch.offsets_deleted or batch.tombstoned):
            self.group_changes.archive_deletions(batch)

    async def apply(self, records: Sequence[RecordLike | AdminStep]) -> AppliedBatch:
        """Both passes (tests and simple callers)."""
        batch = self.start(records)
        await self.load_deferred(batch)
        self.finish(batch)
        return batch

    def _pass(self, records: Sequence[RecordLike | AdminStep], batch: AppliedBatch, *, defer: bool) -> None:
        if records and isinstance(records[0], AdminStep):  # a batch is all records or all typed steps
            self._typed_pass(records, batch, defer=defer)  # type: ignore[arg-type]
        elif self.compiled:
            compiled_pass(self, records, batch, defer)
            return  # its history records are written when they are asked for (`HistoryMessages.close`)
        else:
            self._python_pass(records, batch, defer=defer)  # type: ignore[arg-type]
        batch.history.close()  # as the compiled pass does: a pass's messages are complete

    def _python_pass(self, records: Sequence[RecordLike], batch: AppliedBatch, *, defer: bool) -> None:
        """The reference of the compiled pass (commit_pass.pyx): per record its key and its commit's step
        (`_commit`); anything but a commit of an accepted group leaves through `_unusual`."""
        for record in records:
            key, value, order, part = record.key(), record.value(), record.offset(), record.partition()
            batch.positions[part] = order + 1
            commit_key = self._unusual(record, key, batch, defer)
            if commit_key is not None:
                at = self._commit(record, part, order, commit_key, value, batch, defer)  # type: ignore[arg-type]
                if at is not None:
                    batch.read_first(part, at, at)

    def _typed_pass(self, steps: Sequence[AdminStep], batch: AppliedBatch, *, defer: bool) -> None:
        """Admin mode's steps, typed, as the reference applies those of records read from offsets partition 0
        (admin mode polls only the groups the filter accepts, and commits no position). The poller stamps its
        commits itself: their timestamps say nothing of the coordinators' clock (no `commit_times`)."""
        for step in steps:
            if isinstance(step, Commit):
                commit_key = self.keys.named(step.group, step.topic, step.partition)
                self._commit(step, 0, step.order, commit_key, (step.offset, step.timestamp), batch, defer)
            elif isinstance(step, OffsetsDeleted):
                commit_key = self.keys.named(step.group, step.topic, step.partition)
                self.group_changes.offsets_deleted(step, 0, step.order, commit_key, batch, defer)
            else:
                self.group_changes.step(step, step, 0, batch, defer)

    def _unusual(self, record: RecordLike, key: bytes | None, batch: AppliedBatch, defer: bool) -> CommitKey | None:
        """A record the compiled pass does not apply as is: a commit of a group not held yet, a group record, a
        filtered group's, an offset-commit tombstone, a key not read in place or none. Returns the commit key when it
        is a commit to apply after all."""
        if key is None:
            batch.tally["decode_error:no-key"] += 1
            return None
        try:
            commit_key = self.keys.commit_key(key)
        except codec.CodecError as exc:
            batch.tally[f"decode_error:{type_label(exc.record_type, key)}"] += 1
            return None
        if commit_key is None:  # not an offset commit: group metadata or another record type
            self.group_changes.record(record, key, batch, defer)
            return None
        value = record.value()
        if not commit_key.accepted:  # filtered out by the allow/deny regexes
            batch.tally["offset_commit_tombstone" if not value else "filtered"] += 1
            return None
        if not value:
            self.group_changes.offsets_deleted(record, record.partition(), record.offset(), commit_key, batch, defer)
            return None
        return commit_key

    def _commit(
        self,
        record: RecordLike | Commit,
        part: int,
        order: int,
        commit_key: CommitKey,
        value: bytes | tuple[int, int],
        batch: AppliedBatch,
        defer: bool,
    ) -> int | None:
        """An offset commit of an accepted group, read from offsets partition `part` at `order`: its value (bytes,
        or its offset and timestamp) checked, its history record, then its ring's update. Returns its timestamp
        when it is read for the first time (not set aside, nor read again: see read_again)."""
        group = commit_key.group
        if group in batch.waiting or (
            defer and (group not in self.cache.groups or commit_key.topic_partition not in self.broker_offsets.latest)
        ):
            batch.set_aside(group, part, record)
            return None
        numbers = _offset_and_timestamp(record, value, batch)
        if numbers is None:
            return None
        committed, timestamp = numbers
        now, reread = batch.observed_at, self.reread_until
        made_at = commit_made_at(timestamp, now, self.clock_offsets.get(part))  # none in admin mode (forgotten)
        log_end = self.broker_offsets.log_end_at(commit_key.topic_partition, made_at, batch.histories, defer)
        if defer and log_end is None:  # made before the log end last moved: its history is read first
            batch.set_aside(group, part, record)
            return None
        first_read = not (reread and order < reread.get(part, -1))
        if self.keep_commits:
            seen = now if first_read else min(now, timestamp)
            batch.history.add_commit(self.cluster, part, group, *commit_key[1:3], committed, timestamp, order, seen)
        current = self.cache.groups[group]
        self._open_group(group, current, batch)
        outcome = current.add(commit_key.field, committed, timestamp, order, now, log_end, now, self.store.config)
        batch.tally[f"outcome:{outcome.name.lower()}"] += 1
        return timestamp if first_read else None

    def _open_group(self, group: str, current: GroupWindows, batch: AppliedBatch) -> tuple[dict, set]:
        """Before a run of the group's commits (`GroupWindows.open`); it is marked for the flush."""
        current.open(batch.observed_at, self.store.config)
        self.cache.dirty[group] = current
        batch.touched[current.group] = "commits"  # the cache's copy of the name: whoever keeps it shares it
        return current.rings, current.changed  # type: ignore[return-value]  # set by `open`

    # --- writing ---------------------------------------------------------------------------------------------

    def take_flush(self, now_ms: int) -> Flush:
        writes = encode_flush(self.cache, self.cluster) if self.packs_flush else self.cache.take_writes()
        return Flush(writes, self.group_changes.take_rebalances(), now_ms)

    async def write(self, flush: Flush) -> None:
        started = time.perf_counter()
        deleted_meanwhile = await self.cache.write(flush.writes)
        if flush.rebalances:
            rebalances = flush.rebalances if self.topic_ids is None else await self.topic_ids.name(flush.rebalances)
            await self.store.writes.set_groups_metadata(self.cluster, rebalances, flush.now_ms)
        for group in deleted_meanwhile:  # deleted through the api while this worker held it: stay deleted
            self.cache.forget_group(group)
            await self.store.deletions.delete_group(self.cluster, group)
        metrics.BATCH_SECONDS.labels(self.cluster).observe(time.perf_counter() - started)

    async def process(self, records: Sequence[RecordLike | AdminStep]) -> Counter[str]:
        """Apply and write one batch (tests and simple callers); returns its tally."""
        batch = await self.apply(records)
        await self.write(self.take_flush(batch.observed_at))
        return batch.tally

    async def report_own_progress(self, group: str, topic: str, positions: dict[int, int]) -> None:
        """lagwatch's own consumption, stored as a consumer group (Burrow's `burrow-<name>`): a stuck ingest raises
        its own alert. `order` = the position. Every worker writes its own partitions of that one group, so not
        through its cache but `store.writes.add_commits` (each group's read and write one transaction)."""
        if not positions or not self.group_filter.accepts(group):
            return
        now = now_ms()
        commits = [Commit(group, topic, p, pos, now, pos, now) for p, pos in positions.items()]
        latest = await self.broker_offsets.lookup({(topic, p) for p in positions})
        await self.store.writes.add_commits(self.cluster, commits, now, broker_offsets=latest)


def _set_aside_commits(
    deferred: Sequence[RecordLike | AdminStep], keys: KeyCache
) -> Iterator[tuple[int, tuple[str, int], int]]:
    """(offsets partition, partition, commit timestamp) of the set-aside commits (timestamp -1 for offset deletions
    and unreadable values; admin mode's steps are offsets partition 0's)."""
    for record in deferred:
        if isinstance(record, Commit | OffsetsDeleted):
            yield 0, (record.topic, record.partition), getattr(record, "timestamp", -1)
        elif not isinstance(record, AdminStep) and (key := keys.commit_key(record.key() or b"")) is not None:
            yield record.partition(), key.topic_partition, _commit_timestamp(record.value())


def _commit_timestamp(value: bytes | None) -> int:
    try:
        return codec.commit_offset_and_timestamp(value)[1] if value else -1
    except codec.CodecError:
        return -1


def _offset_and_timestamp(
    record: RecordLike | Commit, value: bytes | tuple[int, int], batch: AppliedBatch
) -> tuple[int, int] | None:
    """A commit's offset and timestamp (from its value), None when they cannot be read or stored (counted)."""
    try:
        committed, timestamp = value if isinstance(value, tuple) else codec.commit_offset_and_timestamp(value)
    except codec.CodecError as exc:
        batch.tally[f"decode_error:{type_label(exc.record_type, record.key() or b'')}"] += 1  # type: ignore[union-attr]
        return None
    if not (0 <= committed < MAX_EXACT and 0 <= timestamp < MAX_EXACT):
        batch.tally["decode_error:out-of-range"] += 1
        return None
    return committed, timestamp
