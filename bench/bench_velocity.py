"""What lag velocity, retention risk and the explanation add to an evaluation, per partition, beside the rules
themselves (the bare baseline, in the same run): 10-entry windows, an hour of log-end history (720 samples) and a
minute-resolution log-start history, half the partitions caught up (their windows' ends only) and half lagging."""

from __future__ import annotations

import time

from lagwatch.shared.protocol.types import OffsetEntry, PartitionInput, RuleConfig, Sample
from lagwatch.shared.statuses.explanation import explain
from lagwatch.shared.statuses.retention import group_risk, retention_risk
from lagwatch.shared.statuses.rules import partition_status, summarize_group
from lagwatch.shared.statuses.time_lag import add_sample, time_lag
from lagwatch.shared.statuses.velocity import group_velocity, partition_velocity
from lagwatch.shared.windows.window import padded_ring

T0 = 1_700_000_000_000
NOW = T0 + 3_600_000


def histories() -> tuple[list[Sample], list[Sample]]:
    ends: list[Sample] = []
    starts: list[Sample] = []
    for k in range(721):
        add_sample(ends, Sample(1_000_000 + k * 500, T0 + k * 5000), 3_600_000, 720)
        if k % 12 == 0:
            add_sample(starts, Sample(1_000 + k * 400, T0 + k * 5000), 3_600_000, 720)
    return ends, starts


def window(lagging: bool) -> list[OffsetEntry]:
    step = 400 if lagging else 500
    top = 1_000_000 + 720 * 500 - (20_000 if lagging else 0)
    return [OffsetEntry(top - (9 - i) * step * 10, NOW - (9 - i) * 10_000, None, 100 + i) for i in range(10)]


def run(groups: int = 2_000, partitions: int = 10) -> dict:
    ends, starts = histories()
    windows = [window(lagging=p % 2 == 1) for p in range(partitions)]
    inputs = [
        PartitionInput("t", p, padded_ring(w, 10), tuple(s.offset for s in ends[-10:]), ends[-1].offset - w[-1].offset)
        for p, w in enumerate(windows)
    ]
    rules = RuleConfig()
    n = groups * partitions

    started = time.perf_counter()
    for _ in range(groups):
        summarize_group("c", "g", [partition_status(i, NOW, rules) for i in inputs])
    rules_s = time.perf_counter() - started

    started = time.perf_counter()
    for _ in range(groups):
        speeds = {}
        for i, w in zip(inputs, windows, strict=True):
            ends_only = w if i.current_lag else [w[0], w[-1]]
            speeds[("t", i.partition)] = partition_velocity(ends_only, ends, i.current_lag, NOW)
        group_velocity(speeds.values())
    velocity_s = time.perf_counter() - started

    started = time.perf_counter()
    for _ in range(groups):
        group_risk(retention_risk(w[-1].offset, ends[-1].offset, starts, None, None, NOW) for w in windows)
    retention_s = time.perf_counter() - started

    status = summarize_group("c", "g", [partition_status(i, NOW, rules) for i in inputs])
    pairs = zip(inputs, windows, strict=True)
    speeds = {("t", i.partition): partition_velocity(w, ends, i.current_lag, NOW) for i, w in pairs}
    overall = group_velocity(speeds.values())
    started = time.perf_counter()
    for _ in range(groups):
        explain(status, speeds, overall, (), NOW)
    explain_s = time.perf_counter() - started

    started = time.perf_counter()
    for _ in range(groups):
        for w in windows:
            time_lag(w[-1].offset, ends, NOW)
    time_lag_s = time.perf_counter() - started

    per = lambda s: round(s / n * 1e6, 2)  # noqa: E731 - microseconds per partition
    return {
        "partitions": n,
        "rules_us_per_partition (baseline)": per(rules_s),
        "time_lag_us_per_partition (existing)": per(time_lag_s),
        "velocity_us_per_partition": per(velocity_s),
        "retention_risk_us_per_partition": per(retention_s),
        "explanation_us_per_partition": per(explain_s),
    }


if __name__ == "__main__":
    for name, value in run().items():
        print(f"{name}: {value}")
