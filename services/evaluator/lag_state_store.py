"""The evaluator's memory of alert thresholds in Redis: per group and threshold, how many times the group crossed it
(odd: it is over it now) and when its current or last incident began; the lag-threshold events written but not yet
acknowledged by Kafka (an outbox); and the cluster's index of groups to look at even when no threshold is configured
(over one, or with events pending). Crossings are recorded like status transitions (`status_store.py`): a
compare-and-set on the crossing count together with the event (`scripts.RECORD_LAG_CROSSING`), then the event is
published and taken out of the outbox.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from lagwatch.shared.events import scripts
from lagwatch.shared.events.group_outbox import acknowledge, read_states_and_outboxes
from lagwatch.shared.events.lag_threshold_event import Threshold
from lagwatch.shared.protocol import keys


@dataclass(frozen=True, slots=True)
class ThresholdState:
    seq: int = 0  # crossings so far
    started_at: int | None = None  # when the current (or last) incident went over, epoch ms

    @property
    def above(self) -> bool:
        return self.seq % 2 == 1


@dataclass(slots=True)
class GroupLagState:
    thresholds: dict[Threshold, ThresholdState] = field(default_factory=dict)
    pending: list[bytes] = field(default_factory=list)  # events in the outbox, oldest first

    @property
    def above_any(self) -> bool:
        return any(state.above for state in self.thresholds.values())


class LagStateStore:
    def __init__(self, redis: Redis, expire_group_ms: int) -> None:
        self.redis, self.expire_group_ms = redis, expire_group_ms
        self._record = redis.register_script(scripts.RECORD_LAG_CROSSING)

    async def states(self, cluster: str, groups: Sequence[str]) -> list[GroupLagState]:
        read = await read_states_and_outboxes(
            self.redis, cluster, groups, keys.group_lag_thresholds, keys.group_pending_lag_events
        )
        return [_state(raw, pending) for raw, pending in read]

    async def record(
        self, cluster: str, group: str, *, threshold_key: str, expected_seq: int, started_at: int, event: bytes
    ) -> bool:
        """Record crossing number `expected_seq + 1` and its event, unless another was recorded since."""
        state_keys = [keys.group_lag_thresholds(cluster, group), keys.group_pending_lag_events(cluster, group)]
        args: list[Any] = [threshold_key, expected_seq, expected_seq + 1, started_at, event, self.expire_group_ms]
        return bool(await self._record(keys=state_keys, args=args))

    async def acknowledge(self, cluster: str, events: Mapping[str, Sequence[bytes]]) -> None:
        """Kafka has these events ({group: events}): take them out of the outbox."""
        await acknowledge(self.redis, cluster, events, keys.group_pending_lag_events)

    async def mark(self, cluster: str, *, active: Sequence[str], inactive: Sequence[str]) -> None:
        """Keep the index of groups to look at (over a threshold, or with events pending) up to date."""
        if not active and not inactive:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            if active:
                pipe.sadd(keys.lag_active_groups(cluster), *active)
            if inactive:
                pipe.srem(keys.lag_active_groups(cluster), *inactive)
            await pipe.execute()


def _state(raw: dict[bytes, bytes], pending: list[bytes]) -> GroupLagState:
    thresholds = {}
    for threshold, value in raw.items():
        seq, _, started_at = value.decode().partition(":")
        thresholds[Threshold.from_key(threshold.decode())] = ThresholdState(
            int(seq), int(started_at) if started_at else None
        )
    return GroupLagState(thresholds, list(pending))
