"""What changes a group other than its commits (rare beside them): rebalances, new-protocol members' changes, group
tombstones and offset-commit tombstones, applied to the windows in memory as the batch's pass meets them.

A group tombstone empties the group (its keys go at the next flush); a KIP-848 upgrade's new-protocol records right
after it put the windows back (`_kept_through_upgrade`). An offset-commit tombstone removes that partition's window.
With the history kept, the windows tombstones removed go to it as `offset-deleted` records, for the replay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lagwatch.services.ingest.new_protocol_groups import Rebalance
from lagwatch.services.ingest.records import CommitKey, GroupDeletion, GroupStep, RecordLike, decode_group_record
from lagwatch.services.ingest.window_cache import WindowCache
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.group_filter import GroupFilter
from lagwatch.shared.records.history import commits_key, offset_deleted_record
from lagwatch.shared.windows.window_writes import MemberChange

if TYPE_CHECKING:
    from lagwatch.services.ingest.processor import AppliedBatch
    from lagwatch.services.ingest.records import AdminStep


class GroupChanges:
    def __init__(self, cluster: str, cache: WindowCache, group_filter: GroupFilter) -> None:
        self.cluster = cluster
        self.cache = cache
        self.group_filter = group_filter
        self.rebalances: list[Rebalance] = []  # applied in memory, not yet written

    def take_rebalances(self) -> list[Rebalance]:
        rebalances, self.rebalances = self.rebalances, []
        return rebalances

    def record(self, record: RecordLike, key: bytes, batch: AppliedBatch, defer: bool) -> None:
        """A record other than an offset commit: a group's, decoded (`step`), or one skipped (counted)."""
        at, order = record.timestamp()[1], record.offset()
        step = decode_group_record(key, record.value(), at, order, batch.tally, self.group_filter)
        if step is not None:
            self.step(step, record, record.partition(), batch, defer)

    def step(
        self, step: GroupStep, original: RecordLike | AdminStep, part: int, batch: AppliedBatch, defer: bool
    ) -> None:
        """A rebalance, a group tombstone or a new-protocol member's change, read from offsets partition `part`."""
        if step.group in batch.waiting and defer:  # after a commit set aside: keep the group's order
            batch.deferred.append(original)
            return
        if isinstance(step, GroupDeletion):
            if defer and step.group not in self.cache.groups:  # loaded first: what it held decides an upgrade
                batch.set_aside(step.group, part, original)
                return
            self._delete_group(step, part, batch)
            return
        if isinstance(step, MemberChange):
            self._kept_through_upgrade(step.group, batch)
        self.rebalances.append(step)
        batch.touched[step.group] = "rebalance"

    def _delete_group(self, deletion: GroupDeletion, partition: int, batch: AppliedBatch) -> None:
        group = deletion.group
        cached = self.cache.groups.get(group)
        if cached is not None and cached.rings:
            kept = (
                cached.rings,
                cached.changed,
                cached.removed,
                cached.last,
                cached.replace,
                deletion.order,
                partition,
            )
            batch.tombstoned[group] = kept
        self.cache.delete_group(group, partition)
        self.rebalances = [r for r in self.rebalances if r.group != group]  # deleted with it
        batch.tally["group_deleted"] += 1
        batch.touched[group] = "deleted"

    def _kept_through_upgrade(self, group: str, batch: AppliedBatch) -> None:
        """KIP-848's online upgrade of a classic group: the coordinator writes a group tombstone and the group's
        new-protocol records in one append, and keeps its offsets. A new-protocol record after the tombstone, with
        no commit between (a commit would have started the group afresh), puts the windows back: not a deletion.
        Split across two batches (rare), the deletion stands, as Burrow reads it."""
        kept = batch.tombstoned.pop(group, None)
        if kept is None or batch.touched.get(group) != "deleted":
            return
        cached = self.cache.groups[group]
        cached.rings, cached.changed, cached.removed, cached.last, cached.replace = kept[:5]
        batch.tally["group_deleted"] -= 1
        if not batch.tally["group_deleted"]:
            del batch.tally["group_deleted"]
        batch.tally["group_upgraded"] += 1
        batch.touched[group] = "rebalance"

    def offsets_deleted(
        self,
        original: RecordLike | AdminStep,
        part: int,
        order: int,
        commit_key: CommitKey,
        batch: AppliedBatch,
        defer: bool,
    ) -> None:
        """An offset-commit tombstone at `order`: the partition's offset was deleted (`kafka-consumer-groups
        --delete-offsets`, the group deleted) or expired by the broker; its window goes (Burrow keeps it forever)."""
        group = commit_key.group
        if group in batch.waiting or (defer and group not in self.cache.groups):
            batch.set_aside(group, part, original)
            return
        batch.tally["offset_commit_tombstone"] += 1
        if self.cache.delete_partition(group, commit_key.field, part):
            batch.offsets_deleted.append((part, group, commit_key.topic_partition, order))
            batch.touched[group] = "commits" if self.cache.groups[group].rings else "deleted"

    def archive_deletions(self, batch: AppliedBatch) -> None:
        """The windows tombstones removed, as `offset-deleted` history records (rare), for the replay to remove them
        too: those of offset-commit tombstones, and every one of a group whose tombstone was not an upgrade's."""
        gone = list(batch.offsets_deleted)
        for group, (rings, *_, order, offsets_partition) in batch.tombstoned.items():
            gone += [(offsets_partition, group, keys.parse_partition_field(f), order) for f in rings]
        for offsets_partition, group, (topic, partition), order in gone:
            record = offset_deleted_record(self.cluster, group, topic, partition, order, batch.observed_at)
            batch.history.add(commits_key(self.cluster, offsets_partition), record.encode())
        batch.history.close()
