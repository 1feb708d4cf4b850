"""Burrow's notifier semantics (threshold x status x send-close x send-once x send-interval), as a table."""

import pytest

from lagwatch.shared.events.event_codec import from_document
from lagwatch.shared.events.status_event import StatusEvent
from lagwatch.shared.notifications.subscriptions.notification_policy import (
    IncidentState,
    Kind,
    Policy,
    decide,
    repeat_due,
)
from lagwatch.shared.protocol.types import Status
from tests.services.notifier.test_notifier_support import Timeline

NOW = 1_800_000_000_000
OK, WARN, ERR = Status.OK, Status.WARN, Status.ERR


def _event(status: str, incident: str | None = "inc-1", previous: str = "OK") -> StatusEvent:
    doc = {
        "event_id": "e" * 32,
        "cluster": "c",
        "group": "g",
        "status": status,
        "previous_status": previous,
        "incident_id": None if status == "OK" and incident is None else incident,
    }
    return from_document(StatusEvent, doc, partial=True)  # the fields the rules read; the others left empty


ANNOUNCED = IncidentState("inc-1", "WARN", NOW - 60_000, _event("WARN"))

# Burrow's coordinator_test.go `notifyModuleTests` (threshold 1=OK, 2=WARN, 3=ERR; "existing" = an open
# incident), translated: Burrow is called on every evaluation, lagwatch on every status change, so an incident
# that is already open is one lagwatch announced (state) and a repeated bad status is an update.
#  threshold, status, incident state, send_close -> expected kind
BURROW_TABLE = [
    (OK, "OK", None, False, Kind.STATUS),
    (OK, "OK", None, True, Kind.STATUS),
    (OK, "OK", ANNOUNCED, False, Kind.STATUS),
    (OK, "OK", ANNOUNCED, True, Kind.CLOSE),
    (OK, "WARN", None, False, Kind.OPEN),
    (OK, "WARN", None, True, Kind.OPEN),
    (OK, "WARN", ANNOUNCED, False, Kind.UPDATE),
    (OK, "WARN", ANNOUNCED, True, Kind.UPDATE),
    (ERR, "WARN", None, False, None),
    (ERR, "WARN", None, True, None),
    (ERR, "WARN", ANNOUNCED, False, None),
    (ERR, "WARN", ANNOUNCED, True, None),
    (WARN, "OK", None, False, None),
    (WARN, "OK", None, True, None),
    (WARN, "OK", ANNOUNCED, False, None),
    (WARN, "OK", ANNOUNCED, True, Kind.CLOSE),
    # lagwatch's own rows
    (WARN, "ERR", None, True, Kind.OPEN),
    (WARN, "ERR", ANNOUNCED, True, Kind.UPDATE),
    (ERR, "ERR", None, True, Kind.OPEN),  # WARN -> ERR with threshold ERR: the first announcement
    (WARN, "NOTFOUND", ANNOUNCED, True, Kind.CLOSE),  # the group is gone: the incident is over
    (WARN, "NOTFOUND", ANNOUNCED, False, None),
    (OK, "NOTFOUND", None, True, None),  # Burrow never notifies NOTFOUND
    # Burrow closes any incident it saw; lagwatch only what it announced to the subscription
    (ERR, "OK", None, True, None),
]


@pytest.mark.parametrize(("threshold", "status", "state", "send_close", "expected"), BURROW_TABLE)
def test_burrow_notifier_table(threshold, status, state, send_close, expected):
    policy = Policy(threshold=threshold, send_close=send_close)
    decision = decide(policy, _event(status), state, NOW)
    assert decision.kind == expected
    if status in ("OK", "NOTFOUND"):
        assert decision.state is None and decision.repeat_at is None  # the incident is over either way
    elif expected in (Kind.OPEN, Kind.UPDATE):
        assert decision.state.incident_id == "inc-1" and decision.state.notified_at == NOW


# send-once x send-interval over a whole incident: WARN, ERR, WARN, (time passes), OK
@pytest.mark.parametrize(
    ("send_once", "interval_s", "threshold", "expected"),
    [
        (False, 0, WARN, ["open", "update", "update", "close"]),
        (True, 0, WARN, ["open", "close"]),
        (False, 300, WARN, ["open", "update", "update", "repeat", "repeat", "close"]),
        (True, 300, WARN, ["open", "close"]),  # send-once wins over send-interval
        (False, 300, ERR, ["open", "close"]),  # repeats only while at or above the threshold
        (False, 0, ERR, ["open", "close"]),
    ],
)
def test_send_once_and_send_interval_over_an_incident(send_once, interval_s, threshold, expected):
    policy = Policy(threshold=threshold, send_close=True, send_once=send_once, send_interval_ms=interval_s * 1000)
    timeline = Timeline("g", start_ms=NOW)
    sent, state, repeat_at = [], None, None

    def apply(event):
        nonlocal state, repeat_at
        d = decide(policy, event, state, timeline.now)
        state, repeat_at = d.state, d.repeat_at
        if d.kind:
            sent.append(d.kind.value)

    apply(timeline.next("OK"))
    for status in ("WARN", "ERR", "WARN"):
        apply(timeline.next(status, (10, 0)))
    # 11 minutes pass: with send-interval 300 s the timer finds a repeat due at +5 and +10 minutes
    for minute in range(1, 12):
        now = timeline.now + minute * 60_000
        if repeat_at is not None and now >= repeat_at:
            d = repeat_due(policy, state, now)
            repeat_at = d.repeat_at
            if d.kind:
                sent.append(d.kind.value)
    timeline.now += 11 * 60_000
    apply(timeline.next("OK"))
    assert sent == expected
    assert state is None and repeat_at is None


def test_a_new_incident_is_opened_again():
    policy = Policy(threshold=WARN)
    old = IncidentState("inc-old", "ERR", NOW - 1, _event("ERR", "inc-old"))  # its close was never seen
    assert decide(policy, _event("WARN", "inc-new"), old, NOW).kind == Kind.OPEN


def test_below_the_threshold_an_announced_incident_is_kept_for_its_close_without_repeats():
    policy = Policy(threshold=ERR, send_interval_ms=1000)
    state = IncidentState("inc-1", "ERR", NOW - 5000, _event("ERR"))
    d = decide(policy, _event("WARN"), state, NOW)
    assert d.kind is None and d.state.status == "WARN" and d.repeat_at is None
    assert repeat_due(policy, d.state, NOW).kind is None
    assert decide(policy, _event("ERR"), d.state, NOW).kind == Kind.UPDATE  # back above it: news
    assert decide(policy, _event("OK"), d.state, NOW).kind == Kind.CLOSE
