"""Replaying one consumer group's history through the shared window and rules: pure Python, no Spark, no I/O.

The Spark job runs `replay_group` once per (cluster, group) inside `applyInPandas`; the benchmark runs it in a plain
loop; tests call it directly. It does what the live services do, in history time:

* inputs in time order (a commit at `observed_at`, when the ingest read it; a log-end sample at its sampling time;
  a sample first on ties): a sample goes into the partition's broker ring and log-end history, a commit into its
  window with the log end of when it was made, placed on lagwatch's clock by the group's own commit-clock estimate
  (`shared/windows/window.py`, the same outcomes as the Redis store); a
  commit of a partition not sampled yet waits for its first sample, as the ingest holds it; a sample at the time
  of the partition's last one is a duplicate (the archive is at-least-once; commits are told apart by `order`);
  the log probe's latest caught-up answer for a partition makes its current lag 0 where it makes it 0 live
  (nothing readable between the newest commit and the latest log end: `ProbedLog.caught_up_at`);
* the group is evaluated with the shared rules at evaluation ticks, every `tick_ms` of history time (multiples of
  `tick_ms` since the epoch), up to the end of the history, and at that end when inputs came after its last tick
  or the clock changed a verdict after it;
* ticks where nothing changed and the rules cannot change their answer are skipped: between inputs only the clock
  moves, and the clock changes a verdict only when a partition's STOP check flips (at `2*last - first` of its
  window) or the group expires (`expire-group` after its newest commit). Skipping them is exact, and it is what
  lets a quiet month cost nothing;
* when the group's status changes, the event the live evaluator would have published (same schema, `replayed`).

The output is the status timeline (a row whenever status, total lag, the worst partition, the explanation or the
messages retention skipped change) and the events; `report.py` and `backtest.py` digest them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from lagwatch.shared.events.status_event import Incident, StatusEvent, transition
from lagwatch.shared.protocol.types import (
    Commit,
    GroupStatus,
    OffsetEntry,
    PartitionInput,
    PartitionStatus,
    ProbedLog,
    RuleConfig,
    Sample,
    Status,
    WindowConfig,
)
from lagwatch.shared.records.history import (
    KIND_COMMIT,
    KIND_LOG_START,
    KIND_OFFSET_DELETED,
    KIND_PROBE,
    KIND_TOPIC_DELETED,
    HistoryRecord,
)
from lagwatch.shared.statuses.explanation import Explanation, explain
from lagwatch.shared.statuses.retention import RetentionRisk, group_risk, retention_risk
from lagwatch.shared.statuses.rules import caught_up_status, partition_status, summarize_group
from lagwatch.shared.statuses.time_lag import TimeLag, add_sample, probed_time_lag, worst
from lagwatch.shared.statuses.velocity import Velocity, group_velocity, partition_velocity
from lagwatch.shared.windows.clock_offset import ClockOffset
from lagwatch.shared.windows.window import (
    AddOutcome,
    add_broker_offset,
    add_commit,
    commit_made_at,
    current_lag,
    expired,
    log_end_as_of,
    padded_ring,
)

TopicPartition = tuple[str, int]
NEVER = 2**62


class CommitInput(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    order: int
    observed_at: int


class SampleInput(NamedTuple):
    topic: str
    partition: int
    offset: int
    sampled_at: int
    log_start: bool = False  # a log-start sample (retention risk), else a log-end sample


class TopicDeleted(NamedTuple):
    """Every partition of `topic` leaves the group's windows at `deleted_at` (history kind `topic-deleted`)."""

    topic: str
    deleted_at: int


class OffsetDeleted(NamedTuple):
    """The group's window of a partition goes on an offsets-topic tombstone (history kind `offset-deleted`): in
    order among the group's commits, as the ingest read them."""

    topic: str
    partition: int
    order: int
    observed_at: int


class ProbeInput(NamedTuple):
    """The log probe's answer for a partition (history kind `probe`)."""

    topic: str
    partition: int
    answer: ProbedLog


Other = SampleInput | TopicDeleted | OffsetDeleted | ProbeInput  # the inputs that are not commits
Input = CommitInput | Other


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    window: WindowConfig = field(default_factory=WindowConfig)
    rules: RuleConfig = field(default_factory=RuleConfig)
    tick_ms: int = 10_000  # evaluation ticks: Burrow's offset-refresh by default


class TimelineRow(NamedTuple):
    at: int
    status: str
    totallag: int
    partition_count: int = 0
    bad_partitions: int = 0
    maxlag_topic: str | None = None
    maxlag_partition: int | None = None
    maxlag: int = 0
    max_lag_seconds: float | None = None
    max_lag_seconds_lower_bound: bool = False
    catchup_seconds: float | None = None  # the group's time to catch up (velocity.py); None: never or unknown
    lag_growth_per_second: float | None = None
    explanation: str | None = None  # the explanation's code (explanation.py)
    retention_risk_seconds: float | None = None  # until retention deletes unconsumed messages (retention.py)
    skipped_messages: int = 0  # deleted before they were consumed


@dataclass(slots=True)
class ReplayResult:
    timeline: list[TimelineRow] = field(default_factory=list)
    events: list[StatusEvent] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)  # window outcome name -> commits
    first_at: int | None = None  # history time covered
    last_at: int | None = None


@dataclass(slots=True)
class _Partition:
    entries: list[OffsetEntry] = field(default_factory=list)
    broker: list[int] = field(default_factory=list)
    history: list[Sample] = field(default_factory=list)
    log_start: list[Sample] = field(default_factory=list)
    held: list[CommitInput] = field(default_factory=list)  # commits waiting for the partition's first log end
    # the log probe's latest answer that found nothing readable past its offset: kept apart from those with an unread
    # record, as live (shared/windows/log_probes.py), so another group's answer at another offset does not replace it
    caught_up_probe: ProbedLog | None = None
    unread_probe: ProbedLog | None = None  # and its latest that found an unread record (lag in seconds)

    def current_lag(self) -> int:
        """As the live readers have it (`StoredPartition.current_lag`): the offsets' lag, but 0 where the probe's
        latest caught-up answer found nothing readable between the newest commit and the latest log end."""
        probe = self.caught_up_probe
        if (
            probe is not None
            and self.entries
            and self.broker
            and probe.caught_up_at(self.entries[-1].offset, self.broker[-1])
        ):
            return 0
        return current_lag(self.entries, self.broker)


_Speeds = dict[TopicPartition, Velocity]
_Risks = dict[TopicPartition, RetentionRisk]


class _Group:
    """The replayed state of one group: its windows, and what the evaluator last said."""

    def __init__(self, cluster: str, group: str, config: ReplayConfig) -> None:
        self.cluster, self.group, self.config = cluster, group, config
        self.topics: dict[TopicPartition, _Partition] = {}  # log-end state per partition (exists before commits)
        self.windows: set[TopicPartition] = set()  # partitions with commits stored
        self.last_commit = -1  # newest stored commit timestamp: the group's expiry clock
        self.status = Status.NOTFOUND
        self.seq = 0
        self.incident = Incident(None, None)
        self.last_row: tuple | None = None
        # the commit clock, as the ingest keeps it, from the commits read once (observed after their timestamp;
        # one read again after a history-topic outage is observed at its timestamp, and says nothing of the clock)
        self.clock = ClockOffset()

    def partition(self, tp: TopicPartition) -> _Partition:
        part = self.topics.get(tp)
        if part is None:
            part = self.topics[tp] = _Partition()
        return part

    def add_sample(self, s: SampleInput) -> list[AddOutcome]:
        """Applies a sample; the outcomes of the commits it lets through (those held for their log end)."""
        part = self.partition((s.topic, s.partition))
        w = self.config.window
        if s.log_start:  # kept as the live store keeps them (`add_log_start_polls`)
            add_sample(part.log_start, Sample(s.offset, s.sampled_at), w.lag_history_ms, w.lag_history_samples)
            return []
        # a sample at the time of the last one is that one again (the archive is at-least-once): twice in the ring,
        # it would push out a poll the live ring keeps (STOP's "caught up recently")
        if add_sample(part.history, Sample(s.offset, s.sampled_at), w.lag_history_ms, w.lag_history_samples):
            add_broker_offset(part.broker, s.offset, w.intervals)
        held, part.held = part.held, []
        return [self._store(c) for c in held]

    def add_commit(self, c: CommitInput) -> AddOutcome | None:
        """The commit's outcome, or None while it waits for its partition's first log-end sample: the ingest holds
        a commit of a partition it has no log end for until it has looked one up (that poll's sample follows the
        commit in the history)."""
        part = self.partition((c.topic, c.partition))
        if not part.broker:
            part.held.append(c)
            return None
        return self._store(c)

    def forget_topic(self, topic: str) -> int:
        """The topic's partitions leave the windows and their log-end state, as the live store drops a deleted topic
        (a group left without partitions is deleted there: its expiry clock starts over); returns the commits that
        were held for those partitions' log ends, dropped with them."""
        gone = [tp for tp in self.topics if tp[0] == topic]
        dropped = sum(len(self.topics[tp].held) for tp in gone)
        for tp in gone:
            self.forget_partition(tp)
            del self.topics[tp]
        return dropped

    def forget_partition(self, tp: TopicPartition) -> None:
        """The window of one partition goes, as the ingest drops it on an offset-commit tombstone (a group left
        without windows is deleted); its log-end state stays (the topic still exists)."""
        part = self.topics.get(tp)
        if part is not None:
            part.entries, part.held = [], []  # held commits came before the tombstone: deleted with the window
        self.windows.discard(tp)
        if not self.windows:
            self.last_commit = -1

    def held(self) -> int:
        """Commits still waiting for a log end (at the end of the history: for partitions the broker never had)."""
        return sum(len(part.held) for part in self.topics.values())

    def _store(self, c: CommitInput) -> AddOutcome:
        if self.expired(c.observed_at):  # between two ticks: the ingest starts an expired group afresh, as here
            self.forget_windows()
        tp = (c.topic, c.partition)
        part = self.topics[tp]
        commit = Commit(self.group, c.topic, c.partition, c.offset, c.timestamp, c.order, c.observed_at)
        log_end = log_end_as_of(part.history, commit_made_at(c.timestamp, c.observed_at, self.clock.applied_ms))
        if c.observed_at > c.timestamp:
            self.clock.add(c.observed_at, c.observed_at - c.timestamp)
        latest = part.broker[-1] if log_end is None else log_end
        outcome = add_commit(part.entries, commit, latest, c.observed_at, self.config.window)
        if outcome.stored:
            self.windows.add(tp)
            self.last_commit = max(self.last_commit, c.timestamp)
        return outcome

    def expired(self, now: int) -> bool:
        return bool(self.windows) and expired(self.last_commit, now, self.config.window)

    def forget_windows(self) -> None:
        for tp in self.windows:
            self.topics[tp].entries = []
        self.windows.clear()
        self.last_commit = -1

    def evaluate(self, now: int) -> tuple[GroupStatus | None, dict[TopicPartition, TimeLag | None], _Speeds, _Risks]:
        """The group's status (None without windows) and each partition's time lag, velocity and retention risk, as
        the live evaluator computes them; retention risk from the log-start samples, as live where a topic's
        `retention.ms` is unknown (the history does not hold it)."""
        intervals, rules = self.config.window.intervals, self.config.rules
        # the rules compare commit times: now on the coordinator's clock
        commit_now = now - (self.clock.applied_ms or 0)
        results: list[PartitionStatus] = []
        lags: dict[TopicPartition, TimeLag | None] = {}
        speeds: _Speeds = {}
        risks: _Risks = {}
        for tp in sorted(self.windows):
            part = self.topics[tp]
            lag = part.current_lag()
            results.append(_partition_status(tp, part, lag, intervals, commit_now, rules))
            log_end = part.broker[-1] if part.broker else None
            lags[tp] = probed_time_lag(
                part.entries[-1].offset, part.history, now, log_end, part.caught_up_probe, part.unread_probe
            )
            speeds[tp] = partition_velocity(part.entries[-intervals:], part.history, lag, now)
            risks[tp] = retention_risk(part.entries[-1].offset, log_end, part.log_start, None, None, now)
        status = summarize_group(self.cluster, self.group, results) if self.windows else None
        return status, lags, speeds, risks

    def next_flip(self, now: int) -> int:
        """The earliest time after `now` at which the clock alone could change the group's verdict."""
        flips = [self.last_commit + self.config.window.expire_group_ms + 1] if self.windows else []
        intervals = self.config.window.intervals
        for tp in self.windows:
            entries = self.topics[tp].entries[-intervals:]
            # is_stopped: now - last > last - first, now on the coordinators' clock
            stop_at = 2 * entries[-1].timestamp - entries[0].timestamp + 1 + (self.clock.applied_ms or 0)
            if stop_at > now:
                flips.append(stop_at)
        return min(flips, default=NEVER)


def _partition_status(
    tp: TopicPartition, part: _Partition, lag: int, intervals: int, now: int, rules: RuleConfig
) -> PartitionStatus:
    entries = part.entries[-intervals:]
    if lag <= rules.allowed_lag:  # rule 1 needs only the ends of the window (the live store's shortcut too)
        return caught_up_status(tp[0], tp[1], entries[0], entries[-1], len(entries), intervals, lag)
    ring = PartitionInput(tp[0], tp[1], padded_ring(entries, intervals), tuple(part.broker), lag)
    return partition_status(ring, now, rules)


def replay_inputs(records: Iterable[HistoryRecord]) -> tuple[list[CommitInput], list[Other]]:
    """History records (`shared/records/history.py`) as replay inputs: the commits, and the rest (log-end and
    log-start samples, deletions)."""
    commits: list[CommitInput] = []
    others: list[Other] = []
    for r in records:
        probed = (r.log_end, r.unread_from, r.unread_ms)
        item = history_input(
            r.kind, r.topic, r.partition, r.offset, r.commit_timestamp, r.order, r.observed_at, *probed
        )
        if isinstance(item, CommitInput):
            commits.append(item)
        else:
            others.append(item)
    return commits, others


def history_input(
    kind: str,
    topic: str,
    partition: int,
    offset: int,
    timestamp: int | None,
    order: int | None,
    at: int,
    *probed: int | None,
) -> Input:
    """A history record's fields as a replay input; `probed`: a probe's own (`PROBE_COLUMNS`), null in other kinds."""
    if kind == KIND_COMMIT:
        return CommitInput(topic, partition, offset, timestamp or 0, order or 0, at)
    if kind == KIND_TOPIC_DELETED:
        return TopicDeleted(topic, at)
    if kind == KIND_OFFSET_DELETED:
        return OffsetDeleted(topic, partition, order or 0, at)
    if kind == KIND_PROBE:
        return ProbeInput(topic, partition, ProbedLog(offset, probed[0] or 0, probed[1], probed[2], at))
    return SampleInput(topic, partition, offset, at, kind == KIND_LOG_START)


def _ceil_tick(t: int, tick: int) -> int:
    return -(-t // tick) * tick


def replay_group(
    cluster: str,
    group: str,
    commits: Iterable[CommitInput],
    samples: Iterable[Other],
    config: ReplayConfig,
    *,
    end_ms: int | None = None,
) -> ReplayResult:
    """Replay a group's commits, the samples of its partitions and the deletions of its topics and windows;
    evaluate until `end_ms` (default: the last input). Inputs need not be sorted."""
    timeline_inputs = _timeline(commits, samples)
    result = ReplayResult()
    if not timeline_inputs:
        return result
    state = _Group(cluster, group, config)
    tick = config.tick_ms
    end = max(end_ms if end_ms is not None else timeline_inputs[-1][0], timeline_inputs[-1][0])
    first_tick = _ceil_tick(timeline_inputs[0][0], tick)
    result.first_at, result.last_at = min(first_tick, end), end  # all inputs after the last tick: judged at the end
    next_tick: int | None = first_tick
    outcomes: Counter[str] = Counter()
    i, n, evaluated = 0, len(timeline_inputs), 0  # evaluated: inputs applied as of the last evaluation
    while next_tick is not None:
        # apply every input up to and including the tick's time, then evaluate at the tick
        i = _apply_inputs(state, timeline_inputs, i, next_tick, outcomes)
        if next_tick > end and i >= n:
            if i > evaluated:  # inputs after the last tick within the history: its state at its end
                _evaluate(state, end, result)
            break
        _evaluate(state, next_tick, result)
        evaluated = i
        next_tick = _following_tick(state, next_tick, tick, timeline_inputs[i][0] if i < n else None, end)
    if state.held():  # dropped, as the ingest drops commits of partitions Kafka does not have
        outcomes[AddOutcome.NO_BROKER_OFFSET.name] += state.held()
    result.outcomes = dict(outcomes)
    return result


_Timeline = list[tuple[int, int, int, Input]]


def _timeline(commits: Iterable[CommitInput], others: Iterable[Other]) -> _Timeline:
    """The inputs in replay order: (time, then on ties a topic deletion, a sample, the group's own records; order
    among those, input). A topic deleted and re-created within the same ms: its new samples come after the deletion;
    an offset deleted comes among the group's commits by the order they were read in."""
    timeline_inputs: _Timeline = [_place(o) for o in others]
    timeline_inputs.extend((c.observed_at, 1, c.order, c) for c in commits)
    timeline_inputs.sort(key=lambda item: item[:3])
    return timeline_inputs


def _place(item: Other) -> tuple[int, int, int, Input]:
    if isinstance(item, TopicDeleted):
        return item.deleted_at, -1, 0, item
    if isinstance(item, OffsetDeleted):
        return item.observed_at, 1, item.order, item
    if isinstance(item, ProbeInput):
        return item.answer.probed_at, 0, 0, item
    return item.sampled_at, 0, 0, item


def _apply_inputs(state: _Group, timeline_inputs: _Timeline, i: int, until: int, outcomes: Counter[str]) -> int:
    """Applies the inputs from index `i` up to time `until` (included), counting the commits' outcomes; returns the
    index of the first input left."""
    while i < len(timeline_inputs) and timeline_inputs[i][0] <= until:
        item = timeline_inputs[i][3]
        i += 1
        if isinstance(item, TopicDeleted):  # commits held for its partitions' log ends are dropped, as live
            if dropped := state.forget_topic(item.topic):
                outcomes[AddOutcome.NO_BROKER_OFFSET.name] += dropped
            continue
        if isinstance(item, OffsetDeleted):
            state.forget_partition((item.topic, item.partition))
            continue
        if isinstance(item, ProbeInput):
            part = state.partition((item.topic, item.partition))
            if item.answer.unread_from is None:
                part.caught_up_probe = item.answer
            else:
                part.unread_probe = item.answer
            continue
        applied = state.add_sample(item) if isinstance(item, SampleInput) else [state.add_commit(item)]
        for outcome in applied:
            if outcome is not None:
                outcomes[outcome.name] += 1
    return i


def _following_tick(state: _Group, now: int, tick: int, next_input_at: int | None, end: int) -> int | None:
    """The next tick to evaluate at after `now`, or None when the replay is over."""
    following = now + tick
    if next_input_at is not None:
        if next_input_at > following:
            # nothing arrives before the next input: jump to the next tick where the clock could change a verdict
            following = _ceil_tick(min(state.next_flip(now), next_input_at), tick)
        return following
    flip = state.next_flip(now)
    if flip > end:
        return None
    # a flip after the last tick within the history is judged at its end, as inputs after that tick are
    return min(max(following, _ceil_tick(flip, tick)), end)


def _evaluate(state: _Group, now: int, result: ReplayResult) -> None:
    if state.expired(now):
        state.forget_windows()  # the live evaluator deletes an expired group
    status, lags, speeds, risks = state.evaluate(now)
    overall = group_velocity(speeds.values())
    retention = group_risk(risks.values()) if risks else None
    # the history holds no group metadata: no rebalances, no membership
    why = explain(
        status, speeds, overall, (), now, False, retention=retention, clock_offset_ms=state.clock.applied_ms or 0
    )
    _record_timeline(state, now, status, lags, overall, why, retention, result)
    change = transition(
        state.cluster,
        state.group,
        state.status,
        state.seq,
        state.incident,
        status,
        now,
        replayed=True,
        time_lags=lags or None,
        velocities=speeds if status is not None else None,
        explanation=why,
        retention=risks if status is not None else None,
    )
    if change is not None:
        result.events.append(change.event)
        state.status, state.seq, state.incident = change.status, change.seq, change.incident


def _record_timeline(
    state: _Group,
    now: int,
    status: GroupStatus | None,
    lags: dict[TopicPartition, TimeLag | None],
    velocity: Velocity,
    why: Explanation,
    retention: RetentionRisk | None,
    result: ReplayResult,
) -> None:
    if status is None:
        key: tuple = (Status.NOTFOUND.name, 0, None, None)
        row = TimelineRow(now, Status.NOTFOUND.name, 0)
    else:
        top = status.maxlag
        key = (status.status.name, status.totallag, top.topic if top else None, top.partition if top else None)
        # and what the data shows: retention skipping messages of a stopped consumer changes neither of those
        key += (why.code, retention.skipped if retention is not None else 0)
        max_seconds = worst(lags.values())
        row = TimelineRow(
            now,
            status.status.name,
            status.totallag,
            status.partition_count,
            sum(1 for p in status.partitions if p.status != Status.OK),
            top.topic if top else None,
            top.partition if top else None,
            top.current_lag if top else 0,
            None if max_seconds is None else round(max_seconds.seconds, 3),
            bool(max_seconds and max_seconds.lower_bound),
            None if velocity.catchup_seconds is None else round(velocity.catchup_seconds, 3),
            None if velocity.lag_growth is None else round(velocity.lag_growth, 3),
            why.code,
            None if retention is None or retention.seconds is None else round(retention.seconds, 3),
            retention.skipped if retention is not None else 0,
        )
    if key != state.last_row:
        state.last_row = key
        result.timeline.append(row)


def status_changes(events: Sequence[StatusEvent]) -> list[tuple[str, str]]:
    """(previous, status) pairs: what parity with the live evaluator is judged on."""
    return [(e.previous_status, e.status) for e in events]
