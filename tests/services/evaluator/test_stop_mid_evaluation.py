"""A stop in the middle of a long evaluation (services/evaluator/runs.py): the evaluator ends between two chunks,
within its bounded stop, and the chunk it was evaluating is carried to its end, so that a restarted evaluator
publishes every group's first transition exactly once."""

import asyncio
import time
from collections import Counter

from redis.asyncio import Redis

from lagwatch.services.evaluator.publisher import STOP_FLUSH_S
from lagwatch.services.evaluator.runs import SWEEP_CHUNK
from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.protocol.types import Commit
from lagwatch.shared.runtime.faust_kafka import STOP_TIMEOUT_S
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, running
from tests.services.evaluator.test_evaluator import STATUS_TOPIC, StatusTopic

GROUPS = 4 * SWEEP_CHUNK  # new groups: their first evaluation takes four chunks
STOP_AT_CHUNK = 2  # the stop comes once the second chunk's events are acknowledged by Kafka
STOP_BOUND_S = STOP_TIMEOUT_S + STOP_FLUSH_S  # the evaluator's bounded stop: its Faust app, then its publisher
MINUTE = 60_000


class StopOnceAcknowledged:
    """The service's publisher, which asks the service to stop right after Kafka acknowledged a chunk's events, and
    is slow to hand the answer back: a stop that cut the evaluation there would leave published events in their
    outbox."""

    def __init__(self, publisher, stopping: asyncio.Event, chunk: int) -> None:
        self.publisher, self.stopping, self.chunk = publisher, stopping, chunk
        self.publishes = 0

    async def publish(self, items, topic=None):
        acknowledged = await self.publisher.publish(items, topic)
        self.publishes += topic is None  # status events (the lag-threshold ones go to their own topic)
        if topic is None and self.publishes == self.chunk:
            self.stopping.set()
            await asyncio.sleep(0.5)
        return acknowledged


async def seed(store: WindowStore, groups: list[str]) -> None:
    """Each group caught up on one partition of its own topic, three commits a minute apart: OK."""
    now = int(time.time() * 1000)
    ends = {f"t-{g}": {0: 300} for g in groups}
    await store.writes.add_broker_polls(CLUSTER, ends, now - MINUTE)
    await store.writes.add_broker_polls(CLUSTER, ends, now)
    commits = [
        Commit(g, f"t-{g}", 0, 100 * (k + 1), now - (3 - k) * MINUTE, 3 * i + k + 1, now - (3 - k) * MINUTE)
        for i, g in enumerate(groups)
        for k in range(3)
    ]
    await store.writes.add_commits(CLUSTER, commits, now, broker_offsets={(f"t-{g}", 0): 300 for g in groups})


async def test_a_stop_mid_evaluation_ends_between_chunks_and_a_restart_publishes_each_transition_once(
    kafka, redis_server
):
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic("lagwatch.changes", 4)
    config = make_config(kafka.bootstrap, redis_server.url)
    redis = Redis.from_url(redis_server.url)
    statuses = StatusStore(redis, config.window().expire_group_ms)
    groups = [f"g-{i}" for i in range(GROUPS)]
    await seed(WindowStore(redis, config.window()), groups)

    first = EvaluatorService(config, CLUSTER, http_port=0)
    first.evaluator.publisher = StopOnceAcknowledged(first.publisher, first.stopping, STOP_AT_CHUNK)
    run = asyncio.create_task(first.run())
    await asyncio.wait_for(first.stopping.wait(), timeout=60)
    await asyncio.wait_for(run, timeout=STOP_BOUND_S)
    assert await statuses.count(CLUSTER) == STOP_AT_CHUNK * SWEEP_CHUNK  # the chunk under way, and no more

    async with StatusTopic(kafka.bootstrap) as topic, running(EvaluatorService(config, CLUSTER, http_port=0)):

        async def all_published():
            states = await statuses.states(CLUSTER, groups)
            return all(s.status is not None and not s.pending for s in states)

        await eventually(all_published, timeout=60)
        await eventually(lambda: _read_all(topic), timeout=20)
        await asyncio.sleep(1.0)  # an event published twice would come now
        events = await topic.read()
    assert Counter(e["group"] for e in events) == Counter(groups)  # each group once, none missed
    assert {(e["previous_status"], e["status"]) for e in events} == {("NOTFOUND", "OK")}
    await redis.aclose()


async def _read_all(topic: StatusTopic) -> bool:
    return len(await topic.read()) >= GROUPS
