"""The Spark replay estimates retention risk from the history's log-start samples with the live evaluator's pure
functions (`shared/statuses/retention.py`): the time left before unconsumed messages are deleted, then the messages
skipped once the log start passes the committed offset, in its timeline, its explanation and its events."""

import jsonschema
import pytest

from lagwatch.shared.events.status_event import schema
from lagwatch.spark.replay import CommitInput, ReplayConfig, SampleInput, replay_group
from lagwatch.spark.replay_batches import ReplayJob, group_rows

S = 1000
T0 = 1_767_225_600_000
DELETE_RATE = 100  # msg/s retention deletes from the front of the log


def documents(result):
    """The replay's events as the JSON objects they are published as."""
    return [e.as_dict() for e in result.events]


def falling_behind(seconds=300):
    """One partition: the log end moves at 100 msg/s from 10,000 and retention deletes from offset 0 at 100 msg/s;
    the consumer reads 50 msg/s from 10,000 (commits every 10 s). The log start reaches the committed offset at
    200 s: until then the time left is (committed - start) / 100 s, after it the gap is messages skipped."""
    start = lambda t: DELETE_RATE * t  # noqa: E731
    committed = lambda t: 10_000 + 50 * t  # noqa: E731
    samples = [SampleInput("t", 0, 10_000 + 100 * t, T0 + t * S - 1) for t in range(0, seconds + 1, 10)]
    samples += [SampleInput("t", 0, start(t), T0 + t * S - 1, log_start=True) for t in range(0, seconds + 1, 30)]
    commits = [CommitInput("t", 0, committed(t), T0 + t * S, t, T0 + t * S + 20) for t in range(0, seconds + 1, 10)]
    return commits, samples, start, committed


def row_at(result, t):
    return next(r for r in result.timeline if r.at == T0 + t * S)


def test_the_time_left_before_retention_deletes_unconsumed_messages():
    commits, samples, start, committed = falling_behind()
    result = replay_group("prod", "g", commits, samples, ReplayConfig())
    for t in (60, 120, 180):  # right after a log-start sample; the commit of that second is read 20 ms later
        truth = (committed(t - 10) - start(t)) / DELETE_RATE  # 65, 35, 5 s
        assert row_at(result, t).retention_risk_seconds == pytest.approx(truth, rel=0.05)
        assert row_at(result, t).skipped_messages == 0


def test_messages_skipped_once_the_log_start_passes_the_committed_offset_and_that_is_why():
    commits, samples, start, committed = falling_behind()
    result = replay_group("prod", "g", commits, samples, ReplayConfig())
    row = row_at(result, 270)
    assert row.skipped_messages == start(270) - committed(260)  # 27,000 - 23,000
    assert row.retention_risk_seconds == 0
    assert row.explanation == "messages-skipped"


def test_the_events_carry_the_partitions_retention_as_the_live_schema_says():
    commits, samples, *_ = falling_behind()
    result = replay_group("prod", "g", commits, samples, ReplayConfig())
    assert result.events, "the growing lag opens an incident"
    for event in documents(result):
        jsonschema.validate(event, schema())
    last = documents(result)[-1]
    assert any("retention" in p for p in last["partitions"])


def test_without_log_start_samples_no_risk_is_claimed():
    commits, samples, *_ = falling_behind()
    result = replay_group("prod", "g", commits, [s for s in samples if not s.log_start], ReplayConfig())
    assert all(r.retention_risk_seconds is None and r.skipped_messages == 0 for r in result.timeline)


def test_the_spark_rows_carry_the_retention_columns():
    commits, samples, *_ = falling_behind()
    job = ReplayJob(ReplayConfig(), (), {"prod": T0 + 300 * S})
    rows = [r for r in group_rows("prod", "g", commits, samples, job) if r["row_type"] == "timeline"]
    assert rows[-1]["skipped_messages"] > 0 and rows[-1]["explanation"] == "messages-skipped"
