"""Lag velocity and the explanation through the real path: a producer and committing consumers on the Kafka mock,
the ingest storing windows and log-end history in Redis, the evaluator publishing status events on the status topic
(validated against the published schema), then the api's status object and /metrics from the same data.

Two groups run in real time: `slow` consumes 50 msg/s (its offsets follow the clock) while its producer writes
about 100 msg/s, so its lag grows until Burrow's rules say WARN; `stuck` keeps committing one partition's offset
while the other partition keeps up, until STALL. The rates are checked against the generated ones with room for a
loaded machine's timing (the pure functions are held to 5 % and 10 % in test_velocity.py).
"""

import asyncio
import contextlib
import time

import aiohttp
import pytest
from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis

from lagwatch.devkit.offsets_topic_writer import OffsetCommitSpec, OffsetsTopicWriter, member
from lagwatch.services.api.metrics import scrape_results
from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, running
from tests.services.api.test_api import serving
from tests.services.evaluator.test_evaluator import STATUS_TOPIC, StatusTopic
from tests.system.test_status_end_to_end import Scenario, ingest_and_evaluator, lagging, stopped

pytestmark = pytest.mark.timeout(120)
PRODUCE_PER_TICK, TICK_S = 10, 0.1  # about 100 msg/s
CONSUME_RATE = 50.0
COMMIT_EVERY_S = 1.0


class Producer:
    """Writes PRODUCE_PER_TICK messages to each partition of a topic every TICK_S; counts what it wrote when."""

    def __init__(self, bootstrap, topic, partitions):
        self.producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
        self.topic, self.partitions = topic, partitions
        self.written = dict.fromkeys(range(partitions), 0)
        self.started = time.monotonic()

    async def run(self):
        await self.producer.start()
        try:
            self.started = time.monotonic()
            while True:
                for p in range(self.partitions):
                    for i in range(PRODUCE_PER_TICK):
                        await self.producer.send(self.topic, b"m%d" % i, partition=p)
                await self.producer.flush()
                for p in range(self.partitions):
                    self.written[p] += PRODUCE_PER_TICK
                await asyncio.sleep(TICK_S)
        finally:
            await self.producer.stop()

    def rate(self):
        return self.written[0] / (time.monotonic() - self.started)


async def slow_consumer(writer, store):
    """Commits offset 50 * seconds-since-start, stamped now: exactly 50 msg/s by the commit timestamps."""
    start = time.time()
    while True:
        now = time.time()
        offset = int(CONSUME_RATE * (now - start))
        await writer.commits([OffsetCommitSpec("g-slow", "t-slow", 0, offset, timestamp=int(now * 1000))])
        await asyncio.sleep(COMMIT_EVERY_S)


async def stuck_consumer(writer, store, stuck_after_s=3.0):
    """Both partitions keep up with the log end lagwatch knows, until partition 0 stays where it is."""
    start = time.time()
    stuck_at = None
    while True:
        ends = await store.reads.latest_broker_offsets(CLUSTER, [("t-stuck", 0), ("t-stuck", 1)])
        now = time.time()
        if now - start < stuck_after_s or stuck_at is None:
            stuck_at = ends[("t-stuck", 0)] or 0
        specs = [
            OffsetCommitSpec("g-stuck", "t-stuck", 0, stuck_at, timestamp=int(now * 1000)),
            OffsetCommitSpec("g-stuck", "t-stuck", 1, ends[("t-stuck", 1)] or 0, timestamp=int(now * 1000)),
        ]
        await writer.commits(specs)
        await asyncio.sleep(COMMIT_EVERY_S)


async def start_caught_up(writer, store):
    """Both groups first commit offset 0 on empty topics (OK) three times, 1.5 s apart, so the rules judge what
    follows from a window that began caught up (a lone commit with lag would already be a STALL). The window spans
    3 s from the start: with a shorter span, a commit that arrives a little over a second later (the consumers sleep
    1 s between commits) already reads STOP on a loaded machine."""
    partitions = [("t-slow", 0), ("t-stuck", 0), ("t-stuck", 1)]

    async def log_ends_known():
        return all(v == 0 for v in (await store.reads.latest_broker_offsets(CLUSTER, partitions)).values())

    await eventually(log_ends_known)
    now = int(time.time() * 1000)
    groups = {"t-slow": "g-slow", "t-stuck": "g-stuck"}
    await writer.commits(
        [OffsetCommitSpec(groups[t], t, p, 0, timestamp=now - age) for age in (3000, 1500, 0) for t, p in partitions]
    )

    async def stored():
        found = await store.reads.get_groups(CLUSTER, ["g-slow", "g-stuck"])
        return all(g is not None and all(len(p.entries) == 3 for p in g.partitions) for g in found)

    await eventually(stored)


async def test_status_events_api_and_metrics_say_how_fast_and_why(kafka, redis_server):
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic("lagwatch.changes", 4)
    kafka.create_topic("t-slow", 1)
    kafka.create_topic("t-stuck", 2)
    config = make_config(kafka.bootstrap, redis_server.url, STORAGE__INTERVALS="4", EVALUATOR__SWEEP_INTERVAL="0.5")
    redis = Redis.from_url(redis_server.url)
    store = WindowStore(redis, config.window())
    slow_producer = Producer(kafka.bootstrap, "t-slow", 1)
    stuck_producer = Producer(kafka.bootstrap, "t-stuck", 2)
    async with (
        OffsetsTopicWriter(kafka.bootstrap) as writer,
        StatusTopic(kafka.bootstrap) as topic,
        running(IngestWorker(config, CLUSTER)),
        running(EvaluatorService(config, CLUSTER, http_port=0)),
    ):
        await start_caught_up(writer, store)
        tasks = [
            asyncio.create_task(coro)
            for coro in (
                slow_producer.run(),
                stuck_producer.run(),
                slow_consumer(writer, store),
                stuck_consumer(writer, store),
            )
        ]
        try:

            async def opened(group, status):
                await topic.read()
                return next((e for e in topic.events if e["group"] == group and e["status"] == status), None)

            warn = await eventually(lambda: opened("g-slow", "WARN"), timeout=60)
            err = await eventually(lambda: opened("g-stuck", "ERR"), timeout=60)
            produced = slow_producer.rate()
            async with serving(config) as api, api_get(api, "/v3/kafka/local/consumer/g-slow/lag") as body:
                api_status = body["status"]
            metrics = (await scrape_results(config, redis)).decode()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await redis.aclose()

    # the slower consumer: rates near the generated ones, the lag grows, it never catches up, and that is why
    velocity = warn["velocity"]
    assert velocity["consume_rate"] == pytest.approx(CONSUME_RATE, rel=0.10)
    assert velocity["produce_rate"] == pytest.approx(produced, rel=0.25)
    assert velocity["lag_growth_per_second"] > 0
    assert (velocity["catchup"], velocity["catchup_seconds"]) == ("never", None)
    assert warn["partitions"][0]["velocity"]["catchup"] == "never"
    assert warn["explanation"]["code"] == "slower-than-producer"
    # the stuck partition is named while the other one moves
    assert err["explanation"]["code"] == "stuck-partition"
    assert "t-stuck/0" in err["explanation"]["text"]
    assert err["velocity"]["catchup"] == "never"
    # the api's status object and /metrics say the same of the slow group
    assert api_status["velocity"]["catchup"] == "never"
    assert api_status["velocity"]["consume_rate"] == pytest.approx(CONSUME_RATE, rel=0.10)
    assert api_status["explanation"]["code"] == "slower-than-producer"
    assert 'lagwatch_consumer_group_catchup_seconds{cluster="local",consumer_group="g-slow"} +Inf' in metrics
    growth = next(
        line
        for line in metrics.splitlines()
        if line.startswith('lagwatch_consumer_group_lag_growth_per_second{cluster="local",consumer_group="g-slow"}')
    )
    assert float(growth.split()[-1]) > 0


@contextlib.asynccontextmanager
async def api_get(api, path):
    """GET a path of a running api, as JSON."""
    async with aiohttp.ClientSession() as session, session.get(api.url + path) as response:
        assert response.status == 200, await response.text()
        yield await response.json()


async def test_group_metadata_explains_a_rebalance_storm_and_a_consumer_whose_members_left(kafka, redis_server):
    """Generations and members come from the coordinator's group-metadata records, as the ingest reads them."""
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic("lagwatch.changes", 4)
    config = make_config(kafka.bootstrap, redis_server.url, STORAGE__INTERVALS="3", EVALUATOR__SWEEP_INTERVAL="0.5")
    async with ingest_and_evaluator(kafka, config) as (writer, topic):
        store = WindowStore(Redis.from_url(redis_server.url), config.window())
        storm, gone = Scenario(kafka, writer, store, "storm"), Scenario(kafka, writer, store, "gone")

        async def churn():  # three generations in a few seconds, the partition owned by one host each time
            for generation in (1, 2, 3):
                owner = member(f"m{generation}", "storm-app", "/10.0.0.9", {"t-storm": [0]})
                await writer.group_metadata("g-storm", generation=generation, members=[owner])
            await lagging(storm)

        async def members_leave():
            owner = member("m1", "gone-app", "/10.0.0.5", {"t-gone": [0]})
            await writer.group_metadata("g-gone", generation=1, members=[owner])
            await stopped(gone)  # commits stop with lag left...
            await writer.group_metadata("g-gone", generation=2, members=[])  # ...and the group is left Empty

        await asyncio.gather(churn(), members_leave())

        async def opened(group, status):
            await topic.read()
            return next((e for e in topic.events if e["group"] == group and e["status"] == status), None)

        warn = await eventually(lambda: opened("g-storm", "WARN"))
        err = await eventually(lambda: opened("g-gone", "ERR"))
    assert warn["explanation"]["code"] == "rebalance-storm"
    assert "3 generations" in warn["explanation"]["text"] and "/10.0.0.9" in warn["explanation"]["text"]
    assert err["partitions"][0]["status"] == "STOP"
    assert err["explanation"]["code"] == "consumer-gone"
    assert "members left" in err["explanation"]["text"]
