"""The lag-threshold event: what the evaluator publishes on the lag-threshold topic (`lagwatch.lag-thresholds`) when a
consumer group's lag in seconds crosses a threshold some subscription asked for — lagwatch's own rule, beside
Burrow's. Schema: `schemas/lag_threshold_event.json`; documented in docs/status-topic.md.

* One event per crossing of one threshold: `above` true when the group's max lag in seconds went over it, false
  when it came back under (or the group is gone, or no subscription uses the threshold any more: `reason`).
* `seq` counts the crossings of (cluster, group, threshold): odd events go over, even ones come back under.
  `event_id` is deterministic for (cluster, group, threshold, seq), so a redelivered event can be dropped.
* `incident_id` is set by the event going over and carried by the one coming back under.
* A topic of its own, so consumers of the status topic see exactly the events they always did.
* Kafka record key: `<cluster>/<group>` (`status_event.record_key`), so one group's crossings stay in order.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from lagwatch.shared.explanation import Explanation
from lagwatch.shared.protocol import GroupStatus, Status
from lagwatch.shared.status_event import encode
from lagwatch.shared.time_lag import TimeLag, exceeds, seconds_fields, worst

__all__ = ["KIND", "Crossing", "Reason", "build_event", "encode", "event_id", "incident_id", "schema"]

SCHEMA_VERSION = 1
KIND = "lag_threshold"
SCHEMA_PATH = Path(__file__).parent / "schemas" / "lag_threshold_event.json"


class Reason(StrEnum):
    LAG = "lag"  # the lag went over, or came back under
    GROUP_GONE = "group_gone"  # the group is NOTFOUND (deleted or expired): nothing is behind any more
    THRESHOLD_REMOVED = "threshold_removed"  # no subscription asks for this threshold now


def threshold_key(threshold_s: float) -> str:
    """A threshold as text, the same for 300 and 300.0 (Redis fields and ids use it)."""
    return format(float(threshold_s), ".15g")


def event_id(cluster: str, group: str, threshold_s: float, seq: int) -> str:
    text = f"lag\x00{cluster}\x00{group}\x00{threshold_key(threshold_s)}\x00{seq}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def incident_id(cluster: str, group: str, threshold_s: float, seq: int) -> str:
    """The incident opened by crossing number `seq` (an odd one)."""
    text = f"lag-incident\x00{cluster}\x00{group}\x00{threshold_key(threshold_s)}\x00{seq}"
    return "lag-" + hashlib.sha256(text.encode()).hexdigest()[:24]


@dataclass(frozen=True, slots=True)
class Crossing:
    """One threshold crossed by one group at one evaluation."""

    threshold_s: float
    above: bool
    reason: Reason = Reason.LAG


def build_event(
    *,
    cluster: str,
    group: str,
    crossing: Crossing,
    seq: int,
    incident_started_at: int,
    evaluated_at: int,
    group_status: GroupStatus | None,
    time_lags: Mapping[tuple[str, int], TimeLag | None],
    explanation: Explanation | None = None,
) -> dict:
    """The event for crossing number `seq`; `incident_started_at` is when the incident went (or goes) over."""
    threshold = crossing.threshold_s
    parts = group_status.partitions if group_status else ()
    over = [p for p in parts if exceeds(time_lags.get((p.topic, p.partition)), threshold)]
    over.sort(key=lambda p: (-time_lags[(p.topic, p.partition)].seconds, p.topic, p.partition))  # type: ignore[union-attr]
    opened_by = seq if crossing.above else seq - 1
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "event_id": event_id(cluster, group, threshold, seq),
        "seq": seq,
        "cluster": cluster,
        "group": group,
        "threshold_seconds": threshold,
        "above": crossing.above,
        "reason": crossing.reason.value,
        "incident_id": incident_id(cluster, group, threshold, opened_by),
        "incident_started_at": incident_started_at,
        "evaluated_at": evaluated_at,
        **seconds_fields(worst(time_lags.values()), "max_lag_seconds"),
        "status": group_status.status.name if group_status else Status.NOTFOUND.name,
        "totallag": group_status.totallag if group_status else 0,
        "partitions": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "current_lag": p.current_lag,
                "owner": p.owner,
                "client_id": p.client_id,
                **seconds_fields(time_lags[(p.topic, p.partition)], "lag_seconds"),
            }
            for p in over
        ],
        **({"explanation": explanation.to_json()} if explanation is not None else {}),
    }


def is_lag_threshold_event(event: Mapping) -> bool:
    return event.get("kind") == KIND


def schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())
