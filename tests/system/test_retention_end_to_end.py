"""Retention risk through the real path: the ingest's poller records each partition's log start (ListOffsets
EARLIEST against the Kafka mock) beside its log end; the evaluator turns the log-start history into `retention` in
status events, and a committed offset below the log start into `skipped_messages` and the "messages-skipped"
explanation. The mock cluster deletes nothing (no retention, no DeleteRecords), so the deleting broker's log-start
samples are recorded in the store as the poller records its polls."""

import asyncio
import time

from redis.asyncio import Redis

from lagwatch.devkit.offsets_topic_writer import OffsetCommitSpec
from lagwatch.shared.protocol import keys
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, produce
from tests.services.evaluator.test_evaluator import STATUS_TOPIC
from tests.system.test_status_end_to_end import ingest_and_evaluator


async def test_the_poller_records_log_starts_and_events_carry_retention_risk_and_skipped_messages(kafka, redis_server):
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic("lagwatch.changes", 4)
    for topic in ("t-risk", "t-lost"):
        kafka.create_topic(topic, 1)
    # topic-refresh long: after its first poll, the poller records no log start the test does not write itself
    config = make_config(
        kafka.bootstrap,
        redis_server.url,
        STORAGE__INTERVALS="3",
        EVALUATOR__SWEEP_INTERVAL="0.5",
        **{f"CLUSTERS__{CLUSTER}__TOPIC_REFRESH": "600"},
    )
    redis = Redis.from_url(redis_server.url)
    store = WindowStore(redis, config.window())
    async with ingest_and_evaluator(kafka, config) as (writer, topic):
        await produce(kafka.bootstrap, "t-risk", {0: 1000})
        await produce(kafka.bootstrap, "t-lost", {0: 1000})

        async def polled():
            ends = await store.reads.latest_broker_offsets(CLUSTER, [("t-risk", 0), ("t-lost", 0)])
            starts = await store.reads.offset_histories(CLUSTER, [("t-risk", 0)], keys.log_start_history)
            return set(ends.values()) == {1000} and starts[("t-risk", 0)]

        first = await eventually(polled)
        assert [s.offset for s in first] == [0]  # the mock's log start, as ListOffsets said

        # a broker deleting 10 msg/s from the front: t-risk's start at 300, moving; t-lost's already past 700
        now = int(time.time() * 1000)
        await redis.delete(*(keys.log_start_history(CLUSTER, t) for t in ("t-risk", "t-lost")))
        await store.writes.add_log_start_polls(CLUSTER, {"t-risk": {0: 0}, "t-lost": {0: 0}}, now - 30_000)
        await store.writes.add_log_start_polls(CLUSTER, {"t-risk": {0: 300}, "t-lost": {0: 700}}, now)
        # t-risk's consumer stands at 500: 200 messages ahead of deletion at 10 msg/s, so about 20 s; t-lost's at
        # 400: 300 messages deleted before it read them
        await writer.commits(
            [
                OffsetCommitSpec("g-risk", "t-risk", 0, 500, timestamp=now - 1000),
                OffsetCommitSpec("g-lost", "t-lost", 0, 400, timestamp=now - 1000),
            ]
        )

        async def first_event(group):
            await topic.read()
            return next((e for e in topic.events if e["group"] == group), None)

        risk = await eventually(lambda: first_event("g-risk"))
        lost = await eventually(lambda: first_event("g-lost"))
        await asyncio.sleep(0)
    await redis.aclose()

    assert 15 <= risk["retention"]["retention_risk_seconds"] <= 20
    assert risk["retention"]["retention_risk_basis"] == "log-start"
    assert risk["retention"]["skipped_messages"] == 0
    assert lost["retention"] == {
        "retention_risk_seconds": 0.0,
        "retention_risk_basis": "log-start",
        "skipped_messages": 300,
    }
    assert lost["explanation"]["code"] == "messages-skipped"
    assert "300 messages" in lost["explanation"]["text"]
