"""The evaluator's memory in Redis: each group's current status, transition count and open incident, and the
status-change events written but not yet acknowledged by Kafka (an outbox). Key layout: `keys.py`.

A transition is recorded with a compare-and-set on the group's transition count (`TRANSITION`), together with its
event; the event is then published and removed from the outbox. An evaluator that dies between the two leaves the
event in the outbox, and the next evaluation of the group publishes it: no transition is lost, and none is
recorded twice. (A crash after Kafka acknowledged but before the removal re-sends it with the same `event_id`.)

Each recorded transition also updates the cluster's index of current statuses and its list of recent changes (the
dashboard's feed, capped at `RECENT_CHANGES`). An evaluation's transitions travel together (`transitions`): one
script call on a single Redis server; on Redis Cluster, whose pipelines take no scripts, one call per group.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from lagwatch.shared.events import scripts
from lagwatch.shared.events.group_outbox import acknowledge, read_states_and_outboxes
from lagwatch.shared.events.status_event import Incident
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Status
from lagwatch.shared.runtime.redis_client import reply

RECENT_CHANGES = 200  # status changes kept per cluster for the dashboard
# what a recent-changes entry copies from the event, beside what the transition itself knows
SUMMARY_FIELDS = (
    "event_id",
    "previous_status",
    "incident_id",
    "totallag",
    "max_lag_seconds",
    "max_lag_seconds_lower_bound",
)


@dataclass(frozen=True, slots=True)
class Transition:
    """One transition to record: the group moves from its state's `seq` to `status`, keeping `keeps`."""

    group: str
    expected_seq: int
    status: Status
    keeps: Incident
    event: bytes
    now_ms: int


@dataclass(slots=True)
class GroupState:
    status: Status = Status.NOTFOUND
    seq: int = 0
    incident: Incident = field(default_factory=lambda: Incident(None, None))
    pending: list[bytes] = field(default_factory=list)  # events in the outbox, oldest first


class StatusStore:
    def __init__(self, redis: Redis, expire_group_ms: int) -> None:
        self.redis = redis
        self.expire_group_ms = expire_group_ms
        self._transition = redis.register_script(scripts.TRANSITION)
        self._record_change = redis.register_script(scripts.RECORD_STATUS_CHANGE)
        self._transitions = redis.register_script(scripts.TRANSITIONS)

    async def states(self, cluster: str, groups: Sequence[str]) -> list[GroupState]:
        read = await read_states_and_outboxes(self.redis, cluster, groups, keys.group_state, keys.group_pending_events)
        return [_state(raw, pending) for raw, pending in read]

    async def transition(
        self, cluster: str, group: str, *, expected_seq: int, status: Status, keeps: Incident, event: bytes, now_ms: int
    ) -> bool:
        """Record the transition and its event if nobody recorded another since `expected_seq`."""
        return await self._one(cluster, Transition(group, expected_seq, status, keeps, event, now_ms))

    async def _one(self, cluster: str, t: Transition) -> bool:
        state_keys = [keys.group_state(cluster, t.group), keys.group_pending_events(cluster, t.group)]
        applied = bool(await self._transition(keys=state_keys, args=self._transition_args(t)))
        if applied:
            cluster_keys = [keys.statuses_index(cluster), keys.recent_status_changes(cluster)]
            await self._record_change(keys=cluster_keys, args=[t.group, t.status.name, _summary(t), RECENT_CHANGES])
        return applied

    async def transitions(self, cluster: str, items: Sequence[Transition]) -> list[bool]:
        """Record many transitions (each a compare-and-set, as `transition`); whether each was applied, in order."""
        if not items:
            return []
        if isinstance(self.redis, RedisCluster):  # its pipelines take no scripts: one call per group
            return [await self._one(cluster, t) for t in items]
        cluster_keys = [keys.statuses_index(cluster), keys.recent_status_changes(cluster)]
        group_keys: list[str] = []
        args: list[Any] = [RECENT_CHANGES]
        for t in items:
            group_keys += [keys.group_state(cluster, t.group), keys.group_pending_events(cluster, t.group)]
            args += [*self._transition_args(t), t.group, _summary(t)]
        replies = await self._transitions(keys=cluster_keys + group_keys, args=args)
        return [bool(reply) for reply in replies]

    def _transition_args(self, t: Transition) -> list[Any]:
        started = "" if t.keeps.started_at is None else t.keeps.started_at
        return [
            t.expected_seq,
            t.status.name,
            t.keeps.incident_id or "",
            started,
            t.now_ms,
            t.event,
            self.expire_group_ms,
        ]

    async def acknowledge(self, cluster: str, group: str, events: Sequence[bytes]) -> None:
        """Kafka has these events: take them out of the outbox."""
        await self.acknowledge_many(cluster, {group: events})

    async def acknowledge_many(self, cluster: str, events: Mapping[str, Sequence[bytes]]) -> None:
        """`acknowledge` for many groups in one round trip."""
        await acknowledge(self.redis, cluster, events, keys.group_pending_events)

    async def known_groups(self, cluster: str) -> dict[str, Status]:
        """Groups whose last recorded status is not NOTFOUND."""
        raw = await reply(self.redis.hgetall(keys.statuses_index(cluster)))
        return {g.decode(): Status[s.decode()] for g, s in raw.items()}

    async def count(self, cluster: str) -> int:
        """How many groups have a status other than NOTFOUND."""
        return int(await reply(self.redis.hlen(keys.statuses_index(cluster))))

    async def statuses_of(self, cluster: str, groups: Sequence[str]) -> list[Status | None]:
        """The last recorded status of each group (None: none, or NOTFOUND), in one round trip."""
        if not groups:
            return []
        raw = await reply(self.redis.hmget(keys.statuses_index(cluster), list(groups)))
        return [None if s is None else Status[s.decode()] for s in raw]

    async def recent_changes(self, cluster: str, count: int = RECENT_CHANGES) -> list[dict[str, Any]]:
        """The cluster's latest status changes, newest first (see `_summary`); unreadable entries skipped."""
        raw = await reply(self.redis.lrange(keys.recent_status_changes(cluster), 0, count - 1))
        return [change for change in map(_json_object, raw) if change]


class _SummarySource(msgspec.Struct):
    """What a recent-changes entry copies from an event (`SUMMARY_FIELDS`), each as its JSON (UNSET: left out)."""

    event_id: Any = msgspec.UNSET
    previous_status: Any = msgspec.UNSET
    incident_id: Any = msgspec.UNSET
    totallag: Any = msgspec.UNSET
    max_lag_seconds: Any = msgspec.UNSET
    max_lag_seconds_lower_bound: Any = msgspec.UNSET


def summary_source(raw: bytes) -> dict[str, Any]:
    """`SUMMARY_FIELDS` of the JSON object in `raw` (`_json_object`'s, the reference), read by msgspec without
    building the rest (an event's partitions). Only ASCII (every event's bytes) is read by msgspec, which does not
    look at the text of what it skips; the rest, and what msgspec refuses (not an object, NaN), by the reference."""
    try:
        found = msgspec.json.decode(raw, type=_SummarySource) if raw.isascii() else None
    except msgspec.MsgspecError:
        found = None
    if found is None:
        from_event = _json_object(raw)
        return {name: from_event[name] for name in SUMMARY_FIELDS if name in from_event}
    return {name: value for name in SUMMARY_FIELDS if (value := getattr(found, name)) is not msgspec.UNSET}


def _summary(t: Transition) -> bytes:
    """A recent-changes entry: the transition, plus the event's previous status, incident and lag (the event itself
    can list thousands of partitions). The incident is the one the event carries, so a closing change names it."""
    summary = {"group": t.group, "seq": t.expected_seq + 1, "status": t.status.name, "at": t.now_ms}
    summary["incident_id"] = t.keeps.incident_id
    summary.update(summary_source(t.event))
    return json.dumps(summary, separators=(",", ":")).encode()


def _json_object(raw: bytes) -> dict[str, Any]:
    """The JSON object in `raw`, or {} when it is not one."""
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _state(raw: dict[bytes, bytes], pending: list[bytes]) -> GroupState:
    if not raw:
        return GroupState(pending=list(pending))
    started = raw.get(b"incident_started_at")
    incident_id = raw.get(b"incident_id")
    return GroupState(
        status=Status[raw[b"status"].decode()],
        seq=int(raw[b"seq"]),
        incident=Incident(incident_id.decode() if incident_id else None, int(started) if started else None),
        pending=list(pending),
    )
