"""`transition()`, the status → event step the evaluator and the Spark replay share: no event without a change;
transitions numbered 1, 2, 3; one incident id from leaving OK until the event that closes it."""

import jsonschema

from lagwatch.shared.domain.protocol import GroupStatus, Status
from lagwatch.shared.domain.status_event import Incident, schema, transition

NOW = 1_767_225_600_000


def group(status: Status) -> GroupStatus:
    return GroupStatus(cluster="prod", group="billing", status=status, complete=1.0)


def play(statuses):
    """Feed statuses in turn; returns the events and the final (status, seq, incident)."""
    state = (Status.NOTFOUND, 0, Incident(None, None))
    events = []
    for i, status in enumerate(statuses):
        change = transition("prod", "billing", *state, None if status is None else group(status), NOW + i)
        if change is not None:
            events.append(change.event.as_dict())
            state = (change.status, change.seq, change.incident)
    return events, state


def test_an_unchanged_status_makes_no_event():
    events, (status, seq, _) = play([Status.OK, Status.OK, Status.OK])
    assert [(e["previous_status"], e["status"]) for e in events] == [("NOTFOUND", "OK")]
    assert (status, seq) == (Status.OK, 1)


def test_one_incident_from_leaving_ok_to_the_close_and_a_new_one_after():
    events, (_, seq, incident) = play([Status.OK, Status.WARN, Status.ERR, Status.OK, Status.ERR, None])
    for event in events:
        jsonschema.validate(event, schema())
    assert [e["seq"] for e in events] == [1, 2, 3, 4, 5, 6] and seq == 6
    first, second = events[1]["incident_id"], events[4]["incident_id"]
    assert first and events[2]["incident_id"] == events[3]["incident_id"] == first  # WARN, ERR, and the close
    assert second and second != first and events[5]["incident_id"] == second  # gone (NOTFOUND) closes it too
    assert incident == Incident(None, None)
    assert events[5]["status"] == "NOTFOUND"
