"""Notifications held back by silences and `hold-for` (docs/webhooks.md#silences-and-hold-for), as pure functions over
the decisions of policy.py and lag_policy.py. A close is never held: a receiver must not be left with an incident
open. A held open is kept as the subscription's incident state with no `incident_id` and `held` set; a held update
or repeat on the announced state. The repeat timer wakes it at its release time (`due`): the later of the end of
`hold-for` and of the silence."""

from __future__ import annotations

from dataclasses import replace

from lagwatch.shared.events.lag_threshold_event import LagThresholdEvent
from lagwatch.shared.notifications.subscriptions.notification_policy import (
    Decision,
    Event,
    IncidentState,
    Kind,
    Policy,
    next_repeat,
)

OPENS = frozenset({Kind.OPEN, Kind.LAG_OPEN})


def _silenced(silenced_until: int | None, now_ms: int) -> bool:
    return silenced_until is not None and silenced_until > now_ms


def hold(
    policy: Policy,
    decision: Decision,
    before: IncidentState | None,
    event: Event,
    now_ms: int,
    silenced_until: int | None,
) -> Decision:
    """An event's decision, with what must wait held back. `silenced_until`: the end (ms) of the silences that
    match the group now, or None."""
    kind = decision.kind
    if kind in OPENS:
        assert decision.state is not None
        same = (
            before is not None
            and before.held in (Kind.OPEN, Kind.LAG_OPEN)
            and before.event.incident_id == event.incident_id
        )
        since = before.held_since if same and before is not None and before.held_since is not None else now_ms
        release = max(since + policy.hold_for_ms, silenced_until or 0)
        if release <= now_ms:
            return decision
        held = IncidentState(None, decision.state.status, 0, event, held=kind.value, held_since=since)
        return Decision(None, held, release)
    if kind in (Kind.UPDATE, Kind.STATUS) and _silenced(silenced_until, now_ms):
        if decision.state is None:  # a quiet status (threshold OK): nothing to send later
            return Decision(None, None, None)
        notified_at = before.notified_at if before is not None else decision.state.notified_at
        held = replace(decision.state, notified_at=notified_at, held=Kind.UPDATE.value, held_since=now_ms)
        return Decision(None, held, silenced_until)
    if kind is None and decision.state is not None and decision.state.incident_id is not None and decision.state.held:
        return Decision(None, replace(decision.state, held=None, held_since=None), decision.repeat_at)
    return decision


def due(
    policy: Policy,
    state: IncidentState | None,
    now_ms: int,
    silenced_until: int | None,
    repeat_due,
) -> Decision:
    """The timer's question for a state whose time has come: release what was held (or hold it longer), or
    repeat (`repeat_due`: policy.py's or lag_policy.py's) unless a silence holds the repeat until it ends."""
    if state is not None and state.held:
        hold_end = (state.held_since or 0) + policy.hold_for_ms if state.held in OPENS else 0
        release = max(hold_end, silenced_until or 0)
        if release > now_ms:
            return Decision(None, state, release)
        kind = Kind(state.held)
        if kind in OPENS:
            opened = IncidentState(state.event.incident_id, state.status, now_ms, state.event)
            return Decision(kind, opened, next_repeat(policy, now_ms))
        return Decision(
            kind, replace(state, notified_at=now_ms, held=None, held_since=None), next_repeat(policy, now_ms)
        )
    decision = repeat_due(policy, state, now_ms)
    if decision.kind is not None and state is not None and _silenced(silenced_until, now_ms):
        return Decision(None, replace(state, held=decision.kind.value, held_since=now_ms), silenced_until)
    return decision


def ends_unannounced(state: IncidentState | None, event: Event) -> bool:
    """The event ends the incident whose open is held (a lag alert back under before it was announced): the held
    open is dropped. (notification_policy.py forgets an unannounced status incident by itself.)"""
    return (
        state is not None
        and state.incident_id is None
        and state.held is not None
        and isinstance(event, LagThresholdEvent)
        and not event.above
        and state.event.incident_id == event.incident_id
    )
