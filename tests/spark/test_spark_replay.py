"""The replay the Spark job runs per group, without Spark: the shared window and rules over history time, the
report, the backtest counts and the charts."""

from __future__ import annotations

import itertools

import jsonschema
import pyarrow as pa
import pytest

from lagwatch.shared.events.event_codec import from_document
from lagwatch.shared.events.status_event import StatusEvent, schema
from lagwatch.shared.notifications.subscriptions.notification_policy import Policy
from lagwatch.shared.protocol.types import Commit, ProbedLog, RuleConfig, Status, WindowConfig
from lagwatch.shared.records.history import (
    KIND_BROKER,
    KIND_COMMIT,
    HistoryRecord,
    as_columns,
    commit_record,
    probe_record,
    topic_deleted_record,
)
from lagwatch.shared.runtime.config import load_config
from lagwatch.shared.windows.window import ADMIN_ORDERS_FROM
from lagwatch.spark.backtest import BacktestError, count_notifications, variants_from_document
from lagwatch.spark.charts import GroupChart, page
from lagwatch.spark.replay import (
    CommitInput,
    OffsetDeleted,
    ReplayConfig,
    SampleInput,
    replay_group,
    replay_inputs,
    status_changes,
)
from lagwatch.spark.replay_batches import ReplayJob, group_rows, replay_batches
from lagwatch.spark.report import group_report, weighted_percentile
from lagwatch.spark.synthetic_history import FINAL_STATUS, HistoryShape, group_records, scenario_of

SHAPE = HistoryShape(groups=6, partitions=2, commits_per_partition=20)
T0 = SHAPE.start_ms


def documents(result):
    """The replay's events as the JSON objects they are published as."""
    return [e.as_dict() for e in result.events]


def inputs_of(group_index: int, shape: HistoryShape = SHAPE) -> tuple[list[CommitInput], list[SampleInput]]:
    return replay_inputs(group_records(shape, group_index, 0))


def replay_scenario(group_index: int, config: ReplayConfig | None = None):
    commits, samples = inputs_of(group_index)
    return replay_group("prod", f"g{group_index}", commits, samples, config or ReplayConfig(), end_ms=SHAPE.end_ms)


@pytest.mark.parametrize("index", range(6), ids=[scenario_of(i) for i in range(6)])
def test_each_generated_scenario_ends_in_its_status(index):
    result = replay_scenario(index)

    assert result.timeline[-1].status == FINAL_STATUS[scenario_of(index)]
    assert documents(result)[0]["previous_status"] == "NOTFOUND"
    assert documents(result)[-1]["status"] == FINAL_STATUS[scenario_of(index)]


def test_events_chain_and_match_the_live_schema():
    validator = jsonschema.Draft202012Validator(schema())
    for index in range(6):
        events = documents(replay_scenario(index))
        for before, after in itertools.pairwise(events):
            assert after["previous_status"] == before["status"]
            assert after["seq"] == before["seq"] + 1
        for event in events:
            validator.validate(event)
            assert event["replayed"] is True


def test_the_partition_statuses_behind_err_are_the_burrow_ones():
    bad = {scenario_of(i): documents(replay_scenario(i))[-1]["partitions"] for i in (2, 3, 4)}

    assert {p["status"] for p in bad["stalled"]} == {"STALL"}
    assert {p["status"] for p in bad["stopped"]} == {"STOP"}
    assert {p["status"] for p in bad["rewound"]} == {"REWIND"}


def test_an_incident_carries_one_id_from_open_to_close():
    commits = [CommitInput("t", 0, 1000, T0 + i * 10_000, i, T0 + i * 10_000 + 5) for i in range(12)]
    # the log end runs away for a while (WARN), then the consumer catches up
    samples = [SampleInput("t", 0, 1000 + (200 * i if i < 8 else 0), T0 + i * 10_000) for i in range(8)]
    commits = [c._replace(offset=1000 + 100 * i) for i, c in enumerate(commits[:8])]
    commits += [
        CommitInput("t", 0, 2400 + 100 * i, T0 + (8 + i) * 10_000, 8 + i, T0 + (8 + i) * 10_000 + 5) for i in range(4)
    ]
    samples += [SampleInput("t", 0, 2400 + 100 * i, T0 + (8 + i) * 10_000) for i in range(4)]

    result = replay_group("c", "g", commits, samples, ReplayConfig(window=WindowConfig(intervals=3)))
    events = documents(result)

    assert status_changes(result.events) == [("NOTFOUND", "OK"), ("OK", "WARN"), ("WARN", "OK")]
    assert events[1]["incident_id"] is not None
    assert events[2]["incident_id"] == events[1]["incident_id"]


def test_a_commit_before_its_partitions_first_log_end_waits_for_it_as_the_ingest_holds_it():
    """The ingest holds a commit of a partition it has no log end for (a topic newer than its last metadata
    refresh) and looks the log end up; that poll's sample is archived after the commit, which it stores with it.
    A commit of a partition that never gets a log end is dropped, as the ingest drops it."""
    commits = [CommitInput("t", 0, 5, T0, 1, T0), CommitInput("gone", 0, 5, T0, 2, T0)]
    samples = [SampleInput("t", 0, 5, T0 + 250)]

    result = replay_group("c", "g", commits, samples, ReplayConfig(), end_ms=T0 + 60_000)

    assert result.outcomes == {"APPENDED": 1, "NO_BROKER_OFFSET": 1}
    assert status_changes(result.events) == [("NOTFOUND", "OK")]


def test_an_archive_that_moves_from_admin_mode_to_the_topic_replays_without_a_stop():
    """The poller's commits (orders from ADMIN_ORDERS_FROM, stamped when seen), then the ingest on the topic, read
    from its start: the same ten commits again with the coordinator's stamps, then the consumer's next ones. The
    replay goes on as the ingest does (window._continued_from_admin); before, the topic's commits were all older than
    the poller's and the consumer read STOP once its window's span had passed."""
    switch = T0 + 100_000
    commits = [CommitInput("t", 0, 100 * i, T0 + i * 10_000, ADMIN_ORDERS_FROM + i, T0 + i * 10_000) for i in range(10)]
    commits += [CommitInput("t", 0, 100 * i, T0 + i * 10_000 - 2_000, i, switch + i) for i in range(10)]
    commits += [CommitInput("t", 0, 100 * i, T0 + i * 10_000, i, T0 + i * 10_000) for i in range(10, 30)]
    samples = [SampleInput("t", 0, 100 * i, T0 + i * 10_000 - 1) for i in range(30)]

    result = replay_group("c", "g", commits, samples, ReplayConfig(), end_ms=T0 + 300_000)

    assert result.outcomes == {"APPENDED": 30, "DUPLICATE": 10}
    assert status_changes(result.events) == [("NOTFOUND", "OK")]


def test_a_group_silent_for_expire_group_becomes_notfound():
    window = WindowConfig(expire_group_ms=60_000)
    commits = [CommitInput("t", 0, 10 * i, T0 + i * 1000, i, T0 + i * 1000) for i in range(5)]
    samples = [SampleInput("t", 0, 10 * i, T0 + i * 1000 - 1) for i in range(5)]

    result = replay_group("c", "g", commits, samples, ReplayConfig(window=window, tick_ms=1000), end_ms=T0 + 3_600_000)

    assert status_changes(result.events) == [("NOTFOUND", "OK"), ("OK", "NOTFOUND")]
    assert documents(result)[-1]["evaluated_at"] == T0 + 4000 + 60_000 + 1000  # the first tick after the expiry


def test_a_stop_is_seen_once_the_log_end_ring_forgets_the_caught_up_offsets():
    # commits every 10 s for 100 s; then the consumer is gone while the log end jumps and the poller keeps sampling
    commits = [CommitInput("t", 0, 100 * i, T0 + i * 10_000, i, T0 + i * 10_000) for i in range(10)]
    samples = [SampleInput("t", 0, 100 * i, T0 + i * 10_000 - 1) for i in range(10)]
    samples += [SampleInput("t", 0, 5000, T0 + i * 10_000) for i in range(10, 200)]

    result = replay_group("c", "g", commits, samples, ReplayConfig(), end_ms=T0 + 86_400_000)

    assert status_changes(result.events) == [("NOTFOUND", "OK"), ("OK", "ERR")]
    # the window spans 90 s, so the STOP check holds from 90 s after the last commit (T0 + 180 s), but the ring of
    # the last 10 log ends still shows the consumer caught up until the 10th sample after it (T0 + 190 s)
    assert documents(result)[-1]["evaluated_at"] == T0 + 190_000
    assert documents(result)[-1]["partitions"][0]["status"] == "STOP"


def test_log_end_samples_archived_twice_change_nothing():
    """The archive is at-least-once (a restart re-reads what it wrote but had not committed): every sample twice
    gives the same replay. Commits twice are duplicates by their `order`; a sample twice must not take two places
    in the log-end ring, where it would push out a poll still showing the consumer caught up."""
    commits = [CommitInput("t", 0, 100 * i, T0 + i * 10_000, i, T0 + i * 10_000) for i in range(10)]
    samples = [SampleInput("t", 0, 100 * i, T0 + i * 10_000 - 1) for i in range(10)]
    samples += [SampleInput("t", 0, 5000, T0 + i * 10_000) for i in range(10, 200)]
    config = ReplayConfig(tick_ms=1000)  # the STOP check holds from T0 + 180 s; the ring shows no catch-up from 190 s
    once = replay_group("c", "g", commits, samples, config, end_ms=T0 + 86_400_000)

    twice = replay_group("c", "g", commits * 2, samples * 2, config, end_ms=T0 + 86_400_000)

    assert documents(once)[-1]["evaluated_at"] == T0 + 190_000
    assert documents(twice) == documents(once)
    assert twice.timeline == once.timeline
    assert twice.outcomes == {**once.outcomes, "DUPLICATE": len(commits)}


def test_quiet_stretches_cost_no_evaluations():
    commits = [CommitInput("t", 0, 100 * i, T0 + i * 10_000, i, T0 + i * 10_000) for i in range(10)]
    samples = [SampleInput("t", 0, 100 * i, T0 + i * 10_000 - 1) for i in range(10)]

    month = replay_group("c", "g", commits, samples, ReplayConfig(), end_ms=T0 + 30 * 86_400_000)

    # OK while committing, ERR (STOP) never: the ring shows it caught up; NOTFOUND after expire-group (7 days)
    assert status_changes(month.events) == [("NOTFOUND", "OK"), ("OK", "NOTFOUND")]
    assert len(month.timeline) <= 4


def test_allowed_lag_changes_the_verdict():
    lagging = 1  # WARN under the defaults
    assert documents(replay_scenario(lagging))[-1]["status"] == "WARN"

    tolerant = ReplayConfig(rules=RuleConfig(allowed_lag=100_000))
    assert [e["status"] for e in documents(replay_scenario(lagging, tolerant))] == ["OK"]


def test_the_report_weighs_statuses_and_lag_by_time():
    result = replay_scenario(1)  # lagging: OK, then WARN until the end

    report = group_report(result)

    assert report.ms_notfound + report.ms_ok + report.ms_warn + report.ms_err == report.observed_ms
    assert report.ms_warn > 0 and report.incidents == 1 and report.open_incident
    assert report.max_totallag >= report.p95_totallag > 0
    assert weighted_percentile([(1, 95), (1000, 5)], 0.95) == 1
    assert weighted_percentile([(1, 90), (1000, 10)], 0.95) == 1000


def test_backtest_counts_what_each_subscription_would_have_received():
    events = [
        {"status": "WARN", "previous_status": "OK", "incident_id": "i1", "evaluated_at": 0},
        {"status": "ERR", "previous_status": "WARN", "incident_id": "i1", "evaluated_at": 60_000},
        {"status": "OK", "previous_status": "ERR", "incident_id": "i1", "evaluated_at": 120_000},
    ]
    events = [from_document(StatusEvent, e, partial=True) for e in events]  # the fields the policy reads

    warn = count_notifications(Policy(threshold=Status.WARN), events, 200_000)
    err_only = count_notifications(Policy(threshold=Status.ERR, send_close=False), events, 200_000)
    repeating = count_notifications(Policy(threshold=Status.WARN, send_interval_ms=25_000), events, 200_000)

    assert (warn.opens, warn.updates, warn.closes, warn.notifications) == (1, 1, 1, 3)
    assert (err_only.opens, err_only.closes, err_only.notifications) == (1, 0, 1)
    assert repeating.repeats == 4  # 25 s and 50 s after the open, 25 s and 50 s after the update


def test_variants_file_errors_name_the_entry_and_option():
    config = load_config(None, env={})
    with pytest.raises(BacktestError, match=r"variants\[1\] \(b\): intervals must be >= 1"):
        variants_from_document({"variants": [{"name": "a"}, {"name": "b", "intervals": 0}]}, config, 10_000)
    with pytest.raises(BacktestError, match="unknown option colour"):
        variants_from_document({"variants": [{"name": "a", "colour": "red"}]}, config, 10_000)
    with pytest.raises(BacktestError, match="unique"):
        variants_from_document({"variants": [{"name": "a"}, {"name": "a"}]}, config, 10_000)


def replay_job(*variants: dict) -> ReplayJob:
    """The job's settings for `variants` (the first is production), the history ending where SHAPE's does."""
    chosen = variants_from_document({"variants": list(variants)}, load_config(None, env={}), 10_000)
    return ReplayJob(production=chosen[0].replay, variants=chosen, ends={"prod": SHAPE.end_ms})


def test_one_groups_rows_cover_every_output():
    job = replay_job({"name": "production"}, {"name": "tolerant", "allowed-lag": 100000})
    commits, samples = inputs_of(1)

    rows = list(group_rows("prod", "lagging", commits, samples, job))

    kinds = [r["row_type"] for r in rows]
    assert kinds.count("report") == 1 and kinds.count("backtest") == 2
    backtest = {r["variant"]: r for r in rows if r["row_type"] == "backtest"}
    assert backtest["production"]["opens"] == 1 and backtest["tolerant"]["opens"] == 0


def test_a_commit_archived_twice_counts_once_in_the_report():
    job = replay_job({"name": "production"})
    commits, samples = inputs_of(1)

    def report(commits: list[CommitInput]) -> dict:
        return next(r for r in group_rows("prod", "g", commits, samples, job) if r["row_type"] == "report")

    once, twice = report(commits), report(commits + commits[:5])

    assert once["commits"] == twice["commits"] == len(commits)
    assert twice["commits_stored"] == once["commits_stored"] <= len(commits)


def test_a_group_with_more_rows_than_a_batch_holds_is_cut_into_batches_of_the_bound():
    """A busy group replayed over months has a timeline row per tick: its rows go out in batches of at most
    `rows_per_batch`, not as one batch holding them all."""
    job = replay_job({"name": "production"})
    records = [r._replace(group="lagging") for r in group_records(SHAPE, 1, 0)]  # as the job joins samples to it
    rows = list(group_rows("prod", "lagging", *replay_inputs(records), job))
    assert len(rows) > 12

    batches = list(replay_batches(job, [pa.RecordBatch.from_pydict(as_columns(records))], rows_per_batch=5))

    assert max(batch.num_rows for batch in batches) <= 5
    out = [row for batch in batches for row in batch.to_pylist()]  # every column, each row type filling its own
    assert [{k: got[k] for k in want} for got, want in zip(out, rows, strict=True)] == rows


def test_charts_are_one_self_contained_page():
    result = replay_scenario(3)

    html = page([GroupChart("prod", "stopped-<3>", result.timeline, SHAPE.end_ms, "1 incident")])

    assert (
        html.count("<svg") == 1
        and "<script" not in html
        and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    )
    assert "stopped-&lt;3&gt;" in html and "ERR" in html


def _replay_offsets(offsets):
    """One partition committing `offsets` 10 s apart; the log end is at the first commit, then at 1200."""
    commits = [CommitInput("t", 0, off, T0 + i * 10_000, i, T0 + i * 10_000) for i, off in enumerate(offsets)]
    ends = [offsets[0]] + [1200] * (len(offsets) - 1)
    samples = [SampleInput("t", 0, end, T0 + i * 10_000 - 1) for i, end in enumerate(ends)]
    config = ReplayConfig(tick_ms=10_000)
    return replay_group("prod", "g", commits, samples, config, end_ms=T0 + (len(offsets) - 1) * 10_000)


def test_the_replay_judges_rewinds_by_the_first_drop_only_as_burrow_and_the_live_rules_do():
    # 900 is a rewind until 1100 passes 1000; the later drop to 1050 is not looked at (Burrow: OK)
    recovered = _replay_offsets([1000, 900, 1100, 1050])
    assert status_changes(recovered.events)[-1] == ("ERR", "OK")
    assert recovered.timeline[-1].status == "OK"
    not_recovered = _replay_offsets([1000, 900, 950, 800])
    assert not_recovered.timeline[-1].status == "ERR"
    assert {p["status"] for p in documents(not_recovered)[-1]["partitions"]} == {"REWIND"}


def test_inputs_after_the_last_tick_are_judged_at_the_end_of_the_history():
    """Ticks fall every 10 s of history time; a rewind committed 5 s after the last one within the history still
    shows in its last status (evaluated at its end), as the live evaluator would have shown it."""
    start = T0 - T0 % 10_000
    commits = [CommitInput("t", 0, 1000 + 100 * i, start + i * 10_000, i, start + i * 10_000 + 5) for i in range(10)]
    samples = [SampleInput("t", 0, 1000 + 100 * i, start + i * 10_000) for i in range(10)]
    commits.append(CommitInput("t", 0, 500, start + 95_000, 10, start + 95_000))  # after the tick at +90 s

    result = replay_group("prod", "g", commits, samples, ReplayConfig())

    assert result.timeline[-1].status == "ERR"
    assert result.timeline[-1].at == result.last_at == start + 95_000
    assert documents(result)[-1]["partitions"][0]["status"] == "REWIND"


def test_a_commit_of_an_expired_group_before_the_next_tick_starts_it_afresh_as_the_ingest_does():
    """The ingest starts a group silent for `expire-group` afresh at its next commit. A commit landing between the
    expiry and the next tick must not be judged against the expired window (a reset consumer seen as a REWIND)."""
    window = WindowConfig(expire_group_ms=60_000)
    commits = [CommitInput("t", 0, 1000 + 10 * i, T0 + i * 1000, i, T0 + i * 1000) for i in range(5)]
    samples = [SampleInput("t", 0, 1000 + 10 * i, T0 + i * 1000 - 1) for i in range(5)]
    expiry = T0 + 4000 + 60_000 + 1  # the first instant the group is expired
    commits.append(CommitInput("t", 0, 500, expiry, 10, expiry))  # back, its offsets reset to an earlier one

    result = replay_group("c", "g", commits, samples, ReplayConfig(window=window), end_ms=expiry + 30_000)

    # never REWIND (ERR): its one commit afresh is a young window, OK however far behind the log end
    assert [(row.status, row.totallag) for row in result.timeline] == [("OK", 0), ("OK", 540)]


def test_a_group_first_seen_after_the_last_tick_is_reported_over_no_time_not_a_negative_one():
    """A group whose inputs all come after the history's last tick is judged once, at the end of the history: its
    report covers no time (it must not cover minus the time to the tick after the end)."""
    start = T0 - T0 % 10_000
    commits = [CommitInput("t", 0, 100, start + 2000, 1, start + 2000)]
    samples = [SampleInput("t", 0, 100, start + 1000)]

    result = replay_group("prod", "new", commits, samples, ReplayConfig(), end_ms=start + 5000)

    assert [(row.at, row.status) for row in result.timeline] == [(start + 5000, "OK")]
    report = group_report(result)
    assert report.observed_ms == report.ms_notfound + report.ms_ok + report.ms_warn + report.ms_err == 0


def test_a_stop_due_after_the_last_tick_within_the_history_is_its_last_status():
    """The clock alone turns the group to STOP 1 ms after the tick at +90 s; the history ends at +95 s, before the
    next tick: its last status is the one at its end, as for inputs after the last tick."""
    start = T0 - T0 % 10_000
    commits = [
        CommitInput("t", 0, 100 * i, start - 90_000 + i * 10_000, i, start - 90_000 + i * 10_000) for i in range(10)
    ]
    samples = [SampleInput("t", 0, 5000 + 100 * i, start - 90_001 + i * 10_000) for i in range(19)]  # always behind

    result = replay_group("prod", "g", commits, samples, ReplayConfig(), end_ms=start + 95_000)

    assert (result.timeline[-1].at, result.timeline[-1].status) == (start + 95_000, "ERR")
    assert documents(result)[-1]["partitions"][0]["status"] == "STOP"  # now - last (95 s) > last - first (90 s)


def test_messages_retention_skips_while_the_lag_stands_still_show_in_the_timeline():
    """A stopped consumer of a quiet topic: status, total lag and worst partition never change, while retention
    deletes the unread messages. The timeline must say so (`skipped_messages`, `messages-skipped`)."""
    commits = [CommitInput("t", 0, 5000, T0 + i * 10_000, i, T0 + i * 10_000 + 20) for i in range(10)]
    samples = [SampleInput("t", 0, 8000, T0 + i * 10_000 - 1) for i in range(80)]  # no message produced
    # retention deletes 10 msg/s from the front; it passes the committed offset 5000 at 500 s
    samples += [SampleInput("t", 0, 10 * i * 30, T0 + i * 30_000 - 1, log_start=True) for i in range(27)]

    result = replay_group("prod", "g", commits, samples, ReplayConfig())

    judged = [row for row in result.timeline if row.at > T0 + 20_000]  # after its third commit
    assert {(row.status, row.totallag) for row in judged} == {("ERR", 3000)}
    skipped = [row for row in result.timeline if row.skipped_messages > 0]
    assert skipped and skipped[0].explanation == "messages-skipped"
    assert result.timeline[-1].skipped_messages == 10 * 26 * 30 - 5000  # the log start at 780 s, less the commit


def deletions_history(
    cluster: str = "prod", with_deletions: bool = True, groups: tuple[str, ...] = ("a", "b")
) -> list[HistoryRecord]:
    """Groups a and b read `orders` (caught up throughout), `old` and `stuck`, sampled every 10 s for 300 s.
    `old` is deleted from Kafka at 150 s and re-created: its new log and the groups' commits start again near 0.
    Both groups stop committing on `stuck` at 90 s while its log end moves on; at 120 s `stuck` is deleted from
    group a through the api."""
    records: list[HistoryRecord] = []
    for i in range(31):
        at = T0 + i * 10_000
        ends = {"orders": 100 * i, "stuck": 100 * i, "old": 100 * i if i < 15 else 10 * (i - 15)}
        for topic, end in ends.items():
            if topic != "old" or i != 15:  # the topic is gone at 150 s
                records.append(HistoryRecord(KIND_BROKER, cluster, None, topic, 0, end, None, None, at - 1))
        for group in groups:
            for topic, end in ends.items():
                if (topic == "stuck" and i >= 10) or (topic == "old" and i == 15):
                    continue
                records.append(HistoryRecord(KIND_COMMIT, cluster, group, topic, 0, end, at, 2 * i, at + 5))
    if with_deletions:
        records.append(topic_deleted_record(cluster, "old", T0 + 150_000))
        records.append(topic_deleted_record(cluster, "stuck", T0 + 120_000, group="a"))
    return records


def group_inputs(records: list[HistoryRecord], group: str):
    """A group's replay inputs as the Spark job joins them: its commits, the samples and Kafka's deletions of the
    topics it commits to, and the deletions made in it alone."""
    topics = {r.topic for r in records if r.kind == KIND_COMMIT and r.group == group}
    mine = [r for r in records if r.group == group or (r.group is None and r.topic in topics)]
    return replay_inputs(mine)


def test_a_topic_deleted_and_re_created_starts_afresh_and_one_deleted_from_a_group_leaves_its_status():
    ended = {}
    for with_deletions in (True, False):
        records = deletions_history(with_deletions=with_deletions)
        for group in ("a", "b"):
            commits, others = group_inputs(records, group)
            result = replay_group("prod", group, commits, others, ReplayConfig(), end_ms=T0 + 300_000)
            last = documents(result)[-1]
            ended[with_deletions, group] = (last["status"], {p["topic"]: p["status"] for p in last["partitions"]})
    # the re-created `old` is a new log, not a rewind; `stuck` left group a, which reads OK; b still has it
    assert ended[True, "a"] == ("OK", {})
    assert ended[True, "b"] == ("ERR", {"stuck": "STOP"})
    # without the deletions in the history, the replay said what lagwatch never did live
    for group in ("a", "b"):
        status, partitions = ended[False, group]
        assert status == "ERR" and partitions["old"] == "REWIND"


def test_windows_deleted_on_tombstones_leave_the_replay_as_they_left_the_live_windows():
    """A group stops committing on partition 1 (a STOP ahead) and its offset there is deleted, or the whole group
    is deleted (`offset-deleted` records at the tombstone's order, one per partition for a group)."""
    commits = [
        CommitInput("t", p, 100 * i, T0 + i * 10_000, 2 * i + p, T0 + i * 10_000) for i in range(10) for p in (0, 1)
    ]
    commits += [CommitInput("t", 0, 100 * i, T0 + i * 10_000, 2 * i, T0 + i * 10_000) for i in range(10, 30)]
    samples = [SampleInput("t", p, 100 * i, T0 + i * 10_000 - 1) for i in range(30) for p in (0, 1)]
    offset_deleted = [OffsetDeleted("t", 1, 21, T0 + 100_000)]
    group_deleted = [OffsetDeleted("t", p, 59, T0 + 300_000) for p in (0, 1)]  # after its last commit (order 58)

    def changes(deletions):
        result = replay_group("c", "g", commits, samples + deletions, ReplayConfig(), end_ms=T0 + 400_000)
        return status_changes(result.events)

    assert changes([]) == [("NOTFOUND", "OK"), ("OK", "ERR")]  # partition 1 stopped
    assert changes(offset_deleted) == [("NOTFOUND", "OK")]
    assert changes(offset_deleted + group_deleted) == [("NOTFOUND", "OK"), ("OK", "NOTFOUND")]


CAUGHT_UP_AT, MARKER_END = 62, 63  # a read_committed consumer's last record + 1, and the log end past its marker


def transactional_history(*answers: ProbedLog) -> list[HistoryRecord]:
    """A consumer caught up on a transactional topic: it commits its last record + 1 every 10 s, below the log end by
    the last transaction's marker (the offsets alone: a full window that never moves, with lag: STALL), and the log
    probe's `answers` for its partition (archived as `probe` records, as the ingest publishes them)."""
    steps = range(6)
    records = [
        HistoryRecord(KIND_BROKER, "prod", None, "eos", 0, MARKER_END, None, None, T0 + i * 10_000) for i in steps
    ]
    records += [
        commit_record("prod", Commit("g", "eos", 0, CAUGHT_UP_AT, T0 + i * 10_000 + 5, i, T0 + i * 10_000 + 5))
        for i in steps
    ]
    return records + [probe_record("prod", "eos", 0, answer) for answer in answers]


CAUGHT_UP_ANSWER = ProbedLog(CAUGHT_UP_AT, MARKER_END, None, None, T0 + 15_000)


@pytest.mark.parametrize(
    ("answers", "status", "lag"),
    [
        ((), "ERR", 1),
        ((CAUGHT_UP_ANSWER,), "OK", 0),
        # records left to read at the offset: the lag stands, as live
        ((CAUGHT_UP_ANSWER._replace(unread_from=CAUGHT_UP_AT, unread_ms=T0),), "ERR", 1),
        # an answer for another offset or log end says nothing of this one (`ProbedLog.caught_up_at`)
        ((CAUGHT_UP_ANSWER._replace(committed=CAUGHT_UP_AT - 1),), "ERR", 1),
        ((CAUGHT_UP_ANSWER._replace(log_end=MARKER_END - 1),), "ERR", 1),
        # another group's answer at its own offset, later, with records unread: kept apart (live: `lp` and `lu`)
        ((CAUGHT_UP_ANSWER, ProbedLog(50, MARKER_END, 50, T0, T0 + 25_000)), "OK", 0),
        # the latest caught-up answer is the partition's: one at another log end after it
        ((CAUGHT_UP_ANSWER, CAUGHT_UP_ANSWER._replace(log_end=MARKER_END - 1, probed_at=T0 + 25_000)), "ERR", 1),
    ],
    ids=[
        "offsets alone",
        "caught up",
        "records unread",
        "another offset",
        "another log end",
        "another group's unread answer",
        "latest caught-up answer",
    ],
)
def test_a_caught_up_transactional_consumer_replays_ok_where_the_probe_found_only_markers(answers, status, lag):
    """The replay judges the partition's lag as the live readers do (`StoredPartition.current_lag`): 0 where the
    probe's latest caught-up answer found nothing readable between the newest commit and the log end; through the
    Spark job's Arrow batches too."""
    records = transactional_history(*answers)
    end = T0 + 60_000

    result = replay_group("prod", "g", *replay_inputs(records), ReplayConfig(), end_ms=end)

    assert (result.timeline[-1].status, result.timeline[-1].totallag) == (status, lag)
    job = ReplayJob(production=ReplayConfig(), variants=(), ends={"prod": end})
    batches = replay_batches(job, [pa.RecordBatch.from_pydict(as_columns(r._replace(group="g") for r in records))])
    reports = [row for batch in batches for row in batch.to_pylist() if row["row_type"] == "report"]
    assert [row["status"] for row in reports] == [status]


@pytest.mark.parametrize("probed", [True, False], ids=["first unread record read", "offsets alone"])
def test_a_consumer_behind_records_older_than_the_history_replays_their_age_where_the_probe_read_them(probed):
    """As live (`time_lag.probed_time_lag`): a consumer stopped at offset 10 of a log whose samples start with it
    far past it has a lag in seconds the history can only bound; the probe's first unread record (five hours old) makes
    it exact."""
    record_ms = T0 - 5 * 3_600_000
    records = [HistoryRecord(KIND_BROKER, "prod", None, "old", 0, 2_000, None, None, T0 + i * 10_000) for i in range(6)]
    records.append(commit_record("prod", Commit("g", "old", 0, 10, T0 - 7_200_000, 0, T0 + 5)))
    answer = ProbedLog(10, 2_000, 10, record_ms, T0 + 5)  # read as the commit was: the first row has it
    records += [probe_record("prod", "old", 0, answer)] if probed else []
    end = T0 + 60_000

    last = replay_group("prod", "g", *replay_inputs(records), ReplayConfig(), end_ms=end).timeline[-1]

    if probed:
        assert not last.max_lag_seconds_lower_bound and abs(last.max_lag_seconds - (last.at - record_ms) / 1000) < 1
    else:
        assert last.max_lag_seconds_lower_bound and last.max_lag_seconds < 120
