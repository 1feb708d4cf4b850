"""The Spark replay computes lag velocity and the explanation from history with the same pure functions as the
live evaluator: in its events (same schema) and its timeline, checked against histories with known rates."""

import jsonschema
import pytest

from lagwatch.shared.events.status_event import schema
from lagwatch.spark.replay import CommitInput, ReplayConfig, SampleInput, replay_group
from lagwatch.spark.replay_batches import ReplayJob, group_rows
from lagwatch.spark.synthetic_history import PRODUCED_PER_STEP, SCENARIOS, HistoryShape
from tests.spark.test_spark_replay import replay_scenario

STEP_S = HistoryShape().commit_interval_ms / 1000
PRODUCE = PRODUCED_PER_STEP / STEP_S  # msg/s per partition in the generated histories
S = 1000
T0 = 1_767_225_600_000


def documents(result):
    """The replay's events as the JSON objects they are published as."""
    return [e.as_dict() for e in result.events]


def opening(scenario):
    result = replay_scenario(SCENARIOS.index(scenario))
    event = next(e for e in documents(result) if e["previous_status"] == "OK")
    jsonschema.validate(event, schema())
    return event


def test_a_lagging_generated_group_consumes_half_what_is_produced_and_never_catches_up():
    event = opening("lagging")
    velocity = event["velocity"]  # two partitions, each consuming half of what its producer writes
    assert velocity["consume_rate"] == pytest.approx(2 * PRODUCE / 2, rel=0.05)
    assert velocity["produce_rate"] == pytest.approx(2 * PRODUCE, rel=0.05)
    assert velocity["lag_growth_per_second"] == pytest.approx(PRODUCE, rel=0.05)
    assert velocity["catchup"] == "never"
    assert event["partitions"][0]["velocity"]["consume_rate"] == pytest.approx(PRODUCE / 2, rel=0.05)
    assert event["explanation"]["code"] == "slower-than-producer"


@pytest.mark.parametrize(
    ("scenario", "code"), [("stalled", "stalled"), ("stopped", "consumer-stopped"), ("rewound", "rewound")]
)
def test_each_generated_err_says_why(scenario, code):
    assert opening(scenario)["explanation"]["code"] == code


def drain(produce_until_s, consume_rate, seconds=1500):
    """One partition: 100 msg/s produced until `produce_until_s`, consumed at `consume_rate` from lag 0, commits
    every 10 s, log end sampled every 10 s just before them."""
    log_end = lambda t: 10_000 + 100 * min(t, produce_until_s)  # noqa: E731
    samples = [SampleInput("t", 0, log_end(t), T0 + t * S - 1) for t in range(0, seconds + 1, 10)]
    commits = [
        CommitInput("t", 0, min(log_end(t), 10_000 + int(consume_rate * t)), T0 + t * S, t, T0 + t * S + 20)
        for t in range(0, seconds + 1, 10)
    ]
    return commits, samples, log_end


def test_a_stopped_producer_is_why_and_the_backlog_drains_when_the_replay_says():
    commits, samples, log_end = drain(produce_until_s=300, consume_rate=25)
    result = replay_group("prod", "g", commits, samples, ReplayConfig())
    row = next(r for r in result.timeline if r.at == T0 + 600 * S)
    truth = (log_end(600) - (10_000 + 25 * 600)) / 25  # seconds until the consumer reaches the log end: 600
    assert row.catchup_seconds == pytest.approx(truth, rel=0.10)
    assert row.lag_growth_per_second == pytest.approx(-25, rel=0.05)
    assert row.explanation == "producer-stopped"
    caught_up = next(r for r in result.timeline if r.at > T0 + 600 * S and r.totallag == 0)
    assert (caught_up.at - (T0 + 600 * S)) / 1000 == pytest.approx(truth, rel=0.05)


def test_the_spark_rows_carry_the_timeline_columns():
    commits, samples, _ = drain(produce_until_s=10_000, consume_rate=50, seconds=300)
    job = ReplayJob(ReplayConfig(), (), {"prod": T0 + 300 * S})
    rows = [r for r in group_rows("prod", "g", commits, samples, job) if r["row_type"] == "timeline"]
    assert rows[-1]["explanation"] == "slower-than-producer"
    assert rows[-1]["lag_growth_per_second"] == pytest.approx(50, rel=0.05)
    assert rows[-1]["catchup_seconds"] is None
