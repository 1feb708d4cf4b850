"""Lag-seconds thresholds as pure decisions: when a group crosses a threshold (evaluator), what the event says, and
what each subscription is told (notifier)."""

import json

import jsonschema
import pytest

from lagwatch.services.evaluator.lag_state_store import ThresholdState
from lagwatch.services.evaluator.lag_thresholds import crossings
from lagwatch.services.notifier.channels import alertmanager, summary
from lagwatch.services.notifier.events import LAG_EVENTS, parse_lag_event, parse_status_event
from lagwatch.services.notifier.lag_policy import ABOVE, decide_lag, lag_repeat_due
from lagwatch.services.notifier.messages import build_request
from lagwatch.services.notifier.outbox import Delivery
from lagwatch.services.notifier.subscriptions import compile_subscription
from lagwatch.shared.events.event_codec import from_document
from lagwatch.shared.events.lag_threshold_event import (
    Alert,
    Crossing,
    LagThresholdEvent,
    Reason,
    Threshold,
    build_event,
    encode,
    schema,
)
from lagwatch.shared.notifications.subscriptions.lag_threshold_index import (
    index_entry,
    parse_index_entry,
    thresholds_for,
)
from lagwatch.shared.notifications.subscriptions.notification_policy import IncidentState, Kind, Policy, event_from_json
from lagwatch.shared.protocol.types import Status
from lagwatch.shared.runtime.config import ConfigError, SubscriptionConfig, load_config
from lagwatch.shared.statuses.retention import RetentionRisk
from lagwatch.shared.statuses.time_lag import TimeLag, exceeds
from tests.services.notifier.test_notifier_support import group_status

T = 300.0
LT = Threshold(T)  # a lag-seconds threshold
OVER, UNDER = ThresholdState(1, 1000), ThresholdState(2, 1000)


# --- the rule: over a threshold ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lag", "over"),
    [
        (TimeLag(300.5), True),
        (TimeLag(300.0), False),  # strictly greater
        (TimeLag(12.0), False),
        (TimeLag(301.0, lower_bound=True), True),  # the bound itself is over
        (TimeLag(200.0, lower_bound=True), False),  # "at least 200 s" is no evidence of more than 300 s
        (None, None),  # unknown
    ],
)
def test_a_lag_is_over_a_threshold_only_when_it_or_its_lower_bound_exceeds_it(lag, over):
    assert exceeds(lag, T) is over


def test_a_group_goes_over_stays_over_and_comes_back_under():
    thresholds = frozenset({LT})
    assert crossings({}, thresholds, TimeLag(301.0), gone=False) == [Crossing(T, True)]
    assert crossings({LT: OVER}, thresholds, TimeLag(900.0), gone=False) == []  # one event per crossing
    assert crossings({LT: OVER}, thresholds, TimeLag(3.0), gone=False) == [Crossing(T, False)]
    assert crossings({LT: UNDER}, thresholds, TimeLag(3.0), gone=False) == []
    assert crossings({LT: UNDER}, thresholds, TimeLag(301.0), gone=False) == [Crossing(T, True)]


def test_an_unknown_lag_changes_nothing():
    assert crossings({LT: OVER}, frozenset({LT}), None, gone=False) == []
    assert crossings({}, frozenset({LT}), None, gone=False) == []


def test_each_threshold_is_crossed_on_its_own_lowest_first():
    thresholds = frozenset({Threshold(60.0), LT, Threshold(3600.0)})
    assert crossings({}, thresholds, TimeLag(400.0), gone=False) == [Crossing(60.0, True), Crossing(T, True)]
    assert crossings({Threshold(60.0): OVER, LT: OVER}, thresholds, TimeLag(100.0), gone=False) == [Crossing(T, False)]


def test_a_gone_group_or_a_threshold_nobody_uses_closes_what_is_open():
    assert crossings({LT: OVER, Threshold(60.0): UNDER}, frozenset({LT, Threshold(60.0)}), None, gone=True) == [
        Crossing(T, False, Reason.GROUP_GONE)
    ]
    assert crossings({LT: OVER}, frozenset(), TimeLag(900.0), gone=False) == [
        Crossing(T, False, Reason.THRESHOLD_REMOVED)
    ]
    assert crossings({LT: UNDER}, frozenset(), TimeLag(900.0), gone=False) == []


@pytest.mark.parametrize("alert", [Alert.LAG_SECONDS, Alert.DATA_LOSS_RISK])
def test_a_changed_threshold_closes_the_old_incident_before_the_new_one_opens(alert):
    """A notifier keeps one incident per alert: the old threshold's close must come first, or the new open
    replaces the incident announced and that close no longer concerns anybody."""
    old, new = Threshold(600.0, alert), Threshold(300.0, alert)
    assert crossings({old: OVER}, frozenset({new}), TimeLag(700.0), gone=False, risk=RetentionRisk(200.0)) == [
        Crossing(600.0, False, Reason.THRESHOLD_REMOVED, alert),
        Crossing(300.0, True, Reason.LAG if alert == Alert.LAG_SECONDS else Reason.RETENTION, alert),
    ]


RISK, SKIPPED = Threshold(600.0, Alert.DATA_LOSS_RISK), Threshold(0.0, Alert.MESSAGES_SKIPPED)


def test_data_loss_risk_is_in_alert_while_retention_would_delete_unread_messages_sooner_than_the_threshold():
    thresholds = frozenset({RISK, SKIPPED})
    into = Crossing(600.0, True, Reason.RETENTION, Alert.DATA_LOSS_RISK)
    assert crossings({}, thresholds, None, gone=False, risk=RetentionRisk(599.0)) == [into]
    assert crossings({}, thresholds, None, gone=False, risk=RetentionRisk(600.0)) == []  # strictly under
    assert crossings({RISK: OVER}, thresholds, None, gone=False, risk=RetentionRisk(10.0)) == []
    out = Crossing(600.0, False, Reason.RETENTION, Alert.DATA_LOSS_RISK)
    assert crossings({RISK: OVER}, thresholds, None, gone=False, risk=RetentionRisk(None)) == [out]  # caught up
    assert crossings({RISK: OVER}, thresholds, None, gone=False, risk=None) == []  # unknown: nothing changes


def test_skipped_messages_open_their_own_alert_beside_the_risk_and_close_when_none_are_left_behind():
    thresholds = frozenset({RISK, SKIPPED, LT})
    lost = RetentionRisk(0.0, 300, "log-start")
    assert crossings({}, thresholds, TimeLag(10.0), gone=False, risk=lost) == [
        Crossing(600.0, True, Reason.RETENTION, Alert.DATA_LOSS_RISK),
        Crossing(0.0, True, Reason.RETENTION, Alert.MESSAGES_SKIPPED),
    ]
    assert crossings({RISK: OVER}, thresholds, TimeLag(10.0), gone=False, risk=lost) == [
        Crossing(0.0, True, Reason.RETENTION, Alert.MESSAGES_SKIPPED)  # already at risk: the loss is news
    ]
    assert crossings({SKIPPED: OVER}, thresholds, TimeLag(1.0), gone=False, risk=RetentionRisk(None)) == [
        Crossing(0.0, False, Reason.RETENTION, Alert.MESSAGES_SKIPPED)
    ]
    assert crossings({SKIPPED: OVER}, frozenset(), None, gone=True) == [
        Crossing(0.0, False, Reason.GROUP_GONE, Alert.MESSAGES_SKIPPED)
    ]


def test_thresholds_in_force_are_those_of_the_subscriptions_for_the_cluster():
    entries = [([LT], []), ([Threshold(60)], ["prod"]), ([Threshold(5)], ["staging"]), ([], [])]
    assert thresholds_for("prod", entries) == {LT, Threshold(60.0)}
    assert thresholds_for("staging", entries) == {LT, Threshold(5.0)}
    sub = SubscriptionConfig(id="s", url="https://x.example", lag_seconds_threshold=90, clusters=["prod"])
    assert parse_index_entry(index_entry(sub)) == ([Threshold(90.0)], ["prod"])
    risky = SubscriptionConfig(id="r", url="https://x.example", retention_risk_threshold=600)
    assert parse_index_entry(index_entry(risky)) == ([RISK, SKIPPED], [])
    assert parse_index_entry('{"seconds": 30, "clusters": []}') == ([Threshold(30.0)], [])  # written before
    assert index_entry(SubscriptionConfig(id="s", url="https://x.example")) is None
    assert parse_index_entry(b"not json") is None and parse_index_entry(b'{"clusters": []}') is None


def test_a_threshold_keeps_its_redis_field_and_lag_seconds_keeps_the_old_one():
    assert LT.key == "300" and Threshold.from_key("300") == LT
    assert RISK.key == "data-loss-risk:600" and Threshold.from_key(RISK.key) == RISK
    assert Threshold.from_key(SKIPPED.key) == SKIPPED


def test_the_options_are_validated_and_read_from_the_environment(tmp_path):
    config = load_config(env={"LAGWATCH__EVALUATOR__LAG_THRESHOLD_TOPIC": "lag.t"})
    assert config.evaluator.lag_threshold_topic == "lag.t"
    path = tmp_path / "lagwatch.yaml"
    path.write_text(
        json.dumps({"subscriptions": [{"id": "s", "url": "https://x.example", "lag-seconds-threshold": -1}]})
    )
    with pytest.raises(ConfigError, match=r"subscriptions\[0\]\.lag-seconds-threshold: must be >= 0"):
        load_config(path, env={})


# --- the event -----------------------------------------------------------------------------------------------------


def lag_event(above=True, seq=1, threshold=T, status=Status.OK, reason=Reason.LAG, lags=None):
    gs = group_status("local", "billing", status, (40, 0, 7))
    lags = lags or {("orders", 0): TimeLag(420.0), ("orders", 1): TimeLag(0.0), ("orders", 2): TimeLag(310.0, True)}
    return build_event(  # as the JSON object the notifier's deliveries carry (typed(): as its rules take it)
        cluster="local",
        group="billing",
        crossing=Crossing(threshold, above, reason),
        seq=seq,
        incident_started_at=1_700_000_000_000,
        evaluated_at=1_700_000_060_000,
        group_status=gs,
        time_lags=lags,
    ).as_dict()


def typed(doc, partial=False):
    return from_document(LagThresholdEvent, doc, partial=partial)


def test_the_event_follows_its_schema_and_names_the_partitions_over_the_threshold():
    over, under = lag_event(), lag_event(above=False, seq=2, lags={("orders", 0): TimeLag(1.0)})
    for event in (over, under):
        jsonschema.validate(json.loads(encode(event)), schema())
    assert [(p["partition"], p["lag_seconds"], p["lag_seconds_lower_bound"]) for p in over["partitions"]] == [
        (0, 420.0, False),
        (2, 310.0, True),
    ]
    assert over["max_lag_seconds"] == 420.0 and over["status"] == "OK" and over["totallag"] == 47
    assert under["partitions"] == [] and under["incident_id"] == over["incident_id"]  # the close names its incident
    assert over["event_id"] != under["event_id"] and over["event_id"] == lag_event()["event_id"]  # deterministic
    assert lag_event(threshold=300)["event_id"] == over["event_id"] != lag_event(threshold=60)["event_id"]
    assert lag_event(seq=3)["incident_id"] != over["incident_id"]  # the next time over is a new incident


def test_status_and_lag_events_are_told_apart():
    status_like = {"event_id": "e", "cluster": "c", "group": "g", "status": "OK", "previous_status": "WARN"}
    status_like |= {"incident_id": None, "evaluated_at": 1}
    assert parse_lag_event(encode(lag_event())) is not None and parse_status_event(encode(lag_event())) is None
    assert parse_lag_event(json.dumps(status_like)) is None and parse_status_event(json.dumps(status_like))
    assert parse_lag_event(json.dumps({**lag_event(), "above": "yes"})) is None
    assert parse_lag_event(b"\xff") is None


# --- what a subscription is told -------------------------------------------------------------------------------------


def test_a_subscription_hears_its_own_threshold_go_over_and_come_back_under():
    policy = Policy(threshold=Status.ERR, lag_threshold_s=T)
    over = lag_event()
    opened = decide_lag(policy, typed(over), None, now_ms=5)
    assert opened.kind == Kind.LAG_OPEN and opened.state == IncidentState(over["incident_id"], ABOVE, 5, typed(over))
    assert opened.repeat_at is None  # no send-interval
    assert decide_lag(policy, typed(over), opened.state, now_ms=6) is None  # already announced
    closed = decide_lag(policy, typed(lag_event(above=False, seq=2)), opened.state, now_ms=7)
    assert (closed.kind, closed.state, closed.repeat_at) == (Kind.LAG_CLOSE, None, None)


def test_other_thresholds_and_unannounced_incidents_do_not_concern_a_subscription():
    assert decide_lag(Policy(lag_threshold_s=60), typed(lag_event()), None, 1) is None
    assert decide_lag(Policy(), typed(lag_event()), None, 1) is None  # no lag threshold: never told
    assert decide_lag(Policy(lag_threshold_s=T), typed(lag_event(above=False, seq=2)), None, 1) is None
    other = IncidentState("lag-someotherincident000000", ABOVE, 1, typed({"kind": "lag_threshold"}, partial=True))
    assert decide_lag(Policy(lag_threshold_s=T), typed(lag_event(above=False, seq=2)), other, 1) is None


def test_a_changed_threshold_still_closes_what_was_announced():
    announced = decide_lag(Policy(lag_threshold_s=T), typed(lag_event()), None, 1).state
    gone = lag_event(above=False, seq=2, reason=Reason.THRESHOLD_REMOVED)
    assert decide_lag(Policy(lag_threshold_s=600), typed(gone), announced, 2).kind == Kind.LAG_CLOSE


def test_send_close_send_interval_and_send_once():
    quiet = Policy(lag_threshold_s=T, send_close=False)
    state = decide_lag(quiet, typed(lag_event()), None, 1).state
    closed = decide_lag(quiet, typed(lag_event(above=False, seq=2)), state, 2)
    assert closed.kind is None and closed.state is None  # forgotten, not told
    repeating = Policy(lag_threshold_s=T, send_interval_ms=60_000)
    opened = decide_lag(repeating, typed(lag_event()), None, 1_000)
    assert opened.repeat_at == 61_000
    assert lag_repeat_due(repeating, opened.state, 61_000).kind == Kind.LAG_REPEAT
    assert lag_repeat_due(repeating, opened.state, 61_000).repeat_at == 121_000
    assert lag_repeat_due(repeating, None, 61_000).kind is None  # closed meanwhile
    once = Policy(lag_threshold_s=T, send_interval_ms=60_000, send_once=True)
    assert decide_lag(once, typed(lag_event()), None, 1).repeat_at is None
    assert lag_repeat_due(once, opened.state, 61_000).kind is None


def _request(kind, event, sub_type):
    config = SubscriptionConfig(id="s", type=sub_type, url="https://hooks.example.com/x", lag_seconds_threshold=T)
    delivery = Delivery("d", "s", kind, event_from_json(event), event["event_id"], 0, attempts=1)
    return build_request(compile_subscription(config, "config"), delivery, now=1_700_000_100)


def test_slack_says_lag_above_and_back_under_and_webhooks_get_the_event():
    opened = _request("lag-open", lag_event(), "slack")
    body = json.loads(opened.body)
    assert body["text"] == ":hourglass_flowing_sand: Lag above 300 s: billing on local"
    fields = [f["text"] for f in body["blocks"][1]["fields"]]
    assert "*Behind by*\n7m" in fields and "*Status (Burrow's rules)*\nOK" in fields and "*Threshold*\n300 s" in fields
    worst = body["attachments"][0]["blocks"][0]["text"]["text"]
    assert "`orders` / 0: 7m behind" in worst and "`orders` / 2: at least 5m 10s behind" in worst
    repeat = json.loads(_request("lag-repeat", lag_event(), "slack").body)
    assert repeat["text"] == ":hourglass_flowing_sand: Still above 300 s: billing on local"
    back = json.loads(_request("lag-close", lag_event(above=False, seq=2), "slack").body)
    assert back["text"] == ":white_check_mark: Back under 300 s: billing on local"
    gone = lag_event(above=False, seq=2, reason=Reason.GROUP_GONE)
    assert json.loads(_request("lag-close", gone, "slack").body)["text"].endswith("billing on local is gone (NOTFOUND)")
    hook = _request("lag-open", lag_event(), "webhook")
    assert hook.body == encode(lag_event()) and hook.headers["X-Lagwatch-Notification"] == "lag-open"


# --- the retention alerts: data-loss-risk and messages-skipped ----------------------------------------------------


RISKS = {
    ("orders", 0): RetentionRisk(120.0, 0, "log-start"),
    ("orders", 1): RetentionRisk(None),
    ("orders", 2): RetentionRisk(900.0, 0, "retention.ms"),
}
LOST = {("orders", 0): RetentionRisk(0.0, 250, "log-start"), ("orders", 1): RetentionRisk(None)}


def risk_event(alert=Alert.DATA_LOSS_RISK, above=True, seq=1, risks=None, reason=Reason.RETENTION):
    threshold = 600.0 if alert == Alert.DATA_LOSS_RISK else 0.0
    gs = group_status("local", "billing", Status.OK, (40, 0, 7))
    return build_event(
        cluster="local",
        group="billing",
        crossing=Crossing(threshold, above, reason, alert),
        seq=seq,
        incident_started_at=1_700_000_000_000,
        evaluated_at=1_700_000_060_000,
        group_status=gs,
        time_lags={("orders", 0): TimeLag(420.0)},
        retention=risks if risks is not None else (RISKS if alert == Alert.DATA_LOSS_RISK else LOST),
    ).as_dict()


def test_a_data_loss_risk_event_names_the_partitions_retention_reaches_first_and_has_its_own_ids():
    event = risk_event()
    jsonschema.validate(json.loads(encode(event)), schema())
    assert event["alert"] == "data-loss-risk" and event["threshold_seconds"] == 600.0
    assert event["retention_risk_seconds"] == 120.0 and event["skipped_messages"] == 0
    assert [(p["partition"], p["retention_risk_seconds"]) for p in event["partitions"]] == [(0, 120.0)]
    assert event["incident_id"].startswith("risk-") and event["event_id"] != lag_event(threshold=600.0)["event_id"]
    assert lag_event()["alert"] == "lag-seconds"


def test_a_messages_skipped_event_says_how_many_were_lost_and_where():
    event = risk_event(Alert.MESSAGES_SKIPPED)
    jsonschema.validate(json.loads(encode(event)), schema())
    assert event["alert"] == "messages-skipped" and event["skipped_messages"] == 250
    assert [(p["partition"], p["skipped_messages"]) for p in event["partitions"]] == [(0, 250)]
    assert event["incident_id"].startswith("skip-") and event["incident_id"] != risk_event()["incident_id"]
    closed = risk_event(Alert.MESSAGES_SKIPPED, above=False, seq=2, risks={("orders", 0): RetentionRisk(None)})
    jsonschema.validate(json.loads(encode(closed)), schema())
    assert closed["partitions"] == [] and closed["incident_id"] == event["incident_id"]


def test_a_subscription_with_a_retention_risk_threshold_hears_both_retention_alerts_and_only_its_threshold():
    policy = Policy(retention_risk_s=600.0)
    opened = decide_lag(policy, typed(risk_event()), None, 5)
    assert opened.kind == Kind.LAG_OPEN and opened.state.incident_id == risk_event()["incident_id"]
    assert decide_lag(Policy(retention_risk_s=60.0), typed(risk_event()), None, 5) is None  # another threshold
    assert decide_lag(Policy(lag_threshold_s=600.0), typed(risk_event()), None, 5) is None  # lag only: not told
    assert (
        decide_lag(Policy(retention_risk_s=60.0), typed(risk_event(Alert.MESSAGES_SKIPPED)), None, 5).kind
        == Kind.LAG_OPEN
    )
    assert decide_lag(Policy(retention_risk_s=600.0), typed(lag_event(threshold=600.0)), None, 5) is None
    closed = decide_lag(policy, typed(risk_event(above=False, seq=2, risks={})), opened.state, 6)
    assert closed.kind == Kind.LAG_CLOSE


def test_each_alert_keeps_its_incident_under_its_own_state_field():
    fields = {
        LAG_EVENTS.state_field(e)
        for e in (typed(lag_event()), typed(risk_event()), typed(risk_event(Alert.MESSAGES_SKIPPED)))
    }
    assert fields == {"lag:local/billing", "lag:data-loss-risk:local/billing", "lag:messages-skipped:local/billing"}
    assert parse_lag_event(encode(risk_event())) is not None
    assert parse_lag_event(json.dumps({**lag_event(), "alert": "something-else"})) is None


def test_slack_says_when_retention_deletes_unread_messages_and_how_many_it_deleted():
    risky = json.loads(_request("lag-open", risk_event(), "slack").body)
    assert risky["text"] == (":warning: At risk: retention deletes unread messages within 600 s: billing on local")
    fields = [f["text"] for f in risky["blocks"][1]["fields"]]
    assert "*Deleted unread in*\n~2m" in fields and "*Threshold*\n600 s" in fields
    assert "`orders` / 0: deleted unread in ~2m" in risky["attachments"][0]["blocks"][0]["text"]["text"]
    lost = json.loads(_request("lag-open", risk_event(Alert.MESSAGES_SKIPPED), "slack").body)
    assert lost["text"] == ":x: Lost: 250 messages deleted before consumed: billing on local"
    assert "`orders` / 0: 250 messages lost" in lost["attachments"][0]["blocks"][0]["text"]["text"]
    back = json.loads(_request("lag-close", risk_event(above=False, seq=2, risks={}), "slack").body)
    assert back["text"] == ":white_check_mark: No longer at risk of data loss: billing on local"
    # no estimate at the close: said for what it is, not "unknown"
    assert "*Deleted unread in*\nnot in sight" in [f["text"] for f in back["blocks"][1]["fields"]]
    caught_up = {**risk_event(above=False, seq=2, risks={}), "totallag": 0}
    back = json.loads(_request("lag-close", caught_up, "slack").body)
    assert "*Deleted unread in*\nnothing unread" in [f["text"] for f in back["blocks"][1]["fields"]]


def test_other_destinations_name_the_retention_alerts():
    summary_lines = summary.worst_lines(typed(risk_event(Alert.MESSAGES_SKIPPED)), "lag-open")
    assert summary_lines == ["orders / 0: 250 messages lost, lag 40"]
    assert summary.title(typed(risk_event()), "lag-open") == "At risk of data loss within 600 s: billing on local"
    facts = dict(summary.facts(typed(risk_event()), "lag-open", 60))
    assert facts["Deleted unread in"] == "~2m" and facts["Messages lost"] == "0"
    assert alertmanager.labels(typed(risk_event()), "ABOVE")["alertname"] == "KafkaConsumerDataLossRisk"
    assert alertmanager.labels(typed(lag_event()), "ABOVE")["alertname"] == "KafkaConsumerLagSeconds"
