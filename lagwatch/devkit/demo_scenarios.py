"""The demo's scenarios: one consumer group per story, each on its own one-partition topic, played in ticks.

A scenario is a list of phases; in every tick of a phase the scenario's producer writes `produce` messages, then
(half a tick later, so lagwatch's broker-offset poller has seen them) its consumer reads `consume` of them and
commits. Burrow's rules judge a partition over its last `intervals` commits, so every scenario first stays healthy
for `warmup(intervals)` ticks: its window is then full of caught-up commits before anything goes wrong, and each
status appears in a deterministic order (`expected`, checked by tests/system/test_demo_end_to_end.py).

The Kafka mock keeps about 5 MB per partition and deletes the oldest batches beyond (its log start moves, as a
broker's retention would): the `retention` scenario writes large messages fast behind a slow consumer, so retention
closes in on what it has not read and the demo's subscriptions (`retention-risk-threshold`) get its data-loss-risk
alert (`alerts`), before the consumer catches up.
"""

from __future__ import annotations

from dataclasses import dataclass

ALL: int | None = None  # `consume`: everything produced so far (a consumer that keeps up)
FOREVER: int | None = None  # `ticks`: the phase never ends
RETENTION_RISK_S = 5  # the demo subscriptions' `retention-risk-threshold` (the retention scenario's log keeps ~10 s)
RETENTION_TICKS = 15  # the retention scenario's slow phase: ends before retention reaches its consumer


@dataclass(frozen=True)
class Phase:
    note: str  # what happens, printed when the phase begins
    ticks: int | None
    produce: int  # messages per tick
    consume: int | None  # messages per tick; ALL = up to the log end; 0 = stuck
    commit_unchanged: bool = True  # commit each tick even without progress (as auto-commit does)
    rewind: int = 0  # seek back this many messages before the phase's first tick
    consumer_running: bool = True  # False: the consumer has left, nothing is consumed or committed
    message_bytes: int = 0  # padded to this size (0: a short text): large ones fill the mock's ~5 MB sooner


@dataclass(frozen=True)
class Scenario:
    name: str
    phases: tuple[Phase, ...]
    expected: tuple[tuple[str, str], ...]  # (previous, status) of each event on the status topic, in order
    bad_partition: str | None  # the partition status of the event that opens the incident
    notifications: tuple[str, ...]  # X-Lagwatch-Notification kinds a threshold-WARN subscription receives
    alerts: tuple[str, ...] = ()  # ... and the lag-threshold alerts ("<alert> <kind>") the demo's subscriptions get

    @property
    def group(self) -> str:
        return f"demo-{self.name}"

    @property
    def topic(self) -> str:
        return f"demo.{self.name}"


def warmup(intervals: int) -> int:
    """Healthy ticks before a scenario turns: enough commits to fill the window, and two more."""
    return intervals + 2


def scenarios(intervals: int) -> tuple[Scenario, ...]:
    """Every demo scenario, timed for windows of `intervals` commits."""
    healthy = Phase("keeps up", warmup(intervals), produce=5, consume=ALL)
    return (HEALTHY, *_incidents(healthy, intervals), _retention(healthy), IDLE)


HEALTHY = Scenario(
    "healthy",
    (Phase("keeps up with its topic, committing every tick", FOREVER, produce=5, consume=ALL),),
    expected=(("NOTFOUND", "OK"),),
    bad_partition=None,
    notifications=(),
)
IDLE = Scenario(
    "idle",
    (
        Phase("reads the 10 messages of a quiet topic", 1, produce=10, consume=ALL),
        Phase("has nothing to read and commits nothing (stays OK)", FOREVER, 0, ALL, commit_unchanged=False),
    ),
    expected=(("NOTFOUND", "OK"),),
    bad_partition=None,
    notifications=(),
)


def _incidents(healthy: Phase, intervals: int) -> tuple[Scenario, ...]:
    """The scenarios that turn after `healthy`: one for each of Burrow's partition statuses but OK."""
    return (
        Scenario(
            "lagging",
            (
                healthy,
                Phase("falls behind: 30 produced, 10 consumed per tick (WARN)", intervals + 2, 30, 10),
                Phase("catches up and keeps up again (OK)", FOREVER, produce=5, consume=ALL),
            ),
            expected=(("NOTFOUND", "OK"), ("OK", "WARN"), ("WARN", "OK")),
            bad_partition="WARN",
            notifications=("open", "close"),
        ),
        Scenario(
            "stalled",
            (
                healthy,
                Phase("its topic pauses; it catches up", 2, produce=0, consume=ALL),
                Phase("is stuck on a message but keeps committing it (STALL)", FOREVER, produce=5, consume=0),
            ),
            expected=(("NOTFOUND", "OK"), ("OK", "ERR")),
            bad_partition="STALL",
            notifications=("open",),
        ),
        Scenario(
            "stopped",
            (healthy, Phase("its consumer leaves; messages keep coming (STOP)", FOREVER, 5, 0, consumer_running=False)),
            expected=(("NOTFOUND", "OK"), ("OK", "ERR")),
            bad_partition="STOP",
            notifications=("open",),
        ),
        Scenario(
            "rewound",
            (
                healthy,
                Phase("seeks 40 messages back and re-reads them (REWIND)", 4, produce=5, consume=10, rewind=40),
                Phase("is past where it was and keeps up (OK)", FOREVER, produce=5, consume=ALL),
            ),
            expected=(("NOTFOUND", "OK"), ("OK", "ERR"), ("ERR", "OK")),
            bad_partition="REWIND",
            notifications=("open", "close"),
        ),
    )


def _retention(healthy: Phase) -> Scenario:
    # 25 messages of 20 kB a tick (500 kB): the mock's ~5 MB hold ~255 of them (~10 ticks' worth: its retention),
    # so from about the 10th tick of the phase retention deletes 25 a tick; reading 12 a tick, the consumer is then
    # ~(255 - 13 t) messages, (255 - 13 t) / 25 ticks, ahead of deletion: under RETENTION_RISK_S from then on, and
    # messages would be lost from t ~ 19. Caught up again, it is ~10 ticks ahead of deletion: out of the alert.
    big = Phase(
        "falls behind 20 kB messages: retention deletes toward what it has not read (WARN, data-loss-risk)",
        RETENTION_TICKS,
        produce=25,
        consume=12,
        message_bytes=20_000,
    )
    return Scenario(
        "retention",
        (healthy, big, Phase("catches up before anything is lost (OK, the alert closes)", FOREVER, 5, ALL)),
        expected=(("NOTFOUND", "OK"), ("OK", "WARN"), ("WARN", "OK")),
        bad_partition="WARN",
        notifications=("open", "close"),
        alerts=("data-loss-risk lag-open", "data-loss-risk lag-close"),
    )
