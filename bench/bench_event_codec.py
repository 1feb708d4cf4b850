"""The events' JSON codec (shared/events/event_codec.py, on msgspec) per event, beside a bare baseline in the same run:
`json.dumps` of the event's JSON object (compact, sorted keys: the bytes on the wire) and `json.loads` of its bytes,
which neither builds the typed event nor checks a field.

Two events as the evaluator publishes them: a status change of a group with 10 partitions not OK (each with its lag
in seconds, velocity and retention risk) and a lag-threshold crossing with 10 partitions over the threshold.
Measured: encode (`event.encode()`), strict decode (`Cls.decode(raw)`), the notifier's partial decode
(`decode(raw, partial=True)`: of the whole record, and of one with every other field and an unknown one) and
`event.as_dict()` (the outbox's JSON object). Microseconds per event, the best of
a few rounds (the machine is shared).

    python bench/bench_event_codec.py
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from lagwatch.shared.events import lag_threshold_event, status_event
from lagwatch.shared.events.event_codec import decode
from lagwatch.shared.events.lag_threshold_event import Alert, Crossing, Reason
from lagwatch.shared.events.status_event import Incident
from lagwatch.shared.protocol.types import GroupStatus, OffsetEntry, PartitionStatus, Status
from lagwatch.shared.statuses.explanation import Explanation
from lagwatch.shared.statuses.retention import RetentionRisk
from lagwatch.shared.statuses.time_lag import TimeLag
from lagwatch.shared.statuses.velocity import CatchUp, Velocity

NOW = 1_700_000_060_000
PARTITIONS = 10


def group(partitions: int = PARTITIONS) -> GroupStatus:
    parts = tuple(
        PartitionStatus(
            "orders",
            i,
            Status.STALL,
            OffsetEntry(1000 + i, NOW - 60_000),
            OffsetEntry(2000 + i, NOW),
            900 + i,
            1.0,
            f"/10.0.0.{i + 1}",
            f"billing-{i}",
        )
        for i in range(partitions)
    )
    return GroupStatus("prod", "billing", Status.ERR, 1.0, parts, parts[-1], sum(p.current_lag for p in parts))


def events() -> dict[str, Any]:
    keys = [("orders", i) for i in range(PARTITIONS)]
    lags = {k: TimeLag(420.5 + k[1], k[1] % 2 == 0) for k in keys}
    speeds = {k: Velocity(2.0, 5.25, 900, CatchUp.NEVER, None) for k in keys}
    risks = {k: RetentionRisk(120.125, k[1], "log-start") for k in keys}
    why = Explanation("stalled", "the group committed no offset for 10 minutes while its topics grew")
    status = status_event.build_event(
        cluster="prod",
        group="billing",
        seq=2,
        previous=Status.OK,
        group_status=group(),
        incident=Incident("inc-1", NOW - 60_000),
        evaluated_at=NOW,
        time_lags=lags,
        velocities=speeds,
        explanation=why,
        retention=risks,
    )
    lag = lag_threshold_event.build_event(
        cluster="prod",
        group="billing",
        crossing=Crossing(300.0, True, Reason.LAG, Alert.LAG_SECONDS),
        seq=1,
        incident_started_at=NOW - 60_000,
        evaluated_at=NOW,
        group_status=group(),
        time_lags=lags,
        explanation=why,
    )
    return {"status": status, "lag_threshold": lag}


def per_call_us(fn: Callable[[], object], calls: int = 2_000, rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, time.perf_counter() - started)
    return round(best / calls * 1e6, 2)


def run() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, event in events().items():
        cls, raw, doc = type(event), event.encode(), event.as_dict()
        assert cls.decode(raw) == event and json.loads(raw) == doc  # the same event both ways
        out[f"{name}_bytes"] = len(raw)
        out[f"{name}_encode_us (baseline json.dumps)"] = per_call_us(
            lambda doc=doc: json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
        )
        out[f"{name}_encode_us"] = per_call_us(event.encode)
        out[f"{name}_decode_us (baseline json.loads)"] = per_call_us(lambda raw=raw: json.loads(raw))
        out[f"{name}_decode_us"] = per_call_us(lambda cls=cls, raw=raw: cls.decode(raw))
        out[f"{name}_partial_decode_us"] = per_call_us(lambda cls=cls, raw=raw: decode(cls, raw, partial=True))
        out[f"{name}_as_dict_us"] = per_call_us(event.as_dict)
        cut = json.dumps({k: doc[k] for k in sorted(doc)[::2]} | {"from_a_newer_producer": 1})  # filled in
        out[f"{name}_partial_decode_us (half its fields, one unknown)"] = per_call_us(
            lambda cls=cls, cut=cut: decode(cls, cut, partial=True)
        )
    return out


if __name__ == "__main__":
    for key, value in run().items():
        print(f"{key}: {value}")
