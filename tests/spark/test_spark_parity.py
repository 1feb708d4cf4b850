"""Parity: one commit history fed through the live services and through the Spark job gives the same status changes.

The live run is the status end-to-end scenarios (ingest + evaluator on the Kafka mock and Redis) with the history
switched on; the archiver then writes the history topic to Parquet, and the Spark job replays those files with
the same rules; the `deleted` scenario's group tombstone reaches the replay as `offset-deleted` records.
"""

from __future__ import annotations

import asyncio

import pandas as pd
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from redis.asyncio import Redis

from lagwatch.services.archiver.service import Archiver
from lagwatch.shared.records.history import HistoryRecord, decode, records_of
from lagwatch.shared.windows.store import WindowStore
from lagwatch.spark.replay import ReplayConfig, replay_group, replay_inputs, status_changes
from tests.kafka_helpers import CLUSTER, eventually, make_config, produce, running
from tests.services.evaluator.test_evaluator import STATUS_TOPIC
from tests.system.test_status_end_to_end import (
    EXPECTED,
    PLAYS,
    Scenario,
    ingest_and_evaluator,
)

pytestmark = pytest.mark.timeout(300)
HISTORY_TOPIC = "lagwatch.history"


async def test_the_replay_of_the_archived_history_gives_the_live_status_changes(kafka, redis_server, tmp_path):
    for topic, partitions in ((STATUS_TOPIC, 3), ("lagwatch.changes", 4), (HISTORY_TOPIC, 3)):
        kafka.create_topic(topic, partitions)
    config = make_config(
        kafka.bootstrap,
        redis_server.url,
        STORAGE__INTERVALS="3",
        EVALUATOR__SWEEP_INTERVAL="0.5",
        HISTORY__ENABLED="true",
        HISTORY__PATH=str(tmp_path / "history"),
        HISTORY__FLUSH_INTERVAL="0.5",
        HISTORY__HTTP_PORT="0",
    )

    # 1. live: the scenarios through the ingest and the evaluator, status changes read from the status topic
    async with ingest_and_evaluator(kafka, config) as (writer, topic):
        store = WindowStore(Redis.from_url(redis_server.url), config.window())
        scenarios = {name: Scenario(kafka, writer, store, name) for name in PLAYS}
        await asyncio.gather(*(play(scenarios[name]) for name, play in PLAYS.items()))
        for name in PLAYS:
            await topic.until(f"g-{name}", len(EXPECTED[name]))
        await asyncio.sleep(3)  # quiet time in the history too: the idle group must stay OK in both
        await topic.read()
        live = {name: topic.transitions(f"g-{name}") for name in PLAYS}
    assert live == {name: EXPECTED[name] for name in PLAYS}

    # 2. the archiver writes the whole history topic to Parquet
    total = await _records_in(kafka.bootstrap, HISTORY_TOPIC)
    archiver = Archiver(config, CLUSTER, http_port=0)
    async with running(archiver):
        await eventually(lambda: _archived(archiver, total), timeout=30)
    files = list((tmp_path / "history").rglob("*.parquet"))
    assert files and all("cluster=local" in str(f) for f in files)
    kinds = set(pd.read_parquet(tmp_path / "history")["kind"])
    # log starts: the replay's retention risk; probes: the log probe's answers for the lagging groups
    assert kinds == {"commit", "broker", "log-start", "offset-deleted", "probe"}

    # 3. the Spark job replays the files with the same rules, ticking as often as the ingest polled
    from lagwatch.spark.reprocess import ReprocessOptions, run

    options = ReprocessOptions(
        input=str(tmp_path / "history"), output=str(tmp_path / "replay"), master="local[2]", tick_seconds=0.1, charts=0
    )
    summary = await asyncio.to_thread(run, options, config)
    events = pd.read_parquet(tmp_path / "replay" / "events").sort_values(["group", "seq"])
    replayed = {
        name: list(zip(rows["previous_status"], rows["status"], strict=True))
        for name, rows in ((n, events[events["group"] == f"g-{n}"]) for n in PLAYS)
    }

    assert replayed == live
    assert summary["rows_bad"] == {}


async def test_a_commit_of_a_topic_newer_than_the_ingests_metadata_replays_as_the_live_status(
    kafka, redis_server, tmp_path
):
    """The ingest holds such a commit and looks its partition's log end up: that poll's sample is archived after
    the commit. The replay must store the commit as the ingest did, not drop it for want of a log end."""
    for topic, partitions in ((STATUS_TOPIC, 3), ("lagwatch.changes", 4), (HISTORY_TOPIC, 1)):
        kafka.create_topic(topic, partitions)
    config = make_config(
        kafka.bootstrap,
        redis_server.url,
        EVALUATOR__SWEEP_INTERVAL="0.5",
        HISTORY__ENABLED="true",
        **{f"CLUSTERS__{CLUSTER}__TOPIC_REFRESH": "3600", f"CLUSTERS__{CLUSTER}__OFFSET_REFRESH": "3600"},
    )
    async with ingest_and_evaluator(kafka, config) as (writer, topic):
        kafka.create_topic("fresh", 1)  # after the ingest's only metadata refresh for the next hour
        await produce(kafka.bootstrap, "fresh", {0: 7})
        await writer.commit("g-fresh", "fresh", 0, 7)
        await topic.until("g-fresh", 1)
        live = topic.transitions("g-fresh")
    assert live == [("NOTFOUND", "OK")]

    records = sorted((r for r in await _history(kafka.bootstrap) if r.topic == "fresh"), key=lambda r: r.observed_at)
    assert [r.kind for r in records] == ["commit", "broker"]  # the commit, then the log end looked up for it
    commits, samples = replay_inputs(records)
    replay = ReplayConfig(config.window(), config.rules(), tick_ms=100)
    end = records[-1].observed_at + 100  # a tick after the last record
    replayed = replay_group(CLUSTER, "g-fresh", commits, samples, replay, end_ms=end)

    assert status_changes(replayed.events) == live


async def _history(bootstrap: str) -> list[HistoryRecord]:
    consumer = AIOKafkaConsumer(HISTORY_TOPIC, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(HISTORY_TOPIC, 0)])
        records: list[HistoryRecord] = []
        while await consumer.position(TopicPartition(HISTORY_TOPIC, 0)) < sum(ends.values()):
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                records += [decode(line) for m in messages for line in records_of(m.value)]
        return records
    finally:
        await consumer.stop()


async def _records_in(bootstrap: str, topic: str) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or range(3)]
        ends = await consumer.end_offsets(partitions)
        return sum(ends.values())
    finally:
        await consumer.stop()


async def _archived(archiver: Archiver, total: int) -> bool:
    return archiver.writer.rows_written >= total and not archiver.positions
