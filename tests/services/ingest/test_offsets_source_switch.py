"""A cluster moving from admin mode to the offsets topic (`offsets-source: auto` finding the topic readable at a
start): the windows the admin poller filled go on with the topic's commits (shared/windows/window.py,
`_continued_from_admin`). Before, every position in the topic was older than the poller's orders (the time in
microseconds): the windows took no commit from the topic, and each group drifted to STOP until `expire-group`.

A real member commits through the Kafka wire protocol while the ingest polls in admin mode; the offsets topic is then
created and written as the group's coordinator writes it (the Kafka mock writes none): the commits the poller saw,
stamped when they were made, then the consumer's next ones. The ingest started again reads it from its start.
"""

import time

from redis.asyncio import Redis

from lagwatch.devkit.mock_kafka import MockKafkaCluster
from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OFFSETS_TOPIC, OffsetCommitSpec, OffsetsTopicWriter
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.protocol.types import Status
from lagwatch.shared.statuses.verdicts import stored_partition_status
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, running
from tests.services.ingest.test_ingest import window_of
from tests.services.ingest.test_ingest_admin_mode import Scenario, admin_config


async def offsets_of(store: WindowStore, s: Scenario) -> list[int] | None:
    window = await window_of(store, s.group, s.topic, 0)
    return [entry.offset for entry in window.entries] if window is not None else None


async def test_the_windows_the_admin_poller_filled_go_on_with_the_offsets_topics_commits(redis_server):
    with MockKafkaCluster() as kafka:  # no offsets topic yet: `auto` polls the admin API
        kafka.start()
        config = admin_config(kafka, redis_server.url, source="auto")  # 3 intervals
        redis = Redis.from_url(redis_server.url)
        store = WindowStore(redis, config.window())
        s = Scenario(kafka, store, "idle")
        made: list[tuple[int, int]] = []  # (offset, when committed), as the coordinator logs them
        async with running(IngestWorker(config, CLUSTER)) as ingest:
            await s.member.start()
            try:
                for offset in (10, 20):
                    await s.produce(10)
                    made.append((offset, int(time.time() * 1000)))
                    await s.member.commit(offset)
                await eventually(lambda: _offsets_are(store, s, [10, 20]), timeout=15)
            finally:
                await s.member.stop()
            assert ingest.admin_mode

        kafka.create_topic(OFFSETS_TOPIC, DEFAULT_PARTITIONS)
        async with OffsetsTopicWriter(kafka.bootstrap) as writer, running(IngestWorker(config, CLUSTER)) as ingest:
            await writer.commits([OffsetCommitSpec(s.group, s.topic, 0, off, timestamp=at) for off, at in made])
            await s.produce(10)
            await writer.commit(s.group, s.topic, 0, 30)  # the consumer's next commit, stamped now
            await eventually(lambda: _offsets_are(store, s, [10, 20, 30]), timeout=15)
            assert not ingest.admin_mode
            await s.produce(10)
            await writer.commit(s.group, s.topic, 0, 40)
            await eventually(lambda: _offsets_are(store, s, [20, 30, 40]), timeout=15)

        # judged well past the span of the window the poller left: STOP, had the topic's commits not gone in
        window = await window_of(store, s.group, s.topic, 0)
        later = int(time.time() * 1000) + 5_000
        assert stored_partition_status(window, config.window().intervals, later, config.rules()).status is Status.OK
        await redis.aclose()


async def _offsets_are(store: WindowStore, s: Scenario, expected: list[int]) -> bool:
    return await offsets_of(store, s) == expected
