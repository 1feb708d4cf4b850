"""The evaluator: statuses from the windows, one status-change event per transition, on the status topic."""

import asyncio
import json
import logging
import sys
import time

from aiokafka import AIOKafkaConsumer
from redis.asyncio import Redis

from lagwatch.devkit.redis_server import RedisServer
from lagwatch.services.evaluator import evaluation
from lagwatch.services.evaluator.evaluation import GroupEvaluator, Sparklines
from lagwatch.services.evaluator.publisher import EventPublisher
from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.shared.events.status_event import schema
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Commit
from lagwatch.shared.statuses.lag_sparkline import lag_sparkline
from lagwatch.shared.statuses.results_store import ResultsStore
from lagwatch.shared.windows.store import WindowStore
from tests.evaluated import AcceptingPublisher, evaluate
from tests.kafka_helpers import (
    CLUSTER,
    check_readiness_follows_the_brokers,
    evaluator_process,
    eventually,
    make_config,
    readiness,
    running,
)
from tests.schema_validation import validator_of
from tests.shared.runtime.test_redis_memory import make_full

STATUS_TOPIC = "lagwatch.status"
MINUTE = 60_000


class StatusTopic:
    """Reads every event on the status topic (or another of lagwatch's event topics), validating each against the
    published JSON Schema."""

    def __init__(self, bootstrap, topic=STATUS_TOPIC, event_schema=None):
        self.consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            group_id=f"status-reader-{time.time()}",
        )
        self.validator = validator_of(event_schema or schema())
        self.events = []

    async def __aenter__(self):
        await self.consumer.start()
        return self

    async def __aexit__(self, *exc):
        await self.consumer.stop()

    async def read(self, timeout=0.2):
        batch = await self.consumer.getmany(timeout_ms=int(timeout * 1000))
        for messages in batch.values():
            for m in messages:
                event = json.loads(m.value)
                self.validator.validate(event)
                assert m.key == f"{event['cluster']}/{event['group']}".encode()
                self.events.append(event)
        return self.events

    def transitions(self, group):
        return [(e["previous_status"], e["status"]) for e in self.events if e["group"] == group]

    async def until(self, group, n, timeout=20):
        async def enough():
            await self.read()
            return len(self.transitions(group)) >= n

        try:
            await eventually(enough, timeout=timeout)
        except AssertionError:
            raise AssertionError(f"{group}: wanted {n} transitions, saw {self.describe(group)}") from None
        return self.transitions(group)

    def describe(self, group):
        return [
            (e["previous_status"], e["status"], [(p["status"], p["current_lag"]) for p in e["partitions"]])
            for e in self.events
            if e["group"] == group
        ]


def commits(group, offsets, start, *, step=MINUTE, partition=0, first_order=1):
    return [
        Commit(group, "orders", partition, off, start + i * step, first_order + i, start + i * step)
        for i, off in enumerate(offsets)
    ]


async def test_evaluating_publishes_one_event_per_transition_with_incidents(kafka, redis_server, redis):
    kafka.create_topic(STATUS_TOPIC, 3)
    config = make_config(kafka.bootstrap, redis_server.url, STORAGE__INTERVALS="3")
    store = WindowStore(redis, config.window())
    statuses = StatusStore(redis, config.window().expire_group_ms)
    publisher = EventPublisher({"bootstrap_servers": kafka.bootstrap}, STATUS_TOPIC)
    await publisher.start()
    evaluator = GroupEvaluator(CLUSTER, store, statuses, publisher, config.rules())
    t0 = int(time.time() * 1000) - 20 * MINUTE

    async def commit_at(minute, offset, log_end):
        await store.writes.add_broker_offsets(CLUSTER, "orders", [log_end], sampled_at=t0 + minute * MINUTE)
        await store.writes.add_commits(
            CLUSTER, commits("billing", [offset], t0 + minute * MINUTE, first_order=minute), now_ms=t0
        )

    try:
        async with StatusTopic(kafka.bootstrap) as topic:
            await commit_at(0, 100, 100)  # caught up
            await evaluator.evaluate(["billing"], now_ms=t0)
            for minute, offset, log_end in [(1, 150, 200), (2, 240, 300), (3, 330, 400)]:  # lag 50, 60, 70
                await commit_at(minute, offset, log_end)
            await evaluator.evaluate(["billing"], now_ms=t0 + 4 * MINUTE)
            await evaluator.evaluate(["billing"], now_ms=t0 + 4 * MINUTE)  # no change, no event
            await commit_at(5, 400, 400)  # caught up again
            await evaluator.evaluate(["billing"], now_ms=t0 + 5 * MINUTE)
            assert await topic.until("billing", 3) == [("NOTFOUND", "OK"), ("OK", "WARN"), ("WARN", "OK")]
            opened, closed = topic.events[1], topic.events[2]
            assert opened["incident_id"] and opened["incident_id"] == closed["incident_id"]
            assert opened["incident_started_at"] == t0 + 4 * MINUTE
            assert [e["seq"] for e in topic.events] == [1, 2, 3]
            assert len({e["event_id"] for e in topic.events}) == 3
            assert opened["partitions"][0]["status"] == "WARN" and opened["totallag"] == 70
    finally:
        await publisher.stop()


async def test_an_event_left_in_the_outbox_is_published_by_the_next_evaluation(kafka, redis_server, redis):
    kafka.create_topic(STATUS_TOPIC, 3)
    config = make_config(kafka.bootstrap, redis_server.url)
    store = WindowStore(redis, config.window())
    statuses = StatusStore(redis, config.window().expire_group_ms)
    now = int(time.time() * 1000)
    await store.writes.add_broker_offsets(CLUSTER, "orders", [100], sampled_at=now)
    await store.writes.add_commits(CLUSTER, commits("billing", [100], now), now_ms=now)

    class DeadPublisher:  # Kafka refuses everything: the transition is recorded, its event stays in the outbox
        async def publish(self, items):
            return set()

    await GroupEvaluator(CLUSTER, store, statuses, DeadPublisher(), config.rules()).evaluate(["billing"], now)
    assert len((await statuses.states(CLUSTER, ["billing"]))[0].pending) == 1
    publisher = EventPublisher({"bootstrap_servers": kafka.bootstrap}, STATUS_TOPIC)
    await publisher.start()
    try:
        async with StatusTopic(kafka.bootstrap) as topic:
            await GroupEvaluator(CLUSTER, store, statuses, publisher, config.rules()).evaluate(["billing"], now)
            assert await topic.until("billing", 1) == [("NOTFOUND", "OK")]
            await asyncio.sleep(0.5)
            assert len(await topic.read()) == 1  # published once, not re-recorded
        assert (await statuses.states(CLUSTER, ["billing"]))[0].pending == []
    finally:
        await publisher.stop()


async def test_the_service_evaluates_on_notices_and_sweeps(kafka, redis_server, redis):
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic("lagwatch.changes", 4)
    config = make_config(kafka.bootstrap, redis_server.url, EVALUATOR__SWEEP_INTERVAL="0.5")
    store = WindowStore(redis, config.window())
    now = int(time.time() * 1000)
    async with StatusTopic(kafka.bootstrap) as topic, running(EvaluatorService(config, CLUSTER, http_port=0)) as ev:
        await store.writes.add_broker_offsets(CLUSTER, "orders", [100], sampled_at=now)
        await store.writes.add_commits(CLUSTER, commits("billing", [100], now - 1000), now_ms=now)
        # found without a notice: by the evaluation of every group when the instance got its partitions, or a sweep
        assert await topic.until("billing", 1) == [("NOTFOUND", "OK")]

        async def swept():
            return ev.sweeps_done >= 1

        await eventually(swept)


async def test_two_evaluators_publish_each_transition_once(kafka, redis_server, redis):
    """B is a `lagwatch run evaluator` process; A runs here and, on top of its own share, evaluates every group
    itself over and over, as if ownership were ignored: the compare-and-set still lets one transition through."""
    import signal
    import subprocess

    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic("lagwatch.changes", 4)
    config = make_config(kafka.bootstrap, redis_server.url, EVALUATOR__SWEEP_INTERVAL="0.3", STORAGE__INTERVALS="2")
    store = WindowStore(redis, config.window())
    now = int(time.time() * 1000)
    groups = [f"group-{i}" for i in range(30)]
    await store.writes.add_broker_offsets(CLUSTER, "orders", [1000], sampled_at=now)
    settings = {"EVALUATOR__SWEEP_INTERVAL": "0.3", "STORAGE__INTERVALS": "2"}
    other = evaluator_process(kafka.bootstrap, redis_server.url, subprocess.PIPE, **settings)
    try:
        async with StatusTopic(kafka.bootstrap) as topic, running(EvaluatorService(config, CLUSTER, http_port=0)) as a:
            # OK (caught up), then lag grows with each commit (WARN), then caught up again (OK)
            for step, (offset, log_end) in enumerate([(1000, 1000), (1200, 1300), (1400, 1600), (1600, 1600)]):
                await store.writes.add_broker_offsets(CLUSTER, "orders", [log_end], sampled_at=now + step)
                batch = [Commit(g, "orders", 0, offset, now + step * MINUTE, step + 1, now) for g in groups]
                await store.writes.add_commits(CLUSTER, batch, now_ms=now)
                for _ in range(5):
                    await a.evaluate_now(groups)
                    await asyncio.sleep(0.1)
            for g in groups:
                await topic.until(g, 3)
            await asyncio.sleep(1.5)
            await topic.read()
    finally:
        other.send_signal(signal.SIGTERM)
        out, _ = other.communicate(timeout=30)
    assert other.returncode == 0, out
    for g in groups:
        assert topic.transitions(g) == [("NOTFOUND", "OK"), ("OK", "WARN"), ("WARN", "OK")], g
        assert [e["seq"] for e in topic.events if e["group"] == g] == [1, 2, 3]


async def test_a_takeover_draws_its_sparklines_after_the_statuses(redis_server, redis):
    """Evaluated without sparklines (a cold start's takeover), a group has its result at once and owes its
    sparkline; drawing the owed ones stores the same points an evaluation with sparklines stores."""
    config = make_config("127.0.0.1:1", redis_server.url)
    store, results = WindowStore(redis, config.window()), ResultsStore(redis)
    now = int(time.time() * 1000)
    await store.writes.add_broker_offsets(CLUSTER, "orders", [500], sampled_at=now - 1000)
    await store.writes.add_commits(CLUSTER, commits("billing", [100, 200, 300], now - 4 * MINUTE), now_ms=now)
    statuses = StatusStore(redis, config.window().expire_group_ms)
    evaluator = GroupEvaluator(CLUSTER, store, statuses, AcceptingPublisher(), config.rules(), results=results)

    await evaluator.evaluate(["billing"], now, sparklines=False)
    assert "billing" in await results.all(CLUSTER) and await results.sparklines(CLUSTER) == {}
    assert evaluator.sparklines.owed == {"billing"}

    assert await evaluator.sparklines.draw_owed(500) == 1
    stored = await store.reads.get_group(CLUSTER, "billing")
    expected = [list(p) for p in lag_sparkline(stored.partitions, 0, now, config.window().intervals)[:-1]]
    assert [list(p) for p in (await results.sparklines(CLUSTER))["billing"]] == expected and expected
    assert evaluator.sparklines.owed == set()


async def test_the_owed_sparklines_drawn_hold_no_memory_of_their_number(redis_server, redis):
    config = make_config("127.0.0.1:1", redis_server.url)
    store = WindowStore(redis, config.window())
    sparklines = Sparklines(store, ResultsStore(redis), CLUSTER)
    sparklines.owed.update(f"gone-{i}" for i in range(2000))  # deleted since: nothing to draw
    while await sparklines.draw_owed(500):
        pass
    assert sparklines.owed == set() and sys.getsizeof(sparklines.owed) == sys.getsizeof(set())


async def test_readiness_reports_a_broker_outage_and_the_recovery(kafka, redis_server):
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic("lagwatch.changes", 4)
    config = make_config(kafka.bootstrap, redis_server.url)
    async with running(EvaluatorService(config, CLUSTER, http_port=0)) as evaluator:
        await check_readiness_follows_the_brokers(kafka, evaluator)


async def test_readiness_says_a_full_redis_that_still_answers_ping(kafka):
    """Full with `noeviction`, Redis refuses every write but answers PING (what readiness asked before): the
    evaluator, which writes every evaluation, is not ready until Redis has room again."""
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic("lagwatch.changes", 4)
    with RedisServer(extra_args=("--maxmemory-policy", "noeviction")) as own:
        client = Redis.from_url(own.url)
        async with running(EvaluatorService(make_config(kafka.bootstrap, own.url), CLUSTER, http_port=0)) as service:

            async def answer_is(status: int):
                got = await readiness(service)
                return got if got[0] == status else None

            await eventually(lambda: answer_is(200), timeout=30)
            await make_full(client)
            _, body = await eventually(lambda: answer_is(503), timeout=30)
            assert body["checks"] == {"redis": False, "kafka": True}
            await client.config_set("maxmemory", 0)  # room again
            await eventually(lambda: answer_is(200), timeout=30)
        assert not await client.exists(keys.READINESS_PROBE)  # the probe wrote nothing
        await client.aclose()


async def test_waiting_for_kafka_at_start_is_said_once_and_when_it_is_over(kafka, redis_server, caplog):
    """The status-topic producer's start is retried with back-off while every broker refuses: one warning (one per
    try, before), and a line when Kafka answers."""
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic("lagwatch.changes", 4)
    kafka.set_broker_down(-1)
    caplog.set_level(logging.INFO, logger="lagwatch")  # the Service base retries the start
    service = EvaluatorService(make_config(kafka.bootstrap, redis_server.url), CLUSTER, http_port=0)
    task = asyncio.create_task(service.run())
    try:
        await asyncio.sleep(3.0)  # several tries (0.2 s, doubling)
        waiting = [r for r in caplog.records if "cannot reach Kafka" in r.getMessage()]
        assert [r.levelno for r in waiting] == [logging.WARNING], caplog.text[-2000:]
        kafka.set_broker_up(-1)
        await eventually(lambda: _said(caplog, "cannot reach Kafka: over after"), timeout=30)
    finally:
        service.stopping.set()
        await asyncio.wait_for(task, timeout=30)


async def _said(caplog, text: str) -> bool:
    return any(text in r.getMessage() for r in caplog.records)


async def test_stopped_while_waiting_for_kafka_it_stops_cleanly(redis_server):
    """SIGTERM before Kafka was ever reached (a rollout, a broken cluster): a clean stop, not the last connection
    error raised as a crash."""
    service = EvaluatorService(make_config("127.0.0.1:9", redis_server.url), CLUSTER, http_port=0)
    task = asyncio.create_task(service.run())
    await asyncio.sleep(1.5)  # the status-topic producer's start is being retried
    assert not task.done()
    service.stopping.set()
    await asyncio.wait_for(task, timeout=30)  # returns: raised nothing


async def test_groups_an_evaluation_finds_are_named_when_few_counted_in_one_line_when_many(
    redis_server, redis, caplog, monkeypatch
):
    """A cold start finds every group: a line per group would cost it a few per cent of its CPU. A few new groups
    are still named, and a known group's change always has its own line."""
    monkeypatch.setattr(evaluation, "FOUND_LINES", 2)
    config = make_config("127.0.0.1:1", redis_server.url)
    store = WindowStore(redis, config.window())
    now = int(time.time() * 1000)
    await store.writes.add_broker_offsets(CLUSTER, "orders", [100], sampled_at=now)
    for group in ("billing", "audit", "search", "ledger"):
        await store.writes.add_commits(CLUSTER, commits(group, [100], now), now_ms=now)
    with caplog.at_level(logging.INFO, logger="lagwatch.services.evaluator.evaluation"):
        await evaluate(redis, config, CLUSTER, ["billing", "audit", "search"], now)
        assert [r.getMessage() for r in caplog.records] == [f"{CLUSTER}: 3 groups found: 3 OK"]
        caplog.clear()
        await evaluate(redis, config, CLUSTER, ["ledger"], now)
        assert [r.getMessage() for r in caplog.records] == [f"{CLUSTER}/ledger: -> OK"]
        caplog.clear()
        await store.deletions.delete_group(CLUSTER, "audit")
        await evaluate(redis, config, CLUSTER, ["billing", "audit"], now)
        assert [r.getMessage() for r in caplog.records] == [f"{CLUSTER}/audit: -> NOTFOUND"]
