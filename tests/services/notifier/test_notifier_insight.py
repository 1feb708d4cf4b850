"""Slack and webhook messages carry lagwatch's velocity and explanation (issue 17): when the group catches up, or
that it will not at this rate, and why."""

import json

import jsonschema

from lagwatch.services.notifier.channels import slack
from lagwatch.services.notifier.messages import build_request
from lagwatch.shared.events.status_event import schema
from tests.services.notifier.test_notifier_messages import delivery, incident, sub
from tests.services.notifier.test_notifier_support import notification

SLOWER = {
    "velocity": {
        "consume_rate": 80.0,
        "produce_rate": 100.0,
        "lag_growth_per_second": 20.0,
        "catchup": "never",
        "catchup_seconds": None,
    },
    "explanation": {
        "code": "slower-than-producer",
        "text": "Slower than the producer: consuming 80.0 msg/s, producing 100.0 msg/s on 1 partition(s); "
        "the lag grows by 20.0 msg/s.",
    },
}
CATCHING_UP = {
    "velocity": {
        "consume_rate": 100.0,
        "produce_rate": 40.0,
        "lag_growth_per_second": -60.0,
        "catchup": "catching_up",
        "catchup_seconds": 754.2,
    },
    "explanation": {"code": "catching-up", "text": "Catching up: about 13 min to clear the lag."},
}


def fields_of(event, kind="update"):
    note = notification(event, kind, now_ms=event["evaluated_at"])
    return [f["text"] for f in slack.message(note)["blocks"][1]["fields"]]


def test_slack_says_a_slower_consumer_never_catches_up_and_why():
    _, worse, _ = incident()
    event = {**worse, **SLOWER}
    jsonschema.validate(event, schema())
    fields = fields_of(event)
    assert "*Catches up in*\nnever at this rate (lag +20.0 msg/s)" in fields
    assert any(f.startswith("*Why*\nSlower than the producer: consuming 80.0 msg/s") for f in fields)


def test_slack_says_when_a_faster_consumer_catches_up():
    _, worse, _ = incident()
    fields = fields_of({**worse, **CATCHING_UP})
    assert "*Catches up in*\n~12m 34s (lag -60.0 msg/s)" in fields
    assert "*Why*\nCatching up: about 13 min to clear the lag." in fields


def test_events_without_them_and_closes_show_neither():
    _, worse, closed = incident()
    assert not any(f.startswith(("*Catches up in*", "*Why*")) for f in fields_of(worse))
    assert not any(f.startswith(("*Catches up in*", "*Why*")) for f in fields_of({**closed, **SLOWER}, "close"))


def test_a_lag_threshold_alert_says_why_too():
    _, worse, _ = incident()
    lag_event = {
        **{k: worse[k] for k in ("cluster", "group", "status", "totallag", "evaluated_at", "incident_id")},
        "kind": "lag_threshold",
        "threshold_seconds": 300.0,
        "above": True,
        "reason": "lag",
        "max_lag_seconds": 400.0,
        "max_lag_seconds_lower_bound": False,
        "partitions": [],
        "explanation": SLOWER["explanation"],
    }
    assert any(f.startswith("*Why*\nSlower than the producer") for f in fields_of(lag_event, "lag-open"))


def test_the_webhook_default_body_carries_them_as_on_the_topic():
    _, worse, _ = incident()
    event = {**worse, **SLOWER}
    body = json.loads(build_request(sub(), delivery(event, "update")).body)
    assert body["velocity"] == SLOWER["velocity"]
    assert body["explanation"]["code"] == "slower-than-producer"


def test_slack_warns_before_retention_deletes_unread_messages_and_counts_those_lost():
    _, worse, _ = incident()
    at_risk = {**worse, "retention": {"retention_risk_seconds": 95.0, "retention_risk_basis": "log-start",
                                      "skipped_messages": 0}}  # fmt: skip
    jsonschema.validate(at_risk, schema())
    assert "*Retention deletes unread messages in*\n~1m 35s" in fields_of(at_risk)
    lost = {**worse, "retention": {"retention_risk_seconds": 0.0, "retention_risk_basis": "log-start",
                                   "skipped_messages": 1234}}  # fmt: skip
    assert "*Messages lost*\n1,234 deleted by retention before consumed" in fields_of(lost)
