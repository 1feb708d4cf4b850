"""The offsets-topic reader (services/ingest/commit_readers.py) says at once when its commits are no longer behind:
the evaluator holds new groups' first evaluations while any worker's word says behind."""

import time

from lagwatch.devkit.offsets_topic_writer import OffsetCommitSpec, OffsetsTopicWriter
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.protocol import keys
from lagwatch.shared.windows.ingest_totals import read_totals
from tests.kafka_helpers import CLUSTER, eventually, make_config, running

BACKLOG = 3000


async def test_a_worker_says_behind_while_it_reads_a_backlog_and_not_once_it_has_read_it(kafka, redis_server, redis):
    kafka.create_topic("orders", 1)
    # a poller tick far away: only the reader can take the word back in this test's time
    config = make_config(kafka.bootstrap, redis_server.url, **{f"CLUSTERS__{CLUSTER}__OFFSET_REFRESH": "600"})
    now = int(time.time() * 1000)
    async with OffsetsTopicWriter(kafka.bootstrap) as writer:
        await writer.commits([OffsetCommitSpec(f"g-{i}", "orders", 0, 1, timestamp=now) for i in range(BACKLOG)])
        words = []

        async def word_said_and_backlog_read():
            words.extend((await redis.hgetall(keys.ingest_behind(CLUSTER))).values())
            return words and (await read_totals(redis, CLUSTER)).get("records", 0) >= BACKLOG

        async with running(IngestWorker(config, CLUSTER)):
            await eventually(word_said_and_backlog_read, timeout=60)
            assert all(int(until) > now for until in words)  # it said behind while it read
            assert await eventually(lambda: _no_word(redis), timeout=10)


async def _no_word(redis) -> bool:
    return not await redis.hlen(keys.ingest_behind(CLUSTER))
