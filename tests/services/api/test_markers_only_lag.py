"""/metrics and the dashboard's overview derive a partition's lag from the ready result and the latest log end: where
the log probe found only transaction markers up to that log end, the lag is 0; once the log end moves on, the offsets'
lag again (the evaluator's next result says what the log holds then)."""

import json

from lagwatch.services.api.dashboard_data import group_row, rank_results
from lagwatch.services.api.metrics import MetricsFilter, group_lines
from lagwatch.shared.protocol.types import Status
from lagwatch.shared.runtime.config import load_config
from lagwatch.shared.statuses.results_store import GroupResult, PartitionResult

NOW = 1_767_225_600_000
LABELS = 'cluster="local",consumer_group="eos"'
COMMITTED, MARKERS_END = 62, 63
RESULT = GroupResult(
    "eos", Status.OK, NOW, (), (PartitionResult("payments", 0, Status.OK, COMMITTED, 3, -2, False, 63),)
)


def metrics_at(log_end: int) -> str:
    status, _, started, parts = json.loads(RESULT.encode())
    ends = {("payments", 0): log_end}
    lines, _ = group_lines("local", "eos", status, started, parts, ends, NOW, MetricsFilter(load_config(env={})))
    return "".join(lines)


def test_the_metrics_read_lag_0_while_the_log_end_is_where_only_markers_lie():
    for log_end, lag in ((MARKERS_END, 0), (MARKERS_END + 21, 22)):
        text = metrics_at(log_end)
        assert f"burrow_kafka_consumer_lag_total{{{LABELS}}} {lag}\n" in text
        assert f"lagwatch_consumer_group_max_lag{{{LABELS}}} {lag}\n" in text
        assert f'burrow_kafka_consumer_partition_lag{{{LABELS},topic="payments",partition="0"}} {lag}\n' in text
    assert f"lagwatch_consumer_group_max_lag_seconds{{{LABELS}}} 0.0\n" in metrics_at(MARKERS_END)


def test_the_dashboard_ranks_and_shows_it_with_lag_0():
    for log_end, lag in ((MARKERS_END, 0), (MARKERS_END + 21, 22)):
        ends = {("payments", 0): log_end}
        [ranked_lag] = rank_results({b"eos": RESULT.encode()}, ends, {"payments": 1}).lags
        row = group_row(RESULT, ends, [], NOW, 3, None)
        assert (ranked_lag, row["totallag"], row["maxlag"]["current_lag"]) == (lag, lag, lag)
