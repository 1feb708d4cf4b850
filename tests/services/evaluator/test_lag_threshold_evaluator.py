"""The evaluator's lag-seconds thresholds against a real Redis and the Kafka mock: one event per crossing, published
on the lag-threshold topic, never twice (two evaluators, a restart), thresholds from the file and the api."""

import asyncio
import dataclasses
import time

from lagwatch.services.evaluator.evaluation import OUTBOX_RETRY_MS, GroupEvaluator
from lagwatch.services.evaluator.lag_state_store import LagStateStore
from lagwatch.services.evaluator.lag_thresholds import LagThresholdAlerts, ThresholdSource
from lagwatch.services.evaluator.publisher import EventPublisher
from lagwatch.shared.events.lag_threshold_event import schema
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.notifications.subscriptions.store import SubscriptionStore
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Commit
from lagwatch.shared.runtime.config import SubscriptionConfig
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config
from tests.services.evaluator.test_evaluator import StatusTopic
from tests.services.evaluator.test_unsent_events import unsent_seconds

LAG_TOPIC = "lagwatch.lag-thresholds"
S = 1000


class LagTopic(StatusTopic):
    """Every event on the lag-threshold topic, each checked against its JSON Schema."""

    def __init__(self, bootstrap):
        super().__init__(bootstrap, LAG_TOPIC, schema())

    async def until(self, n, timeout=20):
        """The first `n` distinct events. Publishing is at least once: when two evaluators race, the one that did
        not record a crossing may still publish its pending event before the other's acknowledgement clears it; a
        repeat carries the same `event_id`, by which consumers (the notifier) drop it."""

        async def enough():
            await self.read()
            return len(self.distinct()) >= n

        await eventually(enough, timeout=timeout)
        return [(e["group"], e["threshold_seconds"], e["above"], e["reason"]) for e in self.distinct()]

    def distinct(self):
        return list({e["event_id"]: e for e in self.events}.values())  # in order of first appearance


class DeadPublisher:  # Kafka refuses everything: crossings are recorded, their events stay in the outbox
    async def publish(self, items, topic=None):
        return set()


class LagTopicAway:  # Kafka takes status events, not lag-threshold ones (their topic's leader away) until told
    def __init__(self, publisher):
        self.publisher, self.away = publisher, True

    async def publish(self, items, topic=None):
        if topic == LAG_TOPIC and self.away:
            return set()
        return await self.publisher.publish(items, topic)


class Setup:
    def __init__(self, kafka, redis_server, redis, subscriptions=()):
        kafka.create_topic("lagwatch.status", 1)
        kafka.create_topic(LAG_TOPIC, 3)
        self.config = dataclasses.replace(make_config(kafka.bootstrap, redis_server.url), subscriptions=subscriptions)
        self.redis = redis
        self.store = WindowStore(redis, self.config.window())
        self.publisher = EventPublisher({"bootstrap_servers": kafka.bootstrap}, "lagwatch.status")
        self.t0 = int(time.time() * 1000) - 3600 * S

    def evaluator(self, publisher=None):
        ms = self.config.window().expire_group_ms
        alerts = LagThresholdAlerts(
            CLUSTER,
            LagStateStore(self.redis, ms),
            ThresholdSource(self.redis, CLUSTER, self.config.subscriptions, refresh_s=0),
            publisher or self.publisher,
            LAG_TOPIC,
        )
        return GroupEvaluator(
            CLUSTER, self.store, StatusStore(self.redis, ms), publisher or self.publisher, self.config.rules(), alerts
        )

    async def caught_up_then_stuck(self, group, log_end=100):
        """The group commits the log end at t0; 10 s later the log end has moved on and the group has not."""
        await self.store.writes.add_broker_offsets(CLUSTER, "orders", [log_end], sampled_at=self.t0)
        await self.store.writes.add_commits(
            CLUSTER, [Commit(group, "orders", 0, log_end, self.t0, 1, self.t0)], now_ms=self.t0
        )
        await self.store.writes.add_broker_offsets(CLUSTER, "orders", [log_end + 100], sampled_at=self.t0 + 10 * S)

    async def catch_up(self, group, offset, at):
        await self.store.writes.add_commits(CLUSTER, [Commit(group, "orders", 0, offset, at, 2, at)], now_ms=at)


def sub(sub_id, **fields):
    return SubscriptionConfig(id=sub_id, url="https://hooks.example.com/x", **fields)


async def test_one_event_per_crossing_even_with_two_evaluators_racing(kafka, redis_server, redis):
    s = Setup(kafka, redis_server, redis, [sub("slow", lag_seconds_threshold=300), sub("plain")])
    await s.publisher.start()
    try:
        async with LagTopic(kafka.bootstrap) as topic:
            await s.caught_up_then_stuck("billing")
            a, b = s.evaluator(), s.evaluator()
            await a.evaluate(["billing"], now_ms=s.t0 + 200 * S)  # 200 s behind: under
            reports = await asyncio.gather(*(e.evaluate(["billing"], now_ms=s.t0 + 301 * S) for e in (a, b, a, b)))
            assert sum(r.lag_crossings for r in reports) == 1  # the compare-and-set lets one through
            await a.evaluate(["billing"], now_ms=s.t0 + 900 * S)  # still over: nothing new
            await s.catch_up("billing", 200, s.t0 + 901 * S)
            await b.evaluate(["billing"], now_ms=s.t0 + 902 * S)
            assert await topic.until(2) == [("billing", 300, True, "lag"), ("billing", 300, False, "lag")]
            await asyncio.sleep(0.5)
            assert len(await topic.until(2)) == 2
            over, under = topic.distinct()  # a repeat of one (same event_id) may arrive: at least once
            assert (over["seq"], under["seq"]) == (1, 2) and over["incident_id"] == under["incident_id"]
            assert over["incident_started_at"] == under["incident_started_at"] == s.t0 + 301 * S
            assert over["max_lag_seconds"] == 301.0 and over["partitions"][0]["lag_seconds"] == 301.0
            assert under["max_lag_seconds"] == 0.0
        assert await redis.smembers(keys.lag_active_groups(CLUSTER)) == set()
        assert await redis.llen(keys.group_pending_lag_events(CLUSTER, "billing")) == 0
    finally:
        await s.publisher.stop()


async def test_an_event_left_in_the_outbox_is_published_by_the_next_evaluation(kafka, redis_server, redis):
    s = Setup(kafka, redis_server, redis, [sub("slow", lag_seconds_threshold=60)])
    await s.caught_up_then_stuck("billing")
    report = await s.evaluator(DeadPublisher()).evaluate(["billing"], now_ms=s.t0 + 61 * S)
    assert report.lag_crossings == 1 and report.lag_events_published == 0
    assert await redis.sismember(keys.lag_active_groups(CLUSTER), "billing")
    await s.publisher.start()
    try:
        async with LagTopic(kafka.bootstrap) as topic:
            report = await s.evaluator().evaluate(["billing"], now_ms=s.t0 + 62 * S)
            assert (report.lag_crossings, report.lag_events_published) == (0, 1)
            assert await topic.until(1) == [("billing", 60, True, "lag")]
            assert topic.events[0]["evaluated_at"] == s.t0 + 61 * S  # the event recorded then, not a new one
    finally:
        await s.publisher.stop()


async def test_api_thresholds_are_used_and_removing_one_closes_its_incidents(kafka, redis_server, redis):
    s = Setup(kafka, redis_server, redis)
    subscriptions = SubscriptionStore(redis)
    await subscriptions.put(sub("api-slow", lag_seconds_threshold=120), create=True)
    await subscriptions.put(sub("elsewhere", lag_seconds_threshold=5, clusters=["other"]), create=True)
    await s.publisher.start()
    try:
        async with LagTopic(kafka.bootstrap) as topic:
            await s.caught_up_then_stuck("billing")
            evaluator = s.evaluator()
            await evaluator.evaluate(["billing"], now_ms=s.t0 + 100 * S)  # over 5 s, but that one is for `other`
            await evaluator.evaluate(["billing"], now_ms=s.t0 + 130 * S)
            await subscriptions.put(sub("api-slow", lag_seconds_threshold=0), create=False)  # PUT: no threshold
            assert await redis.hkeys(keys.LAG_THRESHOLDS) == [b"elsewhere"]
            await evaluator.evaluate(["billing"], now_ms=s.t0 + 140 * S)  # the group is only read from the index
            await evaluator.evaluate(["billing"], now_ms=s.t0 + 150 * S)
            assert await topic.until(2) == [
                ("billing", 120, True, "lag"),
                ("billing", 120, False, "threshold_removed"),
            ]
            await subscriptions.delete("elsewhere")
            assert await redis.hlen(keys.LAG_THRESHOLDS) == 0
        assert await redis.scard(keys.lag_active_groups(CLUSTER)) == 0
    finally:
        await s.publisher.stop()


async def test_a_group_that_is_gone_closes_its_incident(kafka, redis_server, redis):
    s = Setup(kafka, redis_server, redis, [sub("slow", lag_seconds_threshold=30)])
    await s.publisher.start()
    try:
        async with LagTopic(kafka.bootstrap) as topic:
            await s.caught_up_then_stuck("billing")
            evaluator = s.evaluator()
            await evaluator.evaluate(["billing"], now_ms=s.t0 + 31 * S)
            await s.store.deletions.delete_group(CLUSTER, "billing")  # a group-metadata tombstone, or the api's DELETE
            await evaluator.evaluate(["billing"], now_ms=s.t0 + 32 * S)
            assert await topic.until(2) == [("billing", 30, True, "lag"), ("billing", 30, False, "group_gone")]
            assert topic.events[1]["status"] == "NOTFOUND" and topic.events[1]["max_lag_seconds"] is None
    finally:
        await s.publisher.stop()


async def test_a_group_whose_event_kafka_refused_is_evaluated_again_soon(kafka, redis_server, redis):
    s = Setup(kafka, redis_server, redis, [sub("slow", lag_seconds_threshold=60)])
    await s.caught_up_then_stuck("billing")
    await s.publisher.start()
    try:
        await s.evaluator().evaluate(["billing"], now_ms=s.t0 + 61 * S)  # over, published
    finally:
        await s.publisher.stop()
    await s.catch_up("billing", 200, s.t0 + 70 * S)
    report = await s.evaluator(DeadPublisher()).evaluate(["billing"], now_ms=s.t0 + 71 * S)
    assert report.lag_crossings == 1 and report.lag_events_published == 0  # back under: waits in the outbox
    # a caught-up group is otherwise due only at the sweep, minutes on; its event would wait that long
    assert report.next_at["billing"] <= s.t0 + 71 * S + OUTBOX_RETRY_MS


async def test_lag_threshold_events_waiting_for_kafka_are_said_until_it_takes_them(kafka, redis_server, redis):
    """The lag-threshold topic refuses while the status topic takes: the evaluator's gauge of how long events have
    waited for Kafka counts them too (LagwatchStatusEventsUnsent), and goes back to 0 once they are out."""
    s = Setup(kafka, redis_server, redis, [sub("slow", lag_seconds_threshold=60)])
    await s.caught_up_then_stuck("billing")
    await s.publisher.start()
    flaky = LagTopicAway(s.publisher)
    evaluator = s.evaluator(flaky)
    try:
        report = await evaluator.evaluate(["billing"], now_ms=s.t0 + 61 * S)
        assert (report.lag_crossings, report.lag_events_published) == (1, 0)
        await asyncio.sleep(0.5)
        await evaluator.evaluate(["billing"], now_ms=s.t0 + 62 * S)  # its retry, still refused
        assert unsent_seconds(CLUSTER) >= 0.5
        flaky.away = False
        report = await evaluator.evaluate(["billing"], now_ms=s.t0 + 63 * S)
        assert report.lag_events_published == 1 and unsent_seconds(CLUSTER) == 0.0
    finally:
        await s.publisher.stop()
