"""When a subscription is told about a lag-threshold event (docs/webhooks.md#lag-seconds-alerts): lagwatch's own rules
beside Burrow's, as pure functions, one path for the three alerts (lag-seconds, data-loss-risk, messages-skipped).
The state per (subscription, cluster/group, alert) is kept under the alert's lag field (`outbox.lag_field`). An open
of another incident of the alert while one is announced first closes that one (`superseded_close`), so its end is
not lost."""

from __future__ import annotations

import msgspec

from lagwatch.shared.events.lag_threshold_event import Alert, LagThresholdEvent, Reason, event_id
from lagwatch.shared.notifications.subscriptions.notification_policy import (
    Decision,
    IncidentState,
    Kind,
    Policy,
    next_repeat,
)

ABOVE = "ABOVE"  # the `status` an announced lag incident keeps


def decide_lag(policy: Policy, event: LagThresholdEvent, state: IncidentState | None, now_ms: int) -> Decision | None:
    """What a lag-threshold event means for one subscription; None when it does not concern it (another
    threshold's crossing, or the end of an incident it was never told about): nothing to record."""
    announced = state.incident_id if state is not None else None
    if event.above:
        if not asks_for(policy, event) or event.incident_id == announced:
            return None
        opened = IncidentState(event.incident_id, ABOVE, now_ms, event)
        return Decision(Kind.LAG_OPEN, opened, next_repeat(policy, now_ms))
    if announced is None or event.incident_id != announced:
        return None
    return Decision(Kind.LAG_CLOSE if policy.send_close else None, None, None)


def superseded_close(policy: Policy, event: LagThresholdEvent, state: IncidentState | None) -> LagThresholdEvent | None:
    """The close of the announced incident that this event's open replaces (`closing_event`, with the figures as of
    this event), or None."""
    if state is None or state.incident_id is None or not isinstance(state.event, LagThresholdEvent):
        return None
    announced = state.event
    if not event.above or event.incident_id == state.incident_id or not asks_for(policy, event):
        return None
    if announced.threshold_seconds != event.threshold_seconds:
        reason = Reason.THRESHOLD_REMOVED  # for this subscription, which no longer asks for it
    else:  # (its close was missed: the same threshold opened again)
        reason = Reason.LAG if event.which == Alert.LAG_SECONDS else Reason.RETENTION
    return closing_event(announced, state.incident_id, reason, figures=event)


def closing_event(
    announced: LagThresholdEvent, incident: str, reason: Reason, figures: LagThresholdEvent | None = None
) -> LagThresholdEvent:
    """The event that closes the announced incident (`incident`), as the evaluator would publish it: the next
    `seq`, so the same id wherever it is built (a redelivery, or the evaluator's own close later, adds nothing),
    with the group's figures as of `figures` (default: the announced event's)."""
    seq = announced.seq + 1
    return msgspec.structs.replace(
        figures or announced,
        event_id=event_id(announced.cluster, announced.group, float(announced.threshold_seconds), seq, announced.which),
        seq=seq,
        threshold_seconds=announced.threshold_seconds,
        above=False,
        reason=reason,
        incident_id=incident,
        incident_started_at=announced.incident_started_at,
        partitions=(),
    )


def asks_for(policy: Policy, event: LagThresholdEvent) -> bool:
    """Whether the subscription asked for the alert and threshold the event went into."""
    alert, threshold = event.which, float(event.threshold_seconds)
    if alert == Alert.LAG_SECONDS:
        return policy.lag_threshold_s > 0 and threshold == policy.lag_threshold_s
    if alert == Alert.DATA_LOSS_RISK:
        return policy.retention_risk_s > 0 and threshold == policy.retention_risk_s
    return alert == Alert.MESSAGES_SKIPPED and policy.retention_risk_s > 0


def lag_repeat_due(policy: Policy, state: IncidentState | None, now_ms: int) -> Decision:
    """The timer's question for an announced lag incident whose repeat time has come."""
    if state is None or state.incident_id is None or not policy.repeats:
        return Decision(None, state, None)
    return Decision(Kind.LAG_REPEAT, state, now_ms + policy.send_interval_ms)
