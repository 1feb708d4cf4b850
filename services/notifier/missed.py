"""Status-change events the notifier never read (docs/status-topic.md#retention-and-a-notifier-that-falls-off-the-log),
stood in for from what it knows, as pure functions: an event of another incident than the one announced shows that
one's close was missed (`superseded_close`: the evaluator closes an incident before the group's next begins), and
reconciliation (reconcile.py) builds closes (`missed_close`) and opens (`found_open`) from the evaluator's stored
statuses. Both carry the reason `reconciled`. An event older than the one a state keeps (`older_than_kept`) changes
nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lagwatch.services.notifier.outbox import digest
from lagwatch.shared.events.status_event import SCHEMA_VERSION, StatusEvent, event_id
from lagwatch.shared.notifications.subscriptions.notification_policy import QUIET, Event, IncidentState, Policy

RECONCILED = "reconciled"  # a notification standing for an event the notifier did not read


@dataclass(frozen=True)
class StoredStatus:
    """A group's status as the evaluator stores it (keys.group_state): the truth events only tell of."""

    status: str  # NOTFOUND when the evaluator keeps nothing of the group
    seq: int  # transitions so far (0: none kept)
    incident_id: str | None
    incident_started_at: int | None
    changed_at: int | None  # when the last transition was recorded (ms)

    @property
    def quiet(self) -> bool:
        return self.status in QUIET


def missed_close_id(cluster: str, group: str, incident_id: str) -> str:
    """The id of an incident's close made in place of the missed one: the same wherever it is made (the event path or
    a reconciliation, any notifier), so it is recorded once per subscription."""
    return digest(RECONCILED, "close", cluster, group, incident_id)


def _without_figures(**identity: Any) -> StatusEvent:
    """A status event the notifier stands in for: the group's identity, status and incident; none of its figures."""
    return StatusEvent(
        schema_version=SCHEMA_VERSION, complete=0.0, partition_count=0, totallag=0, maxlag=None, partitions=(),
        replayed=False, **identity,
    )  # fmt: skip


def missed_close(announced: Event, incident_id: str, *, status: str, seq: int, evaluated_at: int) -> StatusEvent:
    """The close of the announced incident (`incident_id`, begun when `announced` says), as a quiet `status`; none of
    the group's figures, which were gone with the event."""
    return _without_figures(
        event_id=missed_close_id(announced.cluster, announced.group, incident_id),
        seq=seq,
        cluster=announced.cluster,
        group=announced.group,
        previous_status=announced.status if isinstance(announced, StatusEvent) else "ERR",
        status=status,
        incident_id=incident_id,
        incident_started_at=announced.incident_started_at,
        evaluated_at=evaluated_at,
    )


def found_open(cluster: str, group: str, stored: StoredStatus, now_ms: int) -> StatusEvent:
    """The group's current incident as an event, from its stored status: the id of the event that made the status (a
    late read of that event is then a duplicate), its status and incident; figures and previous status unknown."""
    return _without_figures(
        event_id=event_id(cluster, group, stored.seq),
        seq=stored.seq,
        cluster=cluster,
        group=group,
        previous_status="OK",
        status=stored.status,
        incident_id=stored.incident_id,
        incident_started_at=stored.incident_started_at,
        evaluated_at=stored.changed_at if stored.changed_at is not None else now_ms,
    )


def superseded_close(policy: Policy, event: StatusEvent, state: IncidentState | None) -> StatusEvent | None:
    """The close that `event`, of another incident (or of none), shows was missed, or None: quiet as the event's
    previous status when that one is (the group went from it into the new incident), else OK."""
    if state is None or state.incident_id is None or not isinstance(state.event, StatusEvent):
        return None
    if event.incident_id == state.incident_id or older_than_kept(event, state):
        return None
    status = event.previous_status if event.previous_status in QUIET and event.status not in QUIET else "OK"
    announced, incident = state.event, state.incident_id
    return missed_close(announced, incident, status=status, seq=event.seq - 1, evaluated_at=event.evaluated_at)


def older_than_kept(event: Event, state: IncidentState | None) -> bool:
    """Whether a status-change event comes before the one the state keeps (by its transition number, and not later:
    a group the evaluator forgot and saw again counts from 1 anew, later)."""
    if state is None or not isinstance(event, StatusEvent) or not isinstance(state.event, StatusEvent):
        return False
    kept = state.event
    if kept.cluster != event.cluster or kept.group != event.group:
        return False
    return event.seq < kept.seq and event.evaluated_at <= kept.evaluated_at
