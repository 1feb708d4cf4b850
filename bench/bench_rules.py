"""How many partitions per second the pure rules evaluate (10-entry windows, a mix of every status)."""

from __future__ import annotations

import random
import time

from lagwatch.shared.protocol.types import OffsetEntry, PartitionInput, RuleConfig
from lagwatch.shared.statuses.rules import group_status

T0 = 1_700_000_000_000


def make_partition(rng: random.Random, topic: str, partition: int) -> PartitionInput:
    kind = rng.choice(["ok", "warn", "stall", "rewind", "stop"])
    offsets = {
        "ok": [i * 10 for i in range(10)],
        "warn": [i * 10 for i in range(10)],
        "stall": [50] * 10,
        "rewind": [100, 110, 120, 5, 15, 25, 35, 45, 55, 65],
        "stop": [i * 10 for i in range(10)],
    }[kind]
    lags = [0 if kind == "ok" and i == 3 else 5 + i for i in range(10)]
    pairs = enumerate(zip(offsets, lags, strict=True))
    entries = tuple(OffsetEntry(o, T0 + i * 60_000, None, lag) for i, (o, lag) in pairs)
    return PartitionInput(topic, partition, entries, (1000,) * 10, current_lag=14)


def run(groups: int = 10_000, partitions: int = 10) -> dict:
    rng = random.Random(1)
    data = [[make_partition(rng, "t", p) for p in range(partitions)] for _ in range(groups)]
    config = RuleConfig()
    now = T0 + 10 * 60_000
    start = time.perf_counter()
    for i, parts in enumerate(data):
        group_status("c", f"g{i}", parts, now, config)
    elapsed = time.perf_counter() - start
    total = groups * partitions
    return {"partitions": total, "seconds": round(elapsed, 3), "partitions_per_s": round(total / elapsed)}


if __name__ == "__main__":
    result = run()
    print(f"rules: {result['partitions']} partitions in {result['seconds']} s = {result['partitions_per_s']:,}/s")
