"""Why a group is where it is: one short, rule-based explanation chosen from what the data shows. Pure, no I/O:
the evaluator puts it in status events and lag-seconds alerts, the api in status objects, the Spark replay in its
events.

The first rule that matches wins, in this order (the more specific cause before the symptom it produces):

1. rewound          a partition's committed offset went back (REWIND): someone reset the offsets;
   messages-skipped retention deleted messages before they were consumed (committed offset below the log start);
2. rebalance-storm  the group started `STORM_GENERATIONS` or more generations within `STORM_WINDOW_MS`;
3. consumer-gone    partitions stopped committing (STOP) and no member owns any partition: the members left
                    (only when the group's membership is known: its metadata was seen; the coordinator records
                    a group left Empty as a new generation without members, so this comes before 4);
4. rebalancing      a generation started within `REBALANCE_RECENT_MS` while the group is not OK and none of its
                    partitions that are not OK committed since (a consumer committing is not waiting for a rebalance:
                    the same offset means stalled, new ones mean the rebalance is over and something else is wrong);
5. stuck-partition  some partitions stopped or stalled while the group's other partitions keep moving;
6. stalled          partitions commit the same offset while messages arrive (STALL), none of the others moving;
7. consumer-stopped partitions stopped committing (members still in the group, or membership unknown);
8. producer-stopped no lag to speak of growing, and the log end has not moved for `PRODUCER_FLAT_MS` (nothing new
                    to consume: lag in seconds grows with the clock, not because the consumer is slow);
9. slower-than-producer  the lag does not shrink: the consumer reads no more messages per second than are written
                    (as many, far behind: the lag holds where it is);
10. catching-up     lag, but the consumer is faster than the producer;
11. keeping-up      as fast as the producer, its lag no more than what arrived since its latest commits;
12. caught-up       no lag.
Unknown rates and no matching rule: `unknown`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lagwatch.shared.protocol.types import GroupStatus, PartitionStatus, Status
from lagwatch.shared.statuses.retention import RetentionRisk
from lagwatch.shared.statuses.velocity import CatchUp, Velocity
from lagwatch.shared.windows.clock_offset import CLOCK_OFF_MS

STORM_GENERATIONS = 3
STORM_WINDOW_MS = 600_000  # 10 min
REBALANCE_RECENT_MS = 120_000  # 2 min
PRODUCER_FLAT_MS = 120_000  # 2 min

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Explanation:
    code: str
    text: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "text": self.text}


def explain(
    status: GroupStatus | None,
    velocities: Mapping[TopicPartition, Velocity],
    group: Velocity,
    rebalances: Sequence[int],
    now_ms: int,
    membership_known: bool = True,
    retention: RetentionRisk | None = None,
    clock_offset_ms: int = 0,
) -> Explanation:
    """The explanation for a group judged `status` (None: NOTFOUND), its partitions' and its own velocity, and the
    start times (ms) of its recent generations. `membership_known`: the group's metadata (generation, owners) was
    seen; without it, no owner does not mean the members left. `retention`: the group's retention risk.
    `clock_offset_ms`: the group's coordinator's commit clock against lagwatch's (positive: commit times behind)."""
    if status is None:
        return Explanation("gone", "The group is not known (deleted, expired or excluded).")
    recent = sorted(at for at in rebalances if at >= now_ms - STORM_WINDOW_MS)
    why = (
        _offsets_cause(status, retention)
        or _membership_cause(status, recent, now_ms, membership_known)
        or _partitions_cause(status, velocities)
        or _rates_cause(velocities, group, status.status == Status.OK)
    )
    if abs(clock_offset_ms) < CLOCK_OFF_MS:
        return why
    side = "behind" if clock_offset_ms > 0 else "ahead of"
    return Explanation(
        why.code, f"{why.text} Commit times are {_duration(abs(clock_offset_ms) / 1000)} {side} lagwatch's clock."
    )


def _offsets_cause(status: GroupStatus, retention: RetentionRisk | None) -> Explanation | None:
    """Rules 1: the committed offsets moved under the consumer (a reset, or retention deleting unread messages)."""
    rewound = [p for p in status.partitions if p.status == Status.REWIND]
    if rewound:
        return Explanation("rewound", f"Offsets were reset: the committed offset went back on {_names(rewound)}.")
    if retention is not None and retention.skipped:
        return Explanation(
            "messages-skipped",
            f"Retention deleted {retention.skipped:,} messages before they were consumed (the committed offset is "
            "below the log start).",
        )
    return None


def _membership_cause(
    status: GroupStatus, recent: list[int], now_ms: int, membership_known: bool
) -> Explanation | None:
    """Rules 2-4: the group's members (generations in `recent`, oldest first; owners) explain it."""
    parts = status.partitions
    if len(recent) >= STORM_GENERATIONS:
        minutes = STORM_WINDOW_MS // 60_000
        return Explanation(
            "rebalance-storm", f"Rebalance storm: {len(recent)} generations in the last {minutes} min{_hosts(parts)}."
        )
    stopped = [p for p in parts if p.status == Status.STOP]
    if stopped and membership_known and not any(p.owner for p in parts):
        return Explanation(
            "consumer-gone", f"The consumer stopped committing and its members left the group ({_names(stopped)})."
        )
    if status.status != Status.OK and recent and recent[-1] >= now_ms - REBALANCE_RECENT_MS:
        if _committed_since([p for p in parts if p.status != Status.OK], recent[-1]):
            return None  # the group moved on since that generation: it does not explain what is wrong now
        ago = max(0, (now_ms - recent[-1]) // 1000)
        text = f"Rebalance in progress: a new generation started {ago} s ago{_hosts(parts)}."
        return Explanation("rebalancing", text)
    return None


def _committed_since(parts: Sequence[PartitionStatus], at_ms: int) -> bool:
    """Some of `parts` committed at or after `at_ms`. A stalled partition commits (the same offset each time) whatever
    its newest entry's time says (`min-distance` keeps an older one)."""
    return any(p.status == Status.STALL or (p.end is not None and p.end.timestamp >= at_ms) for p in parts)


def _partitions_cause(status: GroupStatus, velocities: Mapping[TopicPartition, Velocity]) -> Explanation | None:
    """Rules 5-7: some partitions stopped or stalled."""
    parts = status.partitions
    stopped = [p for p in parts if p.status == Status.STOP]
    stalled = [p for p in parts if p.status == Status.STALL]
    stuck = [p for p in parts if p.status in (Status.STOP, Status.STALL)]
    stuck_tps = {(p.topic, p.partition) for p in stuck}
    moving = [tp for tp, v in velocities.items() if v.consume_rate and tp not in stuck_tps]
    if stuck and moving:
        return Explanation(
            "stuck-partition",
            f"Stuck on {_names(stuck)} while {len(moving)} other partition(s) keep moving{_hosts(stuck)}.",
        )
    if stalled:
        return Explanation(
            "stalled", f"The consumer keeps committing the same offset on {_names(stalled)} while messages arrive."
        )
    if stopped:
        still = f" but its members are still in the group{_hosts(stopped)}" if any(p.owner for p in stopped) else ""
        return Explanation("consumer-stopped", f"The consumer stopped committing on {_names(stopped)}{still}.")
    return None


def _rates_cause(velocities: Mapping[TopicPartition, Velocity], group: Velocity, ok: bool) -> Explanation:
    """Rules 8-12: the producer's and the consumer's rates; `unknown` without them. A group the rules find worse
    than OK is not said to keep up: its lag rose at every commit of its window, however little."""
    never = (CatchUp.NEVER,) if ok else (CatchUp.NEVER, CatchUp.KEEPING_UP)
    growth = group.lag_growth
    flat = group.log_end_flat_ms
    if flat is not None and flat >= PRODUCER_FLAT_MS and (growth is None or growth <= 0):
        return Explanation(
            "producer-stopped",
            f"The producer stopped: the log end has not moved for {_duration(flat / 1000)}; nothing new to consume.",
        )
    behind = [v for v in velocities.values() if v.catchup in never and v.lag_growth is not None]
    if behind:
        return _slower_than_producer(behind)
    if group.catchup == CatchUp.CATCHING_UP and group.catchup_seconds is not None:
        return Explanation("catching-up", f"Catching up: about {_duration(group.catchup_seconds)} to clear the lag.")
    if group.catchup == CatchUp.KEEPING_UP and ok:
        return Explanation(
            "keeping-up",
            f"Keeping up with the producer ({_rate(group.produce_rate or 0.0)} msg/s): its lag is what arrived since"
            " its latest commits.",
        )
    if group.catchup == CatchUp.CAUGHT_UP:
        return Explanation("caught-up", "Caught up.")
    return Explanation("unknown", "Not enough commits or log-end samples yet to say why.")


def _slower_than_producer(behind: Sequence[Velocity]) -> Explanation:
    consume = sum(v.consume_rate or 0.0 for v in behind)
    produce = sum(v.produce_rate or 0.0 for v in behind)
    rates = f"consuming {_rate(consume)} msg/s, producing {_rate(produce)} msg/s on {len(behind)} partition(s)"
    if consume > 0 and produce - consume < 0.05:  # the lag holds: "grows by 0.0 msg/s" said nothing
        lag = sum(v.lag for v in behind)
        return Explanation(
            "slower-than-producer", f"No faster than the producer: {rates}; the lag holds at {lag:,} messages."
        )
    return Explanation(
        "slower-than-producer", f"Slower than the producer: {rates}; the lag grows by {_rate(produce - consume)} msg/s."
    )


def _rate(per_second: float) -> str:
    """A rate in messages per second: one decimal, or two significant digits under 1 (a quiet topic's 0.02 msg/s
    read "0.0")."""
    return f"{per_second:.1f}" if per_second == 0 or abs(per_second) >= 0.95 else f"{per_second:.2g}"


def _names(parts: Sequence[PartitionStatus]) -> str:
    return _first_three([f"{p.topic}/{p.partition}" for p in parts])


def _hosts(parts: Sequence[PartitionStatus]) -> str:
    hosts = sorted({p.owner for p in parts if p.owner})
    return f" (members on {_first_three(hosts)})" if hosts else ""


def _first_three(names: Sequence[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
