"""Admin mode (`offsets-source: admin`): commits read through ListGroups + OffsetFetch reach the same statuses.

No coordinator record is written here: real consumer groups join and commit through the Kafka wire protocol, and the
ingest polls their committed offsets through the admin API (the mock answers ListGroups with nothing, so the groups
are named in `admin-groups`). A commit's time is when the ingest saw it, so each scenario plays in real time, its
steps a little longer apart than the ingest's polls. The one documented difference: a stalled consumer (the same
offset committed again) cannot be told from one that stopped committing: its partition reads STOP where topic mode
says STALL; the group is ERR either way.
"""

import asyncio
import contextlib
import time

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition
from confluent_kafka import KafkaException
from redis.asyncio import Redis

from lagwatch.devkit.mock_kafka import MockKafkaCluster
from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.services.ingest.admin_offsets import offsets_topic_readable
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.protocol import keys
from lagwatch.shared.windows.read_through_store import ReadThroughStore
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, running
from tests.net_helpers import free_port
from tests.services.evaluator.test_evaluator import STATUS_TOPIC, StatusTopic
from tests.services.ingest.test_ingest import window_of
from tests.system.test_status_end_to_end import Scenario as TopicScenario

STEP = 0.8  # between two steps of a scenario: longer than the ingest's poll (0.3 s) and the evaluator's sweep
SETTLE = 2.5


class Member:
    """A consumer group with one real member that commits the offsets it is told to."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.tp = TopicPartition(topic, 0)
        self.consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, session_timeout_ms=6000
        )

    async def start(self) -> None:
        await self.consumer.start()
        await eventually(self._assigned)

    async def _assigned(self) -> bool:
        await self.consumer.getmany(timeout_ms=100, max_records=1)  # drives the join
        return self.tp in self.consumer.assignment()

    async def commit(self, offset: int) -> None:
        await self.consumer.commit({self.tp: offset})
        await asyncio.sleep(STEP)

    async def stop(self) -> None:
        await self.consumer.stop()


class Scenario(TopicScenario):
    """A scenario of topic mode (its own topic and log end), committed by a real group member instead of records."""

    def __init__(self, kafka: MockKafkaCluster, store: WindowStore, name: str) -> None:
        super().__init__(kafka, None, store, name)
        self.member = Member(kafka.bootstrap, self.group, self.topic)


async def settle(s: Scenario) -> None:
    """The first commit, fully consumed, then a pause longer than the later steps, so a window spans more than any
    gap between two later commits."""
    await s.produce(10)
    await s.member.commit(10)
    await asyncio.sleep(SETTLE)


async def lagging(s: Scenario) -> None:  # OK, then lag grows with every commit (WARN), then it catches up (OK)
    await settle(s)
    for i in range(3):
        await s.produce(10)
        await s.member.commit(s.log_end - 5 - 5 * i)
    await s.member.commit(s.log_end)


async def stalled(s: Scenario) -> None:  # the offset stops moving while messages arrive; then it moves on
    await settle(s)
    await s.produce(5)
    await s.member.commit(11)  # a third entry: a window old enough to judge (docs/rules.md §3)
    await s.member.commit(12)
    await s.member.commit(12)  # the same offset again: invisible to OffsetFetch
    await asyncio.sleep(SETTLE + 2)  # longer than the window spans: ERR
    await s.member.commit(s.log_end)


async def rewound(s: Scenario) -> None:  # the committed offset goes back below where it was (REWIND)
    await settle(s)
    await s.produce(10)
    await s.member.commit(15)
    await s.member.commit(5)


async def stopped(s: Scenario) -> None:  # commits stop while lag remains: after longer than the window spans, STOP
    await settle(s)
    await s.produce(10)
    await s.member.commit(15)
    await s.member.commit(17)  # a third entry: a window old enough to judge (docs/rules.md §3)


async def idle(s: Scenario) -> None:  # fully consumed and quiet: stays OK however long nothing is committed
    await settle(s)


PLAYS = {"lagging": lagging, "stalled": stalled, "stopped": stopped, "rewound": rewound, "idle": idle}
EXPECTED = {
    "lagging": [("NOTFOUND", "OK"), ("OK", "WARN"), ("WARN", "OK")],
    "stalled": [("NOTFOUND", "OK"), ("OK", "ERR"), ("ERR", "OK")],
    "stopped": [("NOTFOUND", "OK"), ("OK", "ERR")],
    "rewound": [("NOTFOUND", "OK"), ("OK", "ERR")],
    "idle": [("NOTFOUND", "OK")],
}
BAD_PARTITION = {"lagging": "WARN", "stalled": "STOP", "stopped": "STOP", "rewound": "REWIND"}


def admin_config(kafka: MockKafkaCluster, redis_url: str, source: str = "admin"):
    groups = ",".join(f"g-{name}" for name in PLAYS)
    return make_config(
        kafka.bootstrap,
        redis_url,
        STORAGE__INTERVALS="3",
        EVALUATOR__SWEEP_INTERVAL="0.5",
        **{f"CLUSTERS__{CLUSTER}__OFFSETS_SOURCE": source, f"CLUSTERS__{CLUSTER}__ADMIN_GROUPS": groups},
    )


async def test_groups_polled_through_the_admin_api_reach_the_same_statuses_as_from_the_topic(redis_server):
    with MockKafkaCluster() as kafka:  # no __consumer_offsets at all, as on a managed service
        kafka.start()
        kafka.create_topic(STATUS_TOPIC, 3)
        kafka.create_topic("lagwatch.changes", 4)
        config = admin_config(kafka, redis_server.url)
        store = WindowStore(Redis.from_url(redis_server.url), config.window())
        scenarios = {name: Scenario(kafka, store, name) for name in PLAYS}
        async with (
            StatusTopic(kafka.bootstrap) as topic,
            running(IngestWorker(config, CLUSTER)) as ingest,
            running(EvaluatorService(config, CLUSTER, http_port=0)) as evaluator,
        ):
            await eventually(lambda: _at_work(ingest, evaluator))
            await asyncio.gather(*(s.member.start() for s in scenarios.values()))
            try:
                await asyncio.gather(*(play(scenarios[name]) for name, play in PLAYS.items()))
                for name, expected in EXPECTED.items():
                    assert await topic.until(f"g-{name}", len(expected), timeout=30) == expected, name
                await asyncio.sleep(3)  # more polls and sweeps: nothing else may happen (idle must not STOP)
                await topic.read()
                for name, expected in EXPECTED.items():
                    assert topic.transitions(f"g-{name}") == expected, name
                # how far it read: the time each poll was asked, which the rules' clock follows (read_through.py)
                instants = await ReadThroughStore(store.redis, CLUSTER).instants()
                assert len(instants) == 1 and time.time() * 1000 - instants[0] < 5_000
            finally:
                for s in scenarios.values():
                    with contextlib.suppress(Exception):
                        await s.member.stop()
    for name, partition_status in BAD_PARTITION.items():
        opening = next(e for e in topic.events if e["group"] == f"g-{name}" and e["previous_status"] == "OK")
        assert [p["status"] for p in opening["partitions"]] == [partition_status], name


async def test_auto_falls_back_to_the_admin_api_when_the_offsets_topic_cannot_be_read(redis_server):
    with MockKafkaCluster() as kafka:
        kafka.start()
        config = admin_config(kafka, redis_server.url, source="auto")
        store = WindowStore(Redis.from_url(redis_server.url), config.window())
        scenario = Scenario(kafka, store, "idle")
        async with running(IngestWorker(config, CLUSTER)) as ingest:
            await scenario.member.start()
            try:
                await scenario.produce(10)
                await scenario.member.commit(7)
                windows = await eventually(lambda: _window(store, scenario), timeout=15)
            finally:
                await scenario.member.stop()
            assert ingest.admin_mode
            # the poller stamps its commits itself: no coordinator's clock to estimate (commit_clock.py)
            assert ingest.pipeline.clock.offsets_ms == {}
            assert not await store.redis.exists(keys.commit_clock(CLUSTER))
        assert [entry.offset for entry in windows] == [7]


async def test_auto_reads_the_topic_where_it_is_readable(kafka, redis_server):
    config = admin_config(kafka, redis_server.url, source="auto")
    async with running(IngestWorker(config, CLUSTER)) as ingest:
        await eventually(lambda: _assigned(ingest))
        assert not ingest.admin_mode


async def _at_work(ingest: IngestWorker, evaluator: EvaluatorService) -> bool:
    return ingest.admin_mode and ingest.caught_up.is_set() and evaluator.owned_partitions() is not None


async def _assigned(ingest: IngestWorker) -> bool:
    return bool(ingest.consumer.assigned)


async def _window(store: WindowStore, s: Scenario):
    window = await window_of(store, s.group, s.topic, 0)
    return window.entries if window is not None and window.entries else None


def test_a_described_groups_membership_becomes_a_rebalance_with_its_owners():
    """Where the broker answers DescribeGroups (the mock does not), a change of membership becomes a rebalance that
    the processor applies as any: owner and client id per partition."""
    from confluent_kafka import Node
    from confluent_kafka import TopicPartition as Tp
    from confluent_kafka.admin import ConsumerGroupDescription, MemberAssignment, MemberDescription

    from lagwatch.services.ingest.admin_offsets import _membership, _rebalance
    from lagwatch.shared.windows.window_writes import GroupMetadataUpdate

    members = [
        MemberDescription("m-2", "billing-b", "/10.0.0.2", MemberAssignment([Tp("orders", 1), Tp("audit", 0)])),
        MemberDescription("m-1", "billing-a", "/10.0.0.1", MemberAssignment([Tp("orders", 0)])),
    ]
    description = ConsumerGroupDescription("billing", False, members, "range", "STABLE", Node(1, "h", 9092))
    membership = _membership(description)
    step = _rebalance("billing", membership, 3, 1_700_000_000_000)

    assert isinstance(step, GroupMetadataUpdate)
    assert (step.group, step.generation, step.started_at) == ("billing", 3, 1_700_000_000_000)
    assert step.owners == {
        ("orders", 0): ("/10.0.0.1", "billing-a"),
        ("orders", 1): ("/10.0.0.2", "billing-b"),
        ("audit", 0): ("/10.0.0.2", "billing-b"),
    }
    # the same members in another order are the same membership: no new record
    swapped = ConsumerGroupDescription("billing", False, members[::-1], "range", "STABLE", Node(1, "h", 9092))
    assert _membership(swapped) == membership


def test_librdkafkas_lines_from_the_admin_client_go_to_the_ingests_log_not_raw_to_stderr(capfd, caplog):
    """Given no logger, librdkafka writes `%3|...|FAIL|...` straight to stderr: outside the log format, unthinned."""
    with caplog.at_level("ERROR", logger="lagwatch.services.ingest"), pytest.raises(KafkaException):
        offsets_topic_readable({"bootstrap.servers": f"127.0.0.1:{free_port()}"}, "__consumer_offsets", timeout=1.5)
    assert any("Connect to" in r.getMessage() for r in caplog.records if r.name.startswith("lagwatch.services"))
    assert "|FAIL|" not in capfd.readouterr().err
