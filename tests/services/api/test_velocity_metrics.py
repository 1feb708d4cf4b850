"""/metrics' velocity families (and the dashboard's group row) from the evaluator's ready results: the catch-up
estimate counts down with the clock (+Inf when the consumer never catches up), the lag growth is as evaluated;
results written before velocity existed still read."""

import json

from lagwatch.services.api.metrics import MetricsFilter, group_lines
from lagwatch.shared.protocol.types import Status
from lagwatch.shared.runtime.config import load_config
from lagwatch.shared.statuses.results_store import (
    CAUGHT_UP_CATCHUP,
    KEEPING_UP_CATCHUP,
    NEVER_CATCHUP,
    UNKNOWN_CATCHUP,
    GroupResult,
    PartitionResult,
    decode_result,
)

NOW = 1_767_225_600_000
LABELS = 'cluster="local",consumer_group="g"'


def lines_of(result: GroupResult, now: int):
    keep = MetricsFilter(load_config(env={}))
    status, _, started, parts, *velocity = json.loads(result.encode())
    lines, steady = group_lines("local", "g", status, started, parts, {("t", 0): 500}, now, keep, *velocity)
    return "".join(lines), steady


def result(anchor, growth):
    part = PartitionResult("t", 0, Status.OK, 400, 10, -2)
    return GroupResult("g", Status.WARN, NOW, (), (part,), anchor, growth)


def test_a_catch_up_estimate_counts_down_with_the_clock():
    text, steady = lines_of(result(NOW + 120_000, -2.5), NOW + 20_000)
    assert f"lagwatch_consumer_group_catchup_seconds{{{LABELS}}} 100.0\n" in text
    assert f"lagwatch_consumer_group_lag_growth_per_second{{{LABELS}}} -2.5\n" in text
    assert not steady  # re-rendered at every scrape


def test_never_is_plus_infinity_and_caught_up_is_zero():
    never, steady = lines_of(result(NEVER_CATCHUP, 20.0), NOW)
    assert f"lagwatch_consumer_group_catchup_seconds{{{LABELS}}} +Inf\n" in never
    assert steady
    caught_up, _ = lines_of(result(CAUGHT_UP_CATCHUP, 0.0), NOW)
    assert f"lagwatch_consumer_group_catchup_seconds{{{LABELS}}} 0.0\n" in caught_up
    keeping_up, steady = lines_of(result(KEEPING_UP_CATCHUP, 0.1), NOW)  # lag only since its latest commit
    assert f"lagwatch_consumer_group_catchup_seconds{{{LABELS}}} 0.0\n" in keeping_up
    assert steady


def test_unknown_velocity_has_no_series_and_old_results_still_read():
    text, _ = lines_of(result(UNKNOWN_CATCHUP, None), NOW)
    assert "catchup_seconds" not in text and "lag_growth" not in text
    old = json.dumps([2, NOW, [], [["t", 0, 1, 400, 10, -2]]]).encode()  # written before velocity existed
    decoded = decode_result("g", old)
    assert decoded is not None and decoded.catchup_seconds(NOW) is None
    round_trip = decode_result("g", result(NOW + 5000, 1.5).encode())
    assert (round_trip.catchup_seconds(NOW), round_trip.lag_growth) == (5.0, 1.5)


def test_retention_risk_counts_down_and_skipped_messages_are_shown():
    part = PartitionResult("t", 0, Status.WARN, 400, 10, -2)
    at_risk = GroupResult("g", Status.WARN, NOW, (), (part,), NEVER_CATCHUP, 5.0, NOW + 90_000, 0)
    text, steady = lines_of(at_risk, NOW + 30_000)
    assert f"lagwatch_consumer_group_retention_risk_seconds{{{LABELS}}} 60.0\n" in text
    assert f"lagwatch_consumer_group_skipped_messages{{{LABELS}}} 0\n" in text
    assert not steady
    lost = GroupResult("g", Status.WARN, NOW, (), (part,), NEVER_CATCHUP, 5.0, NOW, 1234)
    text, _ = lines_of(lost, NOW + 30_000)
    assert f"lagwatch_consumer_group_retention_risk_seconds{{{LABELS}}} 0.0\n" in text
    assert f"lagwatch_consumer_group_skipped_messages{{{LABELS}}} 1234\n" in text
    assert decode_result("g", lost.encode()).skipped == 1234


def test_the_dashboards_group_row_names_the_catch_up_as_the_api_does():
    assert result(NOW + 120_000, -2.5).velocity_json(NOW + 20_000) == {
        "catchup": "catching_up",
        "catchup_seconds": 100.0,
        "lag_growth_per_second": -2.5,
    }
    assert result(NEVER_CATCHUP, 3.0).velocity_json(NOW)["catchup"] == "never"
    assert result(KEEPING_UP_CATCHUP, 0.1).velocity_json(NOW) == {
        "catchup": "keeping_up",
        "catchup_seconds": 0.0,
        "lag_growth_per_second": 0.1,
    }
    assert result(UNKNOWN_CATCHUP, None).velocity_json(NOW) == {
        "catchup": "unknown",
        "catchup_seconds": None,
        "lag_growth_per_second": None,
    }
