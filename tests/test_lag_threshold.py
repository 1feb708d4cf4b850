"""Lag-seconds thresholds as pure decisions: when a group crosses a threshold (evaluator), what the event says, and
what each subscription is told (notifier)."""

import json

import jsonschema
import pytest
from test_notifier_support import group_status

from lagwatch.services.evaluator.lag_thresholds import crossings
from lagwatch.services.notifier.events import parse_lag_event, parse_status_event
from lagwatch.services.notifier.lag_policy import ABOVE, decide_lag, lag_repeat_due
from lagwatch.services.notifier.messages import build_request
from lagwatch.services.notifier.outbox import Delivery
from lagwatch.services.notifier.subscriptions import compile_subscription
from lagwatch.shared.config import ConfigError, SubscriptionConfig, load_config
from lagwatch.shared.lag_threshold_event import Crossing, Reason, build_event, encode, schema
from lagwatch.shared.lag_threshold_index import index_entry, parse_index_entry, thresholds_for
from lagwatch.shared.notification_policy import IncidentState, Kind, Policy
from lagwatch.shared.protocol import Status
from lagwatch.shared.store.lag_state_store import ThresholdState
from lagwatch.shared.time_lag import TimeLag, exceeds

T = 300.0
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
    thresholds = frozenset({T})
    assert crossings({}, thresholds, TimeLag(301.0), gone=False) == [Crossing(T, True)]
    assert crossings({T: OVER}, thresholds, TimeLag(900.0), gone=False) == []  # one event per crossing
    assert crossings({T: OVER}, thresholds, TimeLag(3.0), gone=False) == [Crossing(T, False)]
    assert crossings({T: UNDER}, thresholds, TimeLag(3.0), gone=False) == []
    assert crossings({T: UNDER}, thresholds, TimeLag(301.0), gone=False) == [Crossing(T, True)]


def test_an_unknown_lag_changes_nothing():
    assert crossings({T: OVER}, frozenset({T}), None, gone=False) == []
    assert crossings({}, frozenset({T}), None, gone=False) == []


def test_each_threshold_is_crossed_on_its_own_lowest_first():
    thresholds = frozenset({60.0, T, 3600.0})
    assert crossings({}, thresholds, TimeLag(400.0), gone=False) == [Crossing(60.0, True), Crossing(T, True)]
    assert crossings({60.0: OVER, T: OVER}, thresholds, TimeLag(100.0), gone=False) == [Crossing(T, False)]


def test_a_gone_group_or_a_threshold_nobody_uses_closes_what_is_open():
    assert crossings({T: OVER, 60.0: UNDER}, frozenset({T, 60.0}), None, gone=True) == [
        Crossing(T, False, Reason.GROUP_GONE)
    ]
    assert crossings({T: OVER}, frozenset(), TimeLag(900.0), gone=False) == [
        Crossing(T, False, Reason.THRESHOLD_REMOVED)
    ]
    assert crossings({T: UNDER}, frozenset(), TimeLag(900.0), gone=False) == []


def test_thresholds_in_force_are_those_of_the_subscriptions_for_the_cluster():
    entries = [(300, []), (60, ["prod"]), (5, ["staging"]), (0, [])]
    assert thresholds_for("prod", entries) == {300.0, 60.0}
    assert thresholds_for("staging", entries) == {300.0, 5.0}
    sub = SubscriptionConfig(id="s", url="https://x.example", lag_seconds_threshold=90, clusters=["prod"])
    assert parse_index_entry(index_entry(sub)) == (90.0, ["prod"])
    assert index_entry(SubscriptionConfig(id="s", url="https://x.example")) is None
    assert parse_index_entry(b"not json") is None and parse_index_entry(b'{"clusters": []}') is None


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
    return build_event(
        cluster="local",
        group="billing",
        crossing=Crossing(threshold, above, reason),
        seq=seq,
        incident_started_at=1_700_000_000_000,
        evaluated_at=1_700_000_060_000,
        group_status=gs,
        time_lags=lags,
    )


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
    opened = decide_lag(policy, over, None, now_ms=5)
    assert opened.kind == Kind.LAG_OPEN and opened.state == IncidentState(over["incident_id"], ABOVE, 5, over)
    assert opened.repeat_at is None  # no send-interval
    assert decide_lag(policy, over, opened.state, now_ms=6) is None  # already announced
    closed = decide_lag(policy, lag_event(above=False, seq=2), opened.state, now_ms=7)
    assert (closed.kind, closed.state, closed.repeat_at) == (Kind.LAG_CLOSE, None, None)


def test_other_thresholds_and_unannounced_incidents_do_not_concern_a_subscription():
    assert decide_lag(Policy(lag_threshold_s=60), lag_event(), None, 1) is None
    assert decide_lag(Policy(), lag_event(), None, 1) is None  # no lag threshold: never told
    assert decide_lag(Policy(lag_threshold_s=T), lag_event(above=False, seq=2), None, 1) is None
    other = IncidentState("lag-someotherincident000000", ABOVE, 1, {})
    assert decide_lag(Policy(lag_threshold_s=T), lag_event(above=False, seq=2), other, 1) is None


def test_a_changed_threshold_still_closes_what_was_announced():
    announced = decide_lag(Policy(lag_threshold_s=T), lag_event(), None, 1).state
    gone = lag_event(above=False, seq=2, reason=Reason.THRESHOLD_REMOVED)
    assert decide_lag(Policy(lag_threshold_s=600), gone, announced, 2).kind == Kind.LAG_CLOSE


def test_send_close_send_interval_and_send_once():
    quiet = Policy(lag_threshold_s=T, send_close=False)
    state = decide_lag(quiet, lag_event(), None, 1).state
    closed = decide_lag(quiet, lag_event(above=False, seq=2), state, 2)
    assert closed.kind is None and closed.state is None  # forgotten, not told
    repeating = Policy(lag_threshold_s=T, send_interval_ms=60_000)
    opened = decide_lag(repeating, lag_event(), None, 1_000)
    assert opened.repeat_at == 61_000
    assert lag_repeat_due(repeating, opened.state, 61_000).kind == Kind.LAG_REPEAT
    assert lag_repeat_due(repeating, opened.state, 61_000).repeat_at == 121_000
    assert lag_repeat_due(repeating, None, 61_000).kind is None  # closed meanwhile
    once = Policy(lag_threshold_s=T, send_interval_ms=60_000, send_once=True)
    assert decide_lag(once, lag_event(), None, 1).repeat_at is None
    assert lag_repeat_due(once, opened.state, 61_000).kind is None


def _request(kind, event, sub_type):
    config = SubscriptionConfig(id="s", type=sub_type, url="https://hooks.example.com/x", lag_seconds_threshold=T)
    delivery = Delivery("d", "s", kind, event, event["event_id"], 0, attempts=1)
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
