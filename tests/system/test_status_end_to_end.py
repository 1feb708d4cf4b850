"""Commits through the ingest path make the evaluator publish the expected status changes (docs/rules.md §3).

One ingest and one evaluator run against the Kafka mock cluster; each scenario plays a consumer group on its own
topic, writing coordinator records as the group coordinator would and moving the topic's log end with real
messages. Commit timestamps are spread out (the rules judge time from them) so no scenario stops by accident.
"""

import asyncio
import contextlib
import time

from redis.asyncio import Redis

from lagwatch.devkit.offsets_topic_writer import OffsetCommitSpec, OffsetsTopicWriter
from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, produce, running
from tests.services.evaluator.test_evaluator import STATUS_TOPIC, StatusTopic

POLL = 0.8  # a pause between steps, longer than the evaluator's sweep interval


class Scenario:
    def __init__(self, kafka, writer, store, name):
        self.kafka, self.writer, self.store = kafka, writer, store
        self.group, self.topic = f"g-{name}", f"t-{name}"
        self.log_end = 0
        kafka.create_topic(self.topic, 1)

    async def produce(self, n):
        """Move the log end, and wait until lagwatch has polled it: the next commit's lag is measured against it."""
        await produce(self.kafka.bootstrap, self.topic, {0: n})
        self.log_end += n
        await eventually(self._log_end_known)

    async def _log_end_known(self):
        [log_end] = (await self.store.reads.latest_broker_offsets(CLUSTER, [(self.topic, 0)])).values()
        return log_end == self.log_end

    async def commit(self, *offsets, spacing_s=20, ago_s=0):
        """Commits written together, the newest stamped `ago_s` before now and each earlier one `spacing_s` before
        it. A batch must be stamped after the one before: a commit stamped earlier merges into it (min-distance)."""
        now = int(time.time() * 1000) - ago_s * 1000
        n = len(offsets)
        await self.writer.commits(
            [
                OffsetCommitSpec(self.group, self.topic, 0, off, timestamp=now - (n - 1 - i) * spacing_s * 1000)
                for i, off in enumerate(offsets)
            ]
        )
        await asyncio.sleep(POLL)


async def lagging(s):  # OK, then lag grows with every commit (WARN), then it catches up (OK)
    await s.produce(10)
    await s.commit(5, 10)
    for _ in range(3):
        await s.produce(10)
        await s.commit(s.log_end - 5 - 5 * _)
    await s.commit(s.log_end)


async def stalled(s):  # the committed offset stops moving while messages arrive (STALL), then it moves on
    await s.produce(10)
    await s.commit(5, 10, spacing_s=70, ago_s=60)  # long ago, but spanning longer: no STOP before the next batch
    await s.produce(5)
    await s.commit(10, 10, 10)
    await asyncio.sleep(1.5)
    await s.commit(s.log_end)


async def stopped(s):  # commits stop while lag remains: after longer than the window spans, STOP
    await s.produce(10)
    await s.commit(2, 4, 6, spacing_s=1)


async def rewound(s):  # the committed offset goes back below where it was (REWIND)
    await s.produce(20)
    await s.commit(10, 15)
    await s.commit(5)


async def idle(s):  # a quiet topic, fully consumed: no commits for a long time must stay OK
    await s.produce(10)
    await s.commit(10, 10)


async def deleted(s):  # the group is deleted: NOTFOUND
    await s.produce(1)
    await s.commit(1)
    await asyncio.sleep(1.5)
    await s.writer.delete_group(s.group)


EXPECTED = {
    "lagging": [("NOTFOUND", "OK"), ("OK", "WARN"), ("WARN", "OK")],
    "stalled": [("NOTFOUND", "OK"), ("OK", "ERR"), ("ERR", "OK")],
    "stopped": [("NOTFOUND", "OK"), ("OK", "ERR")],
    "rewound": [("NOTFOUND", "OK"), ("OK", "ERR")],
    "idle": [("NOTFOUND", "OK")],
    "deleted": [("NOTFOUND", "OK"), ("OK", "NOTFOUND")],
}
BAD_PARTITION = {"stalled": "STALL", "stopped": "STOP", "rewound": "REWIND", "lagging": "WARN"}
PLAYS = {
    "lagging": lagging,
    "stalled": stalled,
    "stopped": stopped,
    "rewound": rewound,
    "idle": idle,
    "deleted": deleted,
}


async def test_each_scenario_publishes_its_status_changes(kafka, redis_server):
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic("lagwatch.changes", 4)
    config = make_config(kafka.bootstrap, redis_server.url, STORAGE__INTERVALS="3", EVALUATOR__SWEEP_INTERVAL="0.5")
    async with ingest_and_evaluator(kafka, config) as (writer, topic):
        store = WindowStore(Redis.from_url(redis_server.url), config.window())
        scenarios = {name: Scenario(kafka, writer, store, name) for name in PLAYS}
        await asyncio.gather(*(play(scenarios[name]) for name, play in PLAYS.items()))
        for name, expected in EXPECTED.items():
            assert await topic.until(f"g-{name}", len(expected)) == expected, name
        await asyncio.sleep(3)  # a few more sweeps: nothing else may happen (the idle group must not STOP)
        await topic.read()
        for name, expected in EXPECTED.items():
            assert topic.transitions(f"g-{name}") == expected, name
    for name, partition_status in BAD_PARTITION.items():
        opening = next(e for e in topic.events if e["group"] == f"g-{name}" and e["previous_status"] == "OK")
        assert [p["status"] for p in opening["partitions"]] == [partition_status], name


@contextlib.asynccontextmanager
async def ingest_and_evaluator(kafka, config):
    """An ingest and an evaluator at work on the Kafka mock (both assigned their partitions), with a writer of
    coordinator records and a reader of the status topic: (writer, topic)."""
    async with (
        OffsetsTopicWriter(kafka.bootstrap) as writer,
        StatusTopic(kafka.bootstrap) as topic,
        running(IngestWorker(config, CLUSTER)) as ingest,
        running(EvaluatorService(config, CLUSTER, http_port=0)) as evaluator,
    ):
        await eventually(lambda: _both_assigned(ingest, evaluator))
        yield writer, topic


async def _both_assigned(ingest, evaluator):
    return bool(ingest.consumer.assigned) and evaluator.owned_partitions() is not None
