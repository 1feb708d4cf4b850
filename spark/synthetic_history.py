"""Generated commit histories for tests, benchmarks and demos of the replay: one behaviour per group, each ending in a
known status, with the log-end and log-start samples the broker-offset poller would have taken. Retention keeps the
last RETAINED_MESSAGES of each partition: late in the history the log start moves, never past a consumer's commits
(the lagging group has a retention risk; no scenario skips messages).

Scenarios (the group's final status under Burrow's default rules):

* `healthy`  — commits keep up with the log end                           -> OK
* `lagging`  — commits advance slower than the log end                    -> WARN
* `stalled`  — the same offset is committed while the log end moves       -> ERR (STALL)
* `stopped`  — commits stop half way while the log end moves on           -> ERR (STOP)
* `rewound`  — late on, the consumer jumps back below its commits          -> ERR (REWIND)
* `idle`     — a quiet topic: caught up, then neither side moves          -> OK
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from lagwatch.shared.records.history import KIND_BROKER, KIND_COMMIT, KIND_LOG_START, HistoryRecord

SCENARIOS = ("healthy", "lagging", "stalled", "stopped", "rewound", "idle")
FINAL_STATUS = {"healthy": "OK", "lagging": "WARN", "stalled": "ERR", "stopped": "ERR", "rewound": "ERR", "idle": "OK"}
PRODUCED_PER_STEP = 100  # messages produced per partition between two commits
RETAINED_MESSAGES = 2500  # what retention keeps of a partition (its log start follows the log end this far behind)


@dataclass(frozen=True)
class HistoryShape:
    groups: int = 6
    partitions: int = 2
    commits_per_partition: int = 20
    commit_interval_ms: int = 10_000
    sample_interval_ms: int = 10_000
    start_ms: int = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    cluster: str = "prod"

    @property
    def end_ms(self) -> int:
        return self.start_ms + self.commits_per_partition * self.commit_interval_ms


def scenario_of(group_index: int) -> str:
    return SCENARIOS[group_index % len(SCENARIOS)]


def group_name(group_index: int) -> str:
    return f"{scenario_of(group_index)}-{group_index:06d}"


def _log_end(scenario: str, step: float) -> int:
    """The partition's log end `step` commit intervals after the start."""
    return 1000 if scenario == "idle" else 1000 + int(step * PRODUCED_PER_STEP)


def _committed(scenario: str, step: int, steps: int) -> int | None:
    """The offset committed at `step`, None for no commit."""
    end = _log_end(scenario, step)
    if scenario in ("healthy", "idle"):
        return end
    if scenario == "lagging":
        return 1000 + step * PRODUCED_PER_STEP // 2
    if scenario == "stalled":
        return 1000
    if scenario == "stopped":
        return end if step < steps // 2 else None
    if scenario == "rewound":
        return end if step < steps * 3 // 4 else 500 + step
    raise ValueError(scenario)


def group_records(shape: HistoryShape, group_index: int, order_base: int) -> Iterator[HistoryRecord]:
    """One group's commits and its topic's samples (each group reads a topic of its own)."""
    scenario, group = scenario_of(group_index), group_name(group_index)
    topic = f"topic-{group}"
    steps = shape.commits_per_partition
    samples = (shape.end_ms - shape.start_ms) // shape.sample_interval_ms + 1
    for k in range(samples):
        at = shape.start_ms + k * shape.sample_interval_ms - 1  # sampled just before the commits of that moment
        for p in range(shape.partitions):
            offset = _log_end(scenario, (at - shape.start_ms) / shape.commit_interval_ms)
            yield HistoryRecord(KIND_BROKER, shape.cluster, None, topic, p, max(offset, 0), None, None, at)
            start = max(0, offset - RETAINED_MESSAGES)
            yield HistoryRecord(KIND_LOG_START, shape.cluster, None, topic, p, start, None, None, at)
    for step in range(steps):
        ts = shape.start_ms + step * shape.commit_interval_ms
        for p in range(shape.partitions):
            committed = _committed(scenario, step, steps)
            if committed is not None:
                order = order_base + step * shape.partitions + p
                yield HistoryRecord(KIND_COMMIT, shape.cluster, group, topic, p, committed, ts, order, ts + 20)


def history_records(shape: HistoryShape, first_group: int = 0, groups: int | None = None) -> Iterator[HistoryRecord]:
    """The records of groups [first_group, first_group + groups), in group order."""
    last = shape.groups if groups is None else min(shape.groups, first_group + groups)
    per_group = shape.partitions * shape.commits_per_partition
    for g in range(first_group, last):
        yield from group_records(shape, g, g * per_group)
