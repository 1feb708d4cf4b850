"""The Spark reprocessing job on `local[2]`: generated histories in the archiver's Parquet layout (and JSON lines) go
in; timeline, events, report, backtest, charts and a summary come out, equal to the plain-Python replay."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lagwatch.shared.events.status_event import schema
from lagwatch.shared.records.history import (
    KIND_BROKER,
    KIND_COMMIT,
    PROBE_COLUMNS,
    HistoryMessages,
    HistoryRecord,
    as_columns,
    offset_deleted_record,
    probe_record,
)
from lagwatch.shared.records.history_files import HistoryFileWriter
from lagwatch.shared.runtime.config import load_config
from lagwatch.spark import reprocess
from lagwatch.spark.inputs import history_of_messages
from lagwatch.spark.reprocess import JobError, ReprocessOptions, run, spark_session
from lagwatch.spark.synthetic_history import FINAL_STATUS, HistoryShape, group_name, history_records, scenario_of
from tests.spark.test_spark_replay import CAUGHT_UP_ANSWER, deletions_history, transactional_history
from tests.spark.test_spark_replay import T0 as REPLAY_T0

SHAPE = HistoryShape(groups=12, partitions=2, commits_per_partition=20)
pytestmark = pytest.mark.timeout(300)
MIN10, DAY2 = 600_000, 2 * 86_400_000


def documents(result):
    """The replay's events as the JSON objects they are published as."""
    return [e.as_dict() for e in result.events]


@pytest.fixture(scope="module")
def spark():
    session = spark_session(ReprocessOptions(input="", output="", master="local[2]", shuffle_partitions=4))
    yield session
    session.stop()


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("history")
    writer = HistoryFileWriter(str(root), flush_rows=500)  # several files per day, as the archiver writes them
    for record in history_records(SHAPE):
        if writer.add([record]):
            writer.flush()
    writer.flush()
    return root


def job(spark, input_path, output, **options) -> dict:
    return run(
        ReprocessOptions(input=str(input_path), output=str(output), **options), load_config(None, env={}), spark=spark
    )


@pytest.fixture(scope="module")
def replayed(spark, history, tmp_path_factory) -> tuple[dict, Path]:
    output = tmp_path_factory.mktemp("replay")
    variants = output / "variants.yaml"
    variants.write_text(
        "variants:\n"
        "  - {name: production}\n"
        "  - {name: tolerant, allowed-lag: 100000}\n"
        "  - {name: errors-only, threshold: ERR, send-close: false}\n"
    )
    return job(spark, history, output / "out", variants_file=str(variants)), output / "out"


def test_every_group_ends_in_its_scenarios_status(replayed):
    summary, out = replayed
    report = pd.read_parquet(out / "report")

    assert summary["groups"] == SHAPE.groups == len(report)
    for row in report.itertuples():
        assert row.status == FINAL_STATUS[row.group.split("-")[0]], row.group
    assert (report["commits_stored"] <= report["commits"]).all()


def test_the_events_are_the_live_schema_marked_replayed_and_match_the_plain_python_replay(replayed):
    from lagwatch.spark.replay import ReplayConfig, replay_group, replay_inputs
    from lagwatch.spark.synthetic_history import group_records

    _, out = replayed
    validator = jsonschema.Draft202012Validator(schema())
    lines = [
        json.loads(line) for f in sorted((out / "events_jsonl").glob("part-*")) for line in f.read_text().splitlines()
    ]
    for event in lines:
        validator.validate(event)
        assert event["replayed"] is True

    per_group: dict[str, list[tuple[str, str]]] = {}
    for event in lines:
        per_group.setdefault(event["group"], []).append((event["seq"], event["previous_status"], event["status"]))
    for index in range(SHAPE.groups):
        records = list(group_records(SHAPE, index, index * SHAPE.partitions * SHAPE.commits_per_partition))
        commits, samples = replay_inputs(records)
        expected = replay_group("prod", records[-1].group, commits, samples, ReplayConfig(), end_ms=SHAPE.end_ms)
        name = records[-1].group
        assert sorted(per_group[name]) == [(e["seq"], e["previous_status"], e["status"]) for e in documents(expected)]


def test_the_timeline_has_a_row_per_change(replayed):
    _, out = replayed
    timeline = pd.read_parquet(out / "timeline").sort_values(["group", "at"])

    stopped = timeline[timeline["group"].str.startswith("stopped")]
    assert list(stopped.groupby("group")["status"].last().unique()) == ["ERR"]
    assert (timeline.groupby("group")["at"].is_monotonic_increasing).all()
    assert timeline["max_lag_seconds"].notna().any()
    # retention risk from the history's log-start samples: the lagging groups' unread messages near deletion
    last = timeline.groupby("group").last()
    lagging, healthy = last[last.index.str.startswith("lagging")], last[last.index.str.startswith("healthy")]
    assert lagging["retention_risk_seconds"].notna().all() and (lagging["retention_risk_seconds"] > 0).all()
    assert healthy["retention_risk_seconds"].isna().all()  # nothing unconsumed, nothing at risk
    assert (last["skipped_messages"] == 0).all()


def test_the_backtest_compares_variants_side_by_side(replayed):
    summary, out = replayed
    totals = {row["variant"]: row for row in json.loads((out / "backtest.json").read_text())}

    assert list(totals) == ["production", "tolerant", "errors-only"]
    bad_groups = sum(1 for i in range(SHAPE.groups) if FINAL_STATUS[scenario_of(i)] != "OK")
    assert totals["production"]["groups_alerted"] == bad_groups
    assert totals["tolerant"]["opens"] < totals["production"]["opens"]  # allowed lag hides the WARNs
    assert totals["errors-only"]["closes"] == 0
    assert totals["errors-only"]["opens"] < totals["production"]["opens"]
    assert (out / "backtest.csv").read_text().splitlines()[0].startswith("variant,")
    assert summary["backtest"] == list(totals.values())


def test_charts_and_summary_are_written(replayed):
    summary, out = replayed
    page = (out / "charts" / "index.html").read_text()

    assert page.count("<svg") == summary["groups_charted"] == SHAPE.groups
    written = json.loads((out / "summary.json").read_text())
    assert written["rows_bad"] == {} and written["events"] == summary["events"] > 0
    assert list((out / "report_csv").glob("*.csv"))
    # each chart's line says the time in each status in days, hours, minutes or seconds
    spent = re.findall(r"incident\(s\); OK ([0-9dhms ]+), WARN ([0-9dhms ]+), ERR ([0-9dhms ]+);", page)
    assert len(spent) == SHAPE.groups and any(ok != "0s" for ok, _, _ in spent), spent


def test_a_charts_line_says_short_and_long_stretches_in_their_own_units():
    """A replay of an hour read "OK 0.0 h, WARN 0.0 h, ERR 0.0 h": tenths of hours say nothing of minutes."""
    report = {"incidents": 2, "ms_ok": 38_000, "ms_warn": None, "ms_err": 190_000_000}
    line = reprocess.chart_summary({**report, "max_totallag": 250, "p95_totallag": 1_235})
    assert line == "2 incident(s); OK 38s, WARN 0s, ERR 2d 4h 46m; max total lag 250, p95 1,235"


def test_a_chart_draws_at_most_its_steps_keeping_each_steps_worst_status(spark, history, tmp_path, monkeypatch):
    """A busy group replayed over months has a timeline row per tick: its chart (and what the driver collects for
    it) is cut to a bounded number of steps, each with its worst status, so an incident stays visible."""
    monkeypatch.setattr(reprocess, "CHART_STEPS", 3)
    stopped = next(i for i in range(SHAPE.groups) if scenario_of(i) == "stopped")

    job(spark, history, tmp_path / "out", charts=SHAPE.groups)

    page = (tmp_path / "out" / "charts" / "index.html").read_text()
    charts = dict(re.findall(r"<h2>prod / ([^<]+)</h2>.*?(<svg.*?</svg>)", page, flags=re.S))
    assert len(charts) == SHAPE.groups
    assert max(svg.count("<rect") for svg in charts.values()) <= 3
    assert "<title>ERR from" in charts[group_name(stopped)]


def test_bad_rows_are_counted_by_reason_and_skipped(spark, history, tmp_path):
    good = HistoryRecord(KIND_COMMIT, "prod", "x", "t", 0, 5, 1, 1, 1)
    bad_rows = [
        good._replace(group=None),  # a commit of no group
        good._replace(offset=-1),
        good._replace(kind="gossip"),
        good._replace(partition=None),
        good._replace(order=None),
    ]
    extra = tmp_path / "history"
    for f in history.rglob("*.parquet"):  # the same history plus one file of bad rows
        target = extra / f.relative_to(history)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(f.read_bytes())
    day = next(extra.glob("cluster=prod/date=*"))
    columns = {name: [getattr(r, name) for r in bad_rows] for name in HistoryRecord._fields if name != "cluster"}
    pq.write_table(pa.Table.from_pydict(columns), day / "part-bad.parquet")

    summary = job(spark, extra, tmp_path / "out", charts=0)

    assert summary["rows_bad"] == {
        "no group": 1,
        "bad offset": 1,
        "unknown kind": 1,
        "bad partition": 1,
        "bad order": 1,
    }
    assert summary["groups"] == SHAPE.groups


def _copy(history: Path, to: Path) -> Path:
    """A copy of the history's files (tests add files to it)."""
    for f in history.rglob("*.parquet"):
        target = to / f.relative_to(history)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(f.read_bytes())
    return next(to.glob("cluster=prod/date=*"))


def test_values_past_what_the_replay_holds_are_bad_rows_not_a_failed_job(spark, history, tmp_path):
    """Another writer's int64 partition past int32 (a cast would fail the whole job in Spark's ANSI mode), an
    observed_at past any date."""
    day = _copy(history, tmp_path / "history")
    rows = {"kind": ["commit"] * 2, "group": ["x"] * 2, "topic": ["t"] * 2, "partition": [2**40, 0], "offset": [5] * 2}
    rows |= {"commit_timestamp": [1] * 2, "order": [1] * 2, "observed_at": [1, 2**62]}
    pq.write_table(pa.Table.from_pydict(rows), day / "part-other-writer.parquet")

    summary = job(spark, tmp_path / "history", tmp_path / "out", charts=0)

    assert summary["rows_bad"] == {"bad partition": 1, "bad observed_at": 1}
    assert summary["groups"] == SHAPE.groups


def test_rows_of_older_files_lacking_a_column_are_bad_rows_whichever_file_spark_reads_the_schema_of(
    spark, history, tmp_path
):
    day = _copy(history, tmp_path / "history")
    old = HistoryRecord(KIND_COMMIT, "prod", "x", "t", 0, 5, 1, 1, 1)
    older = ("cluster", "order", *PROBE_COLUMNS)  # (a file without `order` is from before the probe kind too)
    columns = {name: [getattr(old, name)] for name in HistoryRecord._fields if name not in older}
    columns["partition"] = pa.array(columns["partition"], pa.int32())  # as the archiver writes it
    pq.write_table(pa.Table.from_pydict(columns), day / "part-0-older.parquet")  # listed first

    summary = job(spark, tmp_path / "history", tmp_path / "out", charts=0)

    assert summary["rows_bad"] == {"bad order": 1}
    assert summary["groups"] == SHAPE.groups


def test_the_group_filter_is_each_clusters_own_matched_as_the_ingest_matches_it(spark, history, tmp_path):
    """A cluster's own allow/deny lists override storage's (the ingest of `prod` archives every group the storage
    allowlist would reject), and the regexes are Python's, as the ingest's: `(?P<name>...)` is not Java's."""
    env = {
        "LAGWATCH__CLUSTERS__prod__BOOTSTRAP_SERVERS": "localhost:9092",
        "LAGWATCH__STORAGE__GROUP_ALLOWLIST": "^no-such-group",
        "LAGWATCH__CLUSTERS__prod__GROUP_ALLOWLIST": ".",
        "LAGWATCH__CLUSTERS__prod__GROUP_DENYLIST": "^(?P<scenario>stalled)-",
    }
    options = ReprocessOptions(input=str(history), output=str(tmp_path / "out"), charts=0)

    summary = run(options, load_config(None, env=env), spark=spark)

    stalled = [i for i in range(SHAPE.groups) if scenario_of(i) == "stalled"]
    assert summary["groups"] == SHAPE.groups - len(stalled)
    assert summary["commits_filtered_by_group_filter"] == len(stalled) * SHAPE.partitions * SHAPE.commits_per_partition
    report = pd.read_parquet(tmp_path / "out" / "report")
    assert not report["group"].str.startswith("stalled").any()


def test_a_cluster_or_a_day_of_the_archive_reads_as_the_whole_does(spark, history, tmp_path):
    day = max(history.glob("cluster=prod/date=*"))  # the day of the commits (the one before has samples only)

    for location, groups in ((history / "cluster=prod", SHAPE.groups), (day, SHAPE.groups)):
        summary = job(spark, location, tmp_path / "out", charts=0)
        assert (summary["rows_bad"], summary["groups"]) == ({}, groups)


def test_the_log_probes_answers_reach_the_groups_of_their_topic_and_files_from_before_them_read_as_ever(
    spark, tmp_path
):
    """A caught-up consumer of a transactional topic (tests/spark/test_spark_replay.py): OK with the probe's answer
    (a `probe` record of its topic, given to the groups committed there as samples are), ERR (STALL) by offsets
    alone, here from a file written before the probe kind (no probe columns). A probe without its log end is bad."""
    writer = HistoryFileWriter(str(tmp_path / "history"))
    writer.add(transactional_history(CAUGHT_UP_ANSWER))  # group g on topic eos
    writer.add([probe_record("prod", "eos", 1, CAUGHT_UP_ANSWER)._replace(log_end=None)])
    day = Path(writer.flush()[0]).parent
    older = [r._replace(topic="plain", group=r.group and "offsets-alone") for r in transactional_history()]
    columns = {name: values for name, values in as_columns(older).items() if name not in (*PROBE_COLUMNS, "cluster")}
    pq.write_table(pa.Table.from_pydict(columns), day / "part-0-before-probes.parquet")

    summary = job(spark, tmp_path / "history", tmp_path / "out", charts=0)

    assert summary["rows_bad"] == {"bad log_end": 1}
    report = pd.read_parquet(tmp_path / "out" / "report").set_index("group")
    assert dict(report["status"]) == {"g": "OK", "offsets-alone": "ERR"}


@pytest.fixture(scope="module")
def edges(spark, tmp_path_factory) -> tuple[dict, Path, int]:
    """One job over small histories of the edges: cluster `prod` has groups a and b of `deletions_history` (see
    tests/spark/test_spark_replay.py) and c, b's twin whose offset of `stuck` was deleted; cluster `ahead` has a
    group d, caught up a minute ago, and two rows from a host whose clock ran ahead: ten minutes and two days."""
    root = tmp_path_factory.mktemp("edges")
    now = int(time.time() * 1000)
    writer = HistoryFileWriter(str(root))  # files of their own days, as the archiver files them
    writer.add(deletions_history(groups=("a", "b", "c")))
    writer.add([offset_deleted_record("prod", "c", "stuck", 0, 25, REPLAY_T0 + 120_000)])
    writer.add([HistoryRecord(KIND_COMMIT, "ahead", "d", "t", 0, 5, now - 60_000, 1, now - 60_000)])
    samples = (-61_000, MIN10, DAY2)  # a minute ago, then the two from the future
    writer.add(HistoryRecord(KIND_BROKER, "ahead", None, "t", 0, 5, None, None, now + t) for t in samples)
    writer.flush()
    out = tmp_path_factory.mktemp("edges-out") / "out"
    return job(spark, root, out, charts=0), out, now


def test_deletions_reach_their_groups_as_in_the_plain_python_replay(edges):
    """Kafka's deletion of a topic (no group) goes to every group committing to it; the api's deletion of a topic
    from one group, and a window deleted on a tombstone, to that group only."""
    summary, out, _ = edges
    report = pd.read_parquet(out / "report").set_index("group")
    assert summary["groups"] == 4
    assert dict(report["status"]) == {"a": "OK", "b": "ERR", "c": "OK", "d": "OK"}
    events = pd.read_parquet(out / "events").sort_values(["group", "seq"])
    assert list(events[events["group"] == "b"]["status"]) == ["OK", "ERR"]  # STOP on `stuck`, no REWIND of `old`
    assert list(events[events["group"] == "c"]["status"]) == ["OK"]


def test_a_row_from_a_host_whose_clock_ran_ahead_is_a_bad_row_not_the_end_of_every_groups_history(edges):
    """The end of a cluster's history is its latest row: one observed two days from now would have every group
    evaluated, expired and weighed in the report until then. A host a few minutes ahead is within the tolerance."""
    summary, out, now = edges
    assert summary["rows_bad"] == {"observed_at in the future": 1}
    timeline = pd.read_parquet(out / "timeline")
    assert timeline[timeline["cluster"] == "ahead"]["at"].max() <= now + MIN10 + 10_000  # not two days on


def test_how_far_ahead_a_row_may_be_is_an_option(spark, tmp_path):
    """`--future-tolerance`: a job run where the clock is behind the history's (on a copy of it, say) keeps rows an
    hour ahead; a negative tolerance stops the job before Spark runs."""
    from lagwatch.spark.inputs import bad_row_reason

    now = 1_767_225_600_000
    rows = spark.createDataFrame(
        [("commit", "c", "g", "t", 0, 5, now, 1, now + 2 * 86_400_000, None, None, None)],
        "kind string, cluster string, group string, topic string, partition int, offset long, "
        "commit_timestamp long, order long, observed_at long, log_end long, unread_from long, unread_ms long",
    )
    reasons = [bad_row_reason(now), bad_row_reason(now, 3 * 86_400_000)]
    assert [rows.select(r.alias("why")).first()["why"] for r in reasons] == ["observed_at in the future", None]
    with pytest.raises(JobError, match="--future-tolerance"):
        reprocess.check_options(ReprocessOptions("in", str(tmp_path / "out"), future_tolerance_seconds=-1.0))
    assert "--future-tolerance" in _help()


def _help() -> str:
    parser = argparse.ArgumentParser()
    reprocess.add_arguments(parser)
    return parser.format_help()


def test_json_lines_history_reads_the_same(spark, tmp_path):
    shape = HistoryShape(groups=6, partitions=1, commits_per_partition=20)
    path = tmp_path / "history.jsonl"
    path.write_text("".join(r.encode().decode() + "\n" for r in history_records(shape)) + "not json\n")

    summary = job(spark, path, tmp_path / "out", charts=0)

    assert summary["groups"] == 6
    assert summary["rows_bad"] == {"unknown kind": 1}  # the line that is not JSON has no fields at all
    report = pd.read_parquet(tmp_path / "out" / "report")
    assert dict(zip(report["group"].str.split("-").str[0], report["status"], strict=True)) == FINAL_STATUS


def test_history_topic_messages_of_several_records_give_a_row_per_record(spark):
    """What the Kafka source (`kafka://...`) reads: messages as the ingest sends them, a group's consecutive records
    one per line (the connector itself is not installed here; its rows are key, value, ...)."""
    records = list(history_records(HistoryShape(groups=3, partitions=2, commits_per_partition=4)))
    messages = HistoryMessages()
    for record in records:
        messages.add(record.key(), record.encode())
    messages.close()
    assert len(messages.messages) < len(records)  # some messages hold several records
    raw = spark.createDataFrame([(key, value) for key, value in messages.messages], "key binary, value binary")

    rows = history_of_messages(raw).collect()

    assert [HistoryRecord(*row) for row in rows] == records


def test_a_history_record_of_an_unknown_format_version_is_a_bad_row_by_that_reason(spark):
    """A record whose "v" this job does not know is not replayed as if its fields meant what they used to."""
    from lagwatch.spark.inputs import bad_row_reason

    record = next(iter(history_records(HistoryShape(groups=1, partitions=1, commits_per_partition=1))))
    current = record.encode()
    future = current.replace(b'"v":1,', b'"v":2,', 1)
    unversioned = current.replace(b'"v":1,', b"", 1)
    assert future != current != unversioned
    value = b"\n".join([current, future, unversioned, current.replace(b'"v":1,', b'"v":"x",', 1)])
    raw = spark.createDataFrame([(b"k", value)], "key binary, value binary")

    rows = history_of_messages(raw).withColumn("bad", bad_row_reason(record.observed_at)).collect()

    assert [row["bad"] for row in rows] == [None, "unknown format version", None, "unknown format version"]


def test_missing_input_and_missing_columns_are_clear_errors(spark, tmp_path):
    with pytest.raises(JobError, match="does not exist"):
        job(spark, tmp_path / "nowhere", tmp_path / "out")

    pq.write_table(pa.Table.from_pydict({"kind": ["commit"], "topic": ["t"]}), tmp_path / "thin.parquet")
    with pytest.raises(JobError, match=r"lacks column\(s\) cluster, group, partition"):
        job(spark, tmp_path / "thin.parquet", tmp_path / "out")


def test_an_empty_input_an_input_not_parquet_and_an_output_under_a_file_are_clear_errors(spark, history, tmp_path):
    (tmp_path / "empty" / "_lagwatch_probe").mkdir(parents=True)  # an archiver's root before its first file
    with pytest.raises(JobError, match="holds no history files"):
        job(spark, tmp_path / "empty", tmp_path / "out")

    (tmp_path / "notes.txt").write_text("not parquet\n")
    with pytest.raises(JobError, match=r"cannot read parquet history at .*notes.txt: \[FAILED_READ_FILE"):
        job(spark, tmp_path / "notes.txt", tmp_path / "out")

    with pytest.raises(JobError, match=r"output .* cannot be a directory: .*notes.txt is a file"):
        job(spark, history, tmp_path / "notes.txt" / "out")

    # its summary, backtest and charts went to a local path named after the URI (`./file:/...`)
    with pytest.raises(JobError, match="--output must be a local directory, not file:///"):
        job(spark, history, f"file://{tmp_path / 'out'}")


@pytest.mark.parametrize(
    ("option", "problem"),
    [
        ({"tick_seconds": 0.0001}, "--tick must be at least 0.001 seconds"),  # a tick of 0 ms: every task failed
        ({"tick_seconds": float("nan")}, "--tick must be at least 0.001 seconds"),
        ({"shuffle_partitions": -1}, "--partitions must be >= 1"),  # Spark's session refused it with a traceback
    ],
)
def test_options_spark_fails_on_are_refused_before_it_runs(spark, history, tmp_path, option, problem):
    with pytest.raises(JobError, match=problem):
        job(spark, history, tmp_path / "out", charts=0, **option)


def test_the_command_line_fails_fast_with_one_line(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lagwatch.cli",
            "spark",
            "reprocess",
            "--input",
            str(tmp_path / "none"),
            "--output",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2
    assert (
        done.stderr.strip().splitlines()[-1]
        == f"lagwatch spark reprocess: input path {tmp_path / 'none'} does not exist"
    )


def test_replayed_events_can_be_published_to_a_topic(spark, history, kafka, tmp_path):
    from confluent_kafka import Consumer

    kafka.create_topic("lagwatch.status.replayed", 2)
    config = load_config(None, env={"KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap})
    options = ReprocessOptions(
        input=str(history), output=str(tmp_path / "out"), charts=0, publish_topic="lagwatch.status.replayed"
    )

    summary = run(options, config, spark=spark)

    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "reader", "auto.offset.reset": "earliest"})
    consumer.subscribe(["lagwatch.status.replayed"])
    received = []
    try:
        while len(received) < summary["events"]:
            message = consumer.poll(10)
            assert message is not None, f"only {len(received)} of {summary['events']} events arrived"
            received.append(message)
    finally:
        consumer.close()
    events = [json.loads(m.value()) for m in received]
    assert summary["events_published"] == summary["events"] == len(events)
    for message, event in zip(received, events, strict=True):
        assert event["replayed"] and message.key() == f"{event['cluster']}/{event['group']}".encode()
