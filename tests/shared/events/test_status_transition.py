"""`transition()`, the status → event step the evaluator and the Spark replay share: no event without a change;
transitions numbered 1, 2, 3; one incident id from leaving OK until the event that closes it."""

import json

import jsonschema

from lagwatch.shared.events.event_codec import from_document
from lagwatch.shared.events.status_event import Incident, StatusEvent, fitted, schema, transition
from lagwatch.shared.protocol.types import GroupStatus, PartitionStatus, Status

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


def ten_thousand_bad_partitions() -> StatusEvent:
    parts = tuple(
        PartitionStatus("orders", p, Status.STOP if p % 2 else Status.WARN, None, None, p, 1.0) for p in range(10_000)
    )
    status = GroupStatus("prod", "billing", Status.ERR, 1.0, parts, maxlag=parts[-1], totallag=sum(range(10_000)))
    return transition("prod", "billing", Status.NOTFOUND, 0, Incident(None, None), status, NOW).event


def test_an_event_over_kafkas_record_size_lists_the_worst_partitions_that_fit():
    # the evaluator publishes it so and the replay writes it so: both meet at `fitted`
    event = ten_thousand_bad_partitions()
    raw, listed = fitted(event, limit=100_000)
    doc = json.loads(raw)
    assert len(raw) <= 100_000 and 0 < listed == len(doc["partitions"]) < 10_000
    kept = [p["partition"] for p in doc["partitions"]]
    assert kept == sorted(kept) and all(p % 2 for p in kept)  # STOP before WARN, in their order
    assert kept[-1] == 9_999 and doc["partition_count"] == 10_000 and doc["maxlag"]["partition"] == 9_999
    jsonschema.validate(doc, schema())
    assert fitted(event, limit=10**9) == (event.encode(), 10_000)  # under the limit: the event as it is


def not_ok_count(doc):
    return from_document(StatusEvent, doc).not_ok_count


def test_an_event_cut_to_fit_says_how_many_partitions_are_not_ok():
    """What notifications count from: the list holds only some of them."""
    raw, listed = fitted(ten_thousand_bad_partitions(), limit=100_000)
    doc = json.loads(raw)
    assert len(raw) <= 100_000 and listed < 10_000
    assert doc["partitions_not_ok"] == 10_000 and not_ok_count(doc) == 10_000
    jsonschema.validate(doc, schema())
    cut = StatusEvent.decode(raw)  # strict: the field is the event's own
    assert cut.not_ok_count == 10_000
    again, fewer = fitted(cut, limit=50_000)  # an outbox event fitted once more keeps the group's count
    assert fewer < listed and json.loads(again)["partitions_not_ok"] == 10_000


def test_an_event_listing_every_partition_not_ok_leaves_the_count_out():
    """As events always were: the count is the list's length (events written before the field, too)."""
    event = ten_thousand_bad_partitions()
    raw, listed = fitted(event, limit=10**9)
    doc = json.loads(raw)
    assert "partitions_not_ok" not in doc and listed == 10_000
    assert not_ok_count(doc) == event.not_ok_count == 10_000
    assert not_ok_count({**doc, "partitions": doc["partitions"][:3]}) == 3
