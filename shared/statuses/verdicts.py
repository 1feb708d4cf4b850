"""The rules applied to windows as stored (`windows.stored_group.StoredGroup`): a partition's status, lag in seconds,
velocity and retention risk. Most partitions of a healthy cluster are caught up, and rule 1 judges those from the
ends of the packed ring alone, without unpacking it."""

from __future__ import annotations

from lagwatch.shared.protocol.types import GroupStatus, PartitionStatus, RuleConfig
from lagwatch.shared.statuses.retention import NO_RISK, RetentionRisk, retention_risk
from lagwatch.shared.statuses.rules import caught_up_status, evaluate, partition_status, summarize_group
from lagwatch.shared.statuses.time_lag import TimeLag, probed_time_lag
from lagwatch.shared.statuses.velocity import UNKNOWN as UNKNOWN_VELOCITY
from lagwatch.shared.statuses.velocity import Velocity, partition_velocity
from lagwatch.shared.windows.packing import COMMIT_ENTRY, commit_entry_at
from lagwatch.shared.windows.stored_group import StoredGroup, StoredPartition, TopicPartition


def stored_partition_status(p: StoredPartition, intervals: int, now_ms: int, rules: RuleConfig) -> PartitionStatus:
    """The rules' verdict on a stored partition (the same as `partition_status(p.to_rule_input(...))`, the
    reference): a caught-up one from its ring's ends, a lagging one from its newest entries as they are (the rule
    input's padded ring only adds empty slots, which the rules skip)."""
    lag = p.current_lag
    filled = min(len(p.packed) // COMMIT_ENTRY.size, intervals)
    if filled <= 0:  # no commit
        return partition_status(p.to_rule_input(intervals), now_ms, rules)
    if lag <= rules.allowed_lag:
        first, last = commit_entry_at(p.packed, -filled), p.newest
        return caught_up_status(
            p.topic, p.partition, first, last, filled, intervals, lag, p.owner, p.client_id, p.markers_end
        )
    entries, complete = p.entries[-filled:], filled / intervals
    status = evaluate(entries, p.broker_offsets, lag, complete, now_ms, rules)
    return PartitionStatus(
        p.topic, p.partition, status, entries[0], entries[-1], lag, complete, p.owner, p.client_id, p.markers_end
    )


def stored_group_status(group: StoredGroup, intervals: int, now_ms: int, rules: RuleConfig) -> GroupStatus:
    """Burrow's rules on every partition, the group the worst of them. The rules' now is the coordinators' (commit
    timestamps are theirs): lagwatch's, less the cluster's commit-clock offset."""
    commit_now = now_ms - group.clock_offset_ms
    results = [stored_partition_status(p, intervals, commit_now, rules) for p in group.partitions]
    return summarize_group(group.cluster, group.group, results)


def partition_time_lag(p: StoredPartition, now_ms: int) -> TimeLag | None:
    """How far behind in time the newest commit is (None without a commit or a log-end history)."""
    if not p.packed:
        return None
    return _time_lag(p, p.newest.offset, now_ms)


def _time_lag(p: StoredPartition, committed: int, now_ms: int) -> TimeLag | None:
    log_end = p.broker_offsets[-1] if p.broker_offsets else None
    return probed_time_lag(committed, p.history, now_ms, log_end, p.probe, p.unread)


def partition_retention_risk(p: StoredPartition, now_ms: int, retention_ms: int | None = None) -> RetentionRisk:
    """How long until the oldest unconsumed message is deleted, and messages already skipped (retention.py)."""
    if not p.packed:
        return NO_RISK
    retention_ms = p.retention_ms if retention_ms is None else retention_ms
    committed = p.newest.offset
    log_end = p.broker_offsets[-1] if p.broker_offsets else None
    lag = _time_lag(p, committed, now_ms) if retention_ms is not None else None
    return retention_risk(committed, log_end, p.log_start, lag, retention_ms, now_ms)


def partition_velocity_of(p: StoredPartition, intervals: int, now_ms: int) -> Velocity:
    """Consume and produce rates and time to catch up (`velocity.py`). A caught-up partition's rates need only the
    ends of its window (no unpacking: most partitions are caught up)."""
    if not p.packed:
        return UNKNOWN_VELOCITY
    lag = p.current_lag
    filled = min(len(p.packed) // COMMIT_ENTRY.size, intervals)
    caught_up = lag == 0 and not p.unpacked
    window = [commit_entry_at(p.packed, -filled), p.newest] if caught_up else p.entries[-intervals:]
    return partition_velocity(window, p.history, lag, now_ms)


def time_lags(group: StoredGroup, now_ms: int) -> dict[TopicPartition, TimeLag | None]:
    return {(p.topic, p.partition): partition_time_lag(p, now_ms) for p in group.partitions}


def retention_risks(group: StoredGroup, now_ms: int) -> dict[TopicPartition, RetentionRisk]:
    return {(p.topic, p.partition): partition_retention_risk(p, now_ms) for p in group.partitions if p.packed}


def velocities(group: StoredGroup, intervals: int, now_ms: int) -> dict[TopicPartition, Velocity]:
    return {(p.topic, p.partition): partition_velocity_of(p, intervals, now_ms) for p in group.partitions if p.packed}
