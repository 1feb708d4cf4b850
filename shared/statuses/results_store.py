"""Ready results: each group's last evaluation, stored compactly by the evaluator, read by `/metrics`, the dashboard
and the consumer listing (which so never re-run the rules over every window). Key layout: `keys.py`.

A result holds what does not move between evaluations: the group's status, each partition's status, newest
committed offset, filled ring slots and lag-in-seconds anchor (when the log end passed the newest commit). What
moves on its own is derived at read time: a partition's lag from its topic's latest log end (the same broker ring
the rules read), lag in seconds from the anchor and the clock, rebalances in the last hour from their start times.
The evaluator re-evaluates a group whenever one of these could change its status (a commit, a due instant of its
schedule, a log-end poll that could flip a rule), so a result is what the rules answer now.

Value: JSON `[status, last_commit_ms, [rebalance start ms, ...], [[topic, partition, status, newest offset | -1,
filled slots, lag anchor ms | -1 unknown | -2 caught up, lower bound 0/1, markers end], ...], [catch-up anchor ms |
-1 unknown | -2 caught up | -3 never | -4 keeping up, lag growth per second | null, retention-risk anchor ms | -1 none,
skipped messages]]`, statuses as Burrow's numbers; the last element (the group's velocity, `velocity.py`, and
retention risk, `retention.py`) is absent from results written before it existed, and its last two from older ones.
The catch-up anchor is when the group is expected to be caught up (its time to catch up then counts down with the
clock, as its lag shrinks); the retention-risk anchor likewise when its oldest unconsumed message is deleted. A
partition's lower bound is there only when it is 1 or a markers end follows: the log end up to which the log probe
found only transaction markers or aborted records past the newest commit (its lag is 0 while the log end stays there).
JSON: quick to parse in bulk, and readable in redis-cli.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from redis.asyncio import Redis

from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import GroupStatus, Status
from lagwatch.shared.runtime.redis_client import reply
from lagwatch.shared.statuses.json_spelling import spelled_alike
from lagwatch.shared.statuses.retention import RetentionRisk
from lagwatch.shared.statuses.time_lag import CAUGHT_UP, TimeLag
from lagwatch.shared.statuses.velocity import CatchUp, Velocity

UNKNOWN_LAG, CAUGHT_UP_LAG = -1, -2
UNKNOWN_CATCHUP, CAUGHT_UP_CATCHUP, NEVER_CATCHUP, KEEPING_UP_CATCHUP = -1, -2, -3, -4
NO_RETENTION_RISK = -1
EMPTY_VELOCITY = (UNKNOWN_CATCHUP, None, NO_RETENTION_RISK, 0)
HOUR_MS = 3_600_000
FINGERPRINT = (1 << 64) - 1  # the low 64 bits: a `hash` taken as unsigned
# a velocity's catch-up state as a stored anchor; CATCHING_UP stores its instant, UNKNOWN its seconds unknown
_STATE_ANCHORS = {
    CatchUp.CAUGHT_UP: CAUGHT_UP_CATCHUP,
    CatchUp.KEEPING_UP: KEEPING_UP_CATCHUP,
    CatchUp.NEVER: NEVER_CATCHUP,
}
_ANCHOR_STATES = {anchor: state for state, anchor in _STATE_ANCHORS.items()} | {UNKNOWN_CATCHUP: CatchUp.UNKNOWN}
Point = tuple[int, int]


@dataclass(frozen=True, slots=True)
class PartitionResult:
    topic: str
    partition: int
    status: Status
    newest: int | None  # newest committed offset
    filled: int  # ring slots holding a commit
    lag_anchor: int  # when the log end passed `newest` (ms), or UNKNOWN_LAG / CAUGHT_UP_LAG
    lower_bound: bool = False
    markers_end: int | None = None  # PartitionStatus's

    def lag(self, log_end: int | None) -> int:
        """current_lag as the rules compute it: log end minus newest commit, floored at 0 (0 when either is
        unknown, or while the log end is where the log probe found only transaction markers past the commit)."""
        if self.newest is None or log_end is None or log_end == self.markers_end:
            return 0
        return max(0, log_end - self.newest)

    def encode(self) -> list[Any]:
        """Its entry in a result's partitions (the module's docstring)."""
        entry = [self.topic, self.partition, int(self.status), -1 if self.newest is None else self.newest]
        entry += [self.filled, self.lag_anchor]
        if self.markers_end is not None:
            return [*entry, int(self.lower_bound), self.markers_end]
        return [*entry, 1] if self.lower_bound else entry

    def time_lag(self, now_ms: int) -> TimeLag | None:
        if self.lag_anchor == UNKNOWN_LAG:
            return None
        if self.lag_anchor == CAUGHT_UP_LAG:
            return CAUGHT_UP
        return TimeLag(max(0.0, (now_ms - self.lag_anchor) / 1000), self.lower_bound)


@dataclass(frozen=True, slots=True)
class GroupResult:
    group: str
    status: Status
    last_commit_ms: int
    rebalances: tuple[int, ...] = ()  # generation start times (ms) within the hour before the evaluation
    partitions: tuple[PartitionResult, ...] = ()
    catchup_anchor: int = UNKNOWN_CATCHUP  # see the module's docstring
    lag_growth: float | None = None  # messages per second
    retention_anchor: int = NO_RETENTION_RISK  # when the oldest unconsumed message is deleted (ms)
    skipped: int = 0  # messages deleted before they were consumed

    def velocity_json(self, now_ms: int) -> dict[str, Any]:
        """The group's catch-up and lag growth as the api shows them (`velocity.py`'s names): `catchup` caught_up,
        keeping_up, catching_up, never or unknown, `catchup_seconds` counting down, `lag_growth_per_second`."""
        seconds = self.catchup_seconds(now_ms)
        return {
            "catchup": _ANCHOR_STATES.get(self.catchup_anchor, CatchUp.CATCHING_UP).value,
            "catchup_seconds": None if seconds in (None, float("inf")) else round(seconds, 3),
            "lag_growth_per_second": self.lag_growth,
        }

    def retention_risk_seconds(self, now_ms: int) -> float | None:
        return None if self.retention_anchor < 0 else max(0.0, (self.retention_anchor - now_ms) / 1000)

    def catchup_seconds(self, now_ms: int) -> float | None:
        return catchup_seconds(self.catchup_anchor, now_ms)

    def rebalances_last_hour(self, now_ms: int) -> int:
        return sum(1 for at in self.rebalances if at >= now_ms - HOUR_MS)

    def stored_array(self) -> list[Any]:
        """The JSON array stored (the module's docstring)."""
        parts = [p.encode() for p in self.partitions]
        value = [int(self.status), self.last_commit_ms, list(self.rebalances), parts]
        if self.catchup_anchor != UNKNOWN_CATCHUP or self.lag_growth is not None or self.retention_anchor >= 0:
            growth = None if self.lag_growth is None else round(self.lag_growth, 3)
            value.append([self.catchup_anchor, growth, self.retention_anchor, self.skipped])
        return value

    def encode(self) -> bytes:
        """`stored_array`'s JSON as the standard library writes it (the reference), written by msgspec where it is
        spelled alike: an evaluation encodes every live group's result to compare it with the one stored."""
        value = self.stored_array()
        raw = msgspec.json.encode(value)
        return raw if spelled_alike(raw) else json.dumps(value, separators=(",", ":")).encode()


# a stored result's JSON array as plain lists, for the readers of every result at once (the api's /metrics, the
# dashboard's ranking), which read it by position: msgspec's decoder is several times json.loads's speed on them
decode_stored = msgspec.json.Decoder().decode


def decode_result(group: str, raw: bytes) -> GroupResult | None:
    """The stored result, or None when it is unreadable (skipped by readers; the next evaluation rewrites it)."""
    try:
        status, last, rebalances, parts, *velocity = json.loads(raw)
        anchor, growth, retention, skipped = [*velocity[0], NO_RETENTION_RISK, 0][:4] if velocity else EMPTY_VELOCITY
        return GroupResult(
            group,
            Status(status),
            last,
            tuple(rebalances),
            tuple(_decode_partition(p) for p in parts),
            int(anchor),
            None if growth is None else float(growth),
            int(retention),
            int(skipped),
        )
    except (ValueError, TypeError, IndexError, KeyError):
        return None


def _decode_partition(p: list[Any]) -> PartitionResult:
    lower, markers_end = len(p) > 6 and bool(p[6]), p[7] if len(p) > 7 else None
    return PartitionResult(p[0], p[1], Status(p[2]), None if p[3] < 0 else p[3], p[4], p[5], lower, markers_end)


def catchup_seconds(anchor: int, now_ms: int) -> float | None:
    """A stored catch-up anchor as seconds at `now_ms` (0: caught up; inf: never; None: unknown)."""
    if anchor == UNKNOWN_CATCHUP:
        return None
    if anchor == NEVER_CATCHUP:
        return float("inf")
    if anchor in (CAUGHT_UP_CATCHUP, KEEPING_UP_CATCHUP):
        return 0.0
    return max(0.0, (anchor - now_ms) / 1000)


def catchup_anchor(velocity: Velocity, now_ms: int) -> int:
    if velocity.catchup in _STATE_ANCHORS:
        return _STATE_ANCHORS[velocity.catchup]
    if velocity.catchup_seconds is None:
        return UNKNOWN_CATCHUP
    return round(now_ms + velocity.catchup_seconds * 1000)


def time_lag_anchor(lag: TimeLag | None, now_ms: int) -> tuple[int, bool]:
    """(anchor, lower bound) of a lag in seconds computed at `now_ms` (see `shared/statuses/time_lag.py`: it is
    `now - passed_at`, so `passed_at` is fixed until the history or the commit changes)."""
    if lag is None:
        return UNKNOWN_LAG, False
    if lag.seconds == 0 and not lag.lower_bound:
        return CAUGHT_UP_LAG, False
    return round(now_ms - lag.seconds * 1000), lag.lower_bound


def result_of(
    status: GroupStatus,
    last_commit_ms: int,
    rebalances: Iterable[int],
    time_lags: Mapping[tuple[str, int], TimeLag | None],
    now_ms: int,
    intervals: int,
    velocity: Velocity | None = None,
    retention: RetentionRisk | None = None,
) -> GroupResult:
    """The result to store for a group the rules just judged (`velocity`: the group's, `velocity.py`;
    `retention`: its retention risk, `retention.py`)."""
    parts = []
    for p in status.partitions:
        newest = p.end.offset if p.end is not None else None
        anchor = time_lag_anchor(time_lags.get((p.topic, p.partition)), now_ms)
        filled = round(p.complete * intervals)
        parts.append(PartitionResult(p.topic, p.partition, p.status, newest, filled, *anchor, p.markers_end))
    return GroupResult(
        status.group,
        status.status,
        last_commit_ms,
        tuple(sorted(rebalances)),
        tuple(parts),
        UNKNOWN_CATCHUP if velocity is None else catchup_anchor(velocity, now_ms),
        None if velocity is None else velocity.lag_growth,
        NO_RETENTION_RISK
        if retention is None or retention.seconds is None
        else round(now_ms + retention.seconds * 1000),
        0 if retention is None else retention.skipped,
    )


@dataclass(slots=True)
class ResultsStore:
    redis: Redis
    # what this process last wrote, per cluster and group: a 64-bit fingerprint of the encoded result (`hash` of its
    # bytes), not the bytes, as it is held for every group; above it, one of the windows its sparkline was last drawn
    # from (`sparkline_drawn`): one int per group, not two in two dicts. Two different results (or windows) share one
    # with a chance of 2^-64 per write, and then only that write is skipped (the next change writes it); 0 stands for
    # none, and a fingerprint of 0, as likely, is taken for written.
    _written: dict[str, dict[str, int]] = field(default_factory=dict)

    async def write(
        self,
        cluster: str,
        results: Mapping[str, GroupResult | None],
        sparklines: Mapping[str, Sequence[Point]] | None = None,
    ) -> int:
        """Store results (None: the group is NOTFOUND, its result goes). Unchanged results are not rewritten (an
        evaluation that changes nothing costs Redis nothing); returns how many were written or removed."""
        put: dict[str, bytes] = {}
        gone: list[str] = []
        written = self._written.setdefault(cluster, {})
        for group, result in results.items():
            if result is None:
                gone.append(group)
                written.pop(group, None)
                continue
            fingerprint, kept = hash(encoded := result.encode()) & FINGERPRINT, written.get(group, 0)
            if kept & FINGERPRINT != fingerprint:
                put[group], written[group] = encoded, kept >> 64 << 64 | fingerprint
        lines = {g: json.dumps(points, separators=(",", ":")) for g, points in (sparklines or {}).items()}
        if not put and not gone and not lines:
            return 0
        async with self.redis.pipeline(transaction=False) as pipe:
            if put:
                pipe.hset(keys.group_results(cluster), mapping=put)
            if lines:
                pipe.hset(keys.group_sparklines(cluster), mapping=lines)
            if gone:
                pipe.hdel(keys.group_results(cluster), *gone)
                pipe.hdel(keys.group_sparklines(cluster), *gone)
            await pipe.execute()
        return len(put) + len(gone)

    async def remove(self, cluster: str, group: str) -> None:
        """A deleted group's result goes with it (the api's DELETE), before any evaluator hears of it."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hdel(keys.group_results(cluster), group)
            pipe.hdel(keys.group_sparklines(cluster), group)
            await pipe.execute()
        self.forget(cluster, [group])

    def sparkline_drawn(self, cluster: str, group: str, windows: int) -> bool:
        """Was the group's sparkline last drawn from windows of this fingerprint (`drew`)?"""
        return self._written.get(cluster, {}).get(group, 0) >> 64 == windows & FINGERPRINT

    def drew(self, cluster: str, group: str, windows: int) -> None:
        """The group's sparkline is drawn from windows of this fingerprint (stored by the next `write`)."""
        written = self._written.setdefault(cluster, {})
        written[group] = (windows & FINGERPRINT) << 64 | written.get(group, 0) & FINGERPRINT

    def forget(self, cluster: str, groups: Iterable[str]) -> None:
        """Drop this process's memory of what it wrote (the groups moved to another evaluator)."""
        written = self._written.get(cluster, {})
        for group in groups:
            written.pop(group, None)

    async def raw(self, cluster: str) -> dict[bytes, bytes]:
        """Every group's encoded result (for readers that decode lazily, like /metrics)."""
        return await reply(self.redis.hgetall(keys.group_results(cluster)))

    async def all(self, cluster: str) -> dict[str, GroupResult]:
        decoded = (decode_result(group.decode(), raw) for group, raw in (await self.raw(cluster)).items())
        return {result.group: result for result in decoded if result is not None}

    async def topics_of(self, cluster: str, groups: Sequence[str]) -> dict[str, set[str]]:
        """The topics each group read at its last evaluation (none for a group without a readable result)."""
        raws = await reply(self.redis.hmget(keys.group_results(cluster), list(groups)))
        results = (decode_result(group, raw) for group, raw in zip(groups, raws, strict=True) if raw is not None)
        return {result.group: {p.topic for p in result.partitions} for result in results if result is not None}

    async def groups(self, cluster: str) -> list[str]:
        return sorted(g.decode() for g in await reply(self.redis.hkeys(keys.group_results(cluster))))

    async def sparklines(self, cluster: str) -> dict[str, list[Point]]:
        out = {}
        for group, raw in (await reply(self.redis.hgetall(keys.group_sparklines(cluster)))).items():
            try:
                out[group.decode()] = [(int(at), int(lag)) for at, lag in json.loads(raw)]
            except (ValueError, TypeError):
                continue
        return out
