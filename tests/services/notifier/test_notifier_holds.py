"""Holding notifications back (services/notifier/holds.py, shared/notifications/subscriptions/silences.py), as pure
functions: silences and `hold-for` over the decisions of Burrow's rules and of lag-seconds thresholds."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from lagwatch.services.notifier.holds import due, ends_unannounced, hold
from lagwatch.services.notifier.lag_policy import decide_lag, lag_repeat_due
from lagwatch.shared.events.event_codec import from_document
from lagwatch.shared.events.lag_threshold_event import LagThresholdEvent
from lagwatch.shared.events.status_event import StatusEvent
from lagwatch.shared.notifications.subscriptions.notification_policy import (
    Decision,
    IncidentState,
    Kind,
    Policy,
    decide,
    repeat_due,
)
from lagwatch.shared.notifications.subscriptions.silences import (
    Matcher,
    Silence,
    SilenceInvalid,
    parse_new,
    silenced_until,
)
from tests.services.notifier.test_notifier_support import Timeline

NOW = 1_700_000_000_000


def step(policy, event, state, now, silenced_until=None):
    decision = decide(policy, event, state, now)
    return hold(policy, decision, state, event, now, silenced_until)


def test_hold_for_sends_the_open_only_once_the_incident_held_that_long():
    policy = Policy(hold_for_ms=60_000, send_interval_ms=0)
    t = Timeline("billing", start_ms=NOW)
    t.next("OK")
    warn = t.next("WARN", (5,))
    held = step(policy, warn, None, NOW)
    assert held.kind is None and held.repeat_at == NOW + 60_000
    assert held.state.incident_id is None and held.state.held == "open" and held.state.held_since == NOW
    worse = step(policy, t.next("ERR", (50,)), held.state, NOW + 30_000)  # still the same incident: the clock runs on
    assert worse.kind is None and worse.repeat_at == NOW + 60_000 and worse.state.status == "ERR"
    early = due(policy, worse.state, NOW + 59_000, None, repeat_due)
    assert early.kind is None and early.repeat_at == NOW + 60_000
    released = due(policy, worse.state, NOW + 60_000, None, repeat_due)
    assert released.kind == Kind.OPEN and released.state.incident_id == warn.incident_id
    assert released.state.status == "ERR" and released.state.held is None


def test_a_flap_shorter_than_hold_for_is_never_announced():
    policy = Policy(hold_for_ms=60_000)
    t = Timeline("billing", start_ms=NOW)
    t.next("OK")
    held = step(policy, t.next("WARN", (5,)), None, NOW)
    over = step(policy, t.next("OK"), held.state, NOW + 10_000)
    assert over == Decision(None, None, None)  # no close for what was never opened, the timer member dropped
    again = step(policy, t.next("WARN", (5,)), None, NOW + 20_000)  # a new incident: its own hold
    assert again.kind is None and again.state.held_since == NOW + 20_000


def test_a_silence_holds_the_open_and_releases_it_when_it_ends():
    policy = Policy()
    t = Timeline("billing", start_ms=NOW)
    t.next("OK")
    opened = t.next("ERR", (5,))
    held = step(policy, opened, None, NOW, silenced_until=NOW + 3_600_000)
    assert held.kind is None and held.repeat_at == NOW + 3_600_000
    still = due(policy, held.state, NOW + 3_600_000, NOW + 7_200_000, repeat_due)  # extended meanwhile
    assert still.kind is None and still.repeat_at == NOW + 7_200_000
    released = due(policy, held.state, NOW + 7_200_000, None, repeat_due)
    assert released.kind == Kind.OPEN and released.state.event == opened


def test_a_silence_holds_updates_and_repeats_but_never_a_close():
    policy = Policy(send_interval_ms=60_000)
    t = Timeline("billing", start_ms=NOW)
    t.next("OK")
    opened = step(policy, t.next("WARN", (5,)), None, NOW)
    assert opened.kind == Kind.OPEN
    silence_end = NOW + 600_000
    update = step(policy, t.next("ERR", (50,)), opened.state, NOW + 1000, silenced_until=silence_end)
    assert update.kind is None and update.state.held == "update" and update.repeat_at == silence_end
    assert update.state.notified_at == NOW  # nothing was sent
    released = due(policy, update.state, silence_end, None, repeat_due)
    assert released.kind == Kind.UPDATE and released.repeat_at == silence_end + 60_000
    repeat = due(policy, released.state, silence_end + 60_000, silence_end + 120_000, repeat_due)
    assert repeat.kind is None and repeat.state.held == "repeat" and repeat.repeat_at == silence_end + 120_000
    assert due(policy, repeat.state, silence_end + 120_000, None, repeat_due).kind == Kind.REPEAT
    closed = step(policy, t.next("OK"), repeat.state, silence_end + 61_000, silenced_until=silence_end + 120_000)
    assert closed.kind == Kind.CLOSE


def test_a_lag_alert_back_under_before_its_held_open_is_dropped():
    policy = Policy(lag_threshold_s=300.0, hold_for_ms=60_000)
    above = {"event_id": "e1", "cluster": "local", "group": "g", "threshold_seconds": 300, "above": True,
             "incident_id": "lag-1", "evaluated_at": NOW, "status": "OK"}  # fmt: skip
    above = from_document(LagThresholdEvent, above, partial=True)
    held = hold(policy, decide_lag(policy, above, None, NOW), None, above, NOW, None)
    assert held.kind is None and held.state.held == "lag-open"
    under = replace(above, event_id="e2", above=False)
    assert decide_lag(policy, under, held.state, NOW + 1000) is None  # lag_policy: not an incident it announced
    assert ends_unannounced(held.state, under) and not ends_unannounced(held.state, replace(under, incident_id="x"))
    released = due(policy, held.state, NOW + 60_000, None, lag_repeat_due)
    assert released.kind == Kind.LAG_OPEN and released.state.incident_id == "lag-1"


def _status_event(doc):
    return from_document(StatusEvent, doc, partial=True)


def test_incident_states_keep_what_is_held_through_json():
    state = IncidentState(None, "WARN", 0, _status_event({"incident_id": "i"}), held="open", held_since=NOW)
    assert IncidentState.from_json(state.to_json()) == state
    plain = IncidentState("i", "WARN", NOW, _status_event({}))
    assert "held" not in plain.to_json() and IncidentState.from_json(plain.to_json()) == plain


# --- silences ---------------------------------------------------------------------------------------------------------


def silence(*matchers, starts=0.0, ends=100.0):
    return Silence("s", tuple(Matcher(*m) for m in matchers), starts, ends, "", "me", 0.0)


def test_every_matcher_must_match_and_a_topic_matcher_covers_every_partition():
    s = silence(("cluster", "prod"), ("group", "billing-.*", True), ("topic", "orders"))
    assert s.matches("prod", "billing-eu", ["orders"])
    assert not s.matches("prod", "billing-eu", ["orders", "payments"])  # payments is not in maintenance
    assert not s.matches("prod", "billing-eu", [])  # no partition named: not a topic's incident
    assert not s.matches("dev", "billing-eu", ["orders"]) and not s.matches("prod", "xbilling-eu", ["orders"])


def test_silences_end_when_the_last_of_a_chain_does():
    chain = [silence(("group", "g"), starts=0, ends=10), silence(("group", "g"), starts=9, ends=20)]
    later = silence(("group", "g"), starts=30, ends=40)
    assert silenced_until([*chain, later], "c", "g", [], now=5) == 20
    assert silenced_until([*chain, later], "c", "g", [], now=25) is None
    assert silenced_until([*chain, later], "c", "other", [], now=5) is None


def test_a_new_silence_is_checked_field_by_field():
    made = parse_new({"matchers": [{"name": "group", "value": "g"}], "ends-at": 200, "created_by": "me"}, now=100)
    assert (made.starts_at, made.ends_at, made.created_by) == (100, 200, "me") and made.id.startswith("sil-")
    with pytest.raises(SilenceInvalid) as bad:
        parse_new(
            {
                "matchers": [{"name": "partition", "value": "1"}, {"name": "group", "value": "(", "regex": True}],
                "starts-at": "soon",
                "ends-at": 50,
                "colour": "red",
            },
            now=100,
        )
    assert set(bad.value.errors) == {"matchers[0].name", "matchers[1].value", "starts-at", "created-by", "colour"}
    with pytest.raises(SilenceInvalid) as past:
        parse_new({"matchers": [{"name": "group", "value": "g"}], "ends-at": 50, "created-by": "me"}, now=100)
    assert past.value.errors == {"ends-at": "must be after starts-at and in the future"}
    with pytest.raises(SilenceInvalid) as empty:
        parse_new({"matchers": [], "ends-at": 500, "created-by": "me"}, now=100)
    assert "matchers" in empty.value.errors


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
silence_like = st.fixed_dictionaries(
    {},
    optional={
        "matchers": json_values | st.lists(st.dictionaries(st.sampled_from(["name", "value", "regex"]), json_values)),
        "starts-at": json_values,
        "ends-at": json_values | st.floats(min_value=-1e12, max_value=1e12),
        "reason": json_values,
        "created-by": json_values,
    },
)


@settings(max_examples=300, deadline=None)
@given(doc=json_values | silence_like)
def test_any_json_is_a_silence_or_a_list_of_problems(doc):
    try:
        made = parse_new(doc, now=1_700_000_000.0)
    except SilenceInvalid as exc:
        assert exc.errors and all(isinstance(v, str) for v in exc.errors.values())
    else:
        assert made.matchers and made.ends_at > made.starts_at
        assert silenced_until([made], "c", "g", ["t"], now=made.starts_at) in (None, made.ends_at)
