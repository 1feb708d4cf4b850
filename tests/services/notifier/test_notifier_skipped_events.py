"""Events retention deleted before the notifier read them: counted on its /metrics, and the incidents they would
have opened or closed reconciled with the evaluator's stored statuses — a notifier (Faust, the Kafka mock) whose
committed position fell off the status topic's log (the mock keeps ~5 MB per partition: what is produced beyond
that deletes the oldest events), notifications at a real HTTP receiver, the evaluator's statuses written by its own
StatusStore."""

import dataclasses
import re
import time

import aiohttp
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from prometheus_client import REGISTRY

from lagwatch.services.notifier.service import CONSUMER_GROUP, NotifierService
from lagwatch.shared.events.status_event import Incident, encode, record_key
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.protocol.types import Status
from lagwatch.shared.runtime.config import SubscriptionConfig
from tests.kafka_helpers import FAST_NOTIFIER, eventually, make_config, running
from tests.services.notifier.test_notifier_support import CLUSTER, Receiver, Timeline

STATUS_TOPIC = "lagwatch.status"
FAST = {**FAST_NOTIFIER, "NOTIFIER__REPEAT_CHECK_INTERVAL": "0.1", "NOTIFIER__HTTP_PORT": "0"}
FILLER_EVENTS = 1000  # ~8.7 KB each: more than the mock keeps of a partition
HOUR_MS = 3_600_000
SKIPPED = re.compile(r'^lagwatch_notifier_events_skipped_total\{cluster="local",topic="lagwatch.status"\} (\S+)$', re.M)


def notifier_config(kafka, redis_server, receiver):
    return dataclasses.replace(
        make_config(kafka.bootstrap, redis_server.url, **FAST),
        subscriptions=[SubscriptionConfig(id="hook", url=receiver.url(), group_denylist="^filler-")],
    )


async def publish(bootstrap, events):
    async with AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_request_size=2**20) as producer:
        for event in events:
            await producer.send(STATUS_TOPIC, encode(event), key=record_key(event["cluster"], event["group"]))
        await producer.flush()


async def evaluated(store, *events):
    """What the evaluator stores for each transition before it publishes it, its event then acknowledged."""
    for event in events:
        bad = event["status"] not in ("OK", "NOTFOUND")
        keeps = Incident(event["incident_id"], event["incident_started_at"]) if bad else Incident(None, None)
        raw = encode(event)
        status, seq, at = Status[event["status"]], event["seq"], event["evaluated_at"]
        assert await store.transition(
            CLUSTER, event["group"], expected_seq=seq - 1, status=status, keeps=keeps, event=raw, now_ms=at
        )
        await store.acknowledge(CLUSTER, event["group"], [raw])


async def committed(bootstrap, partition=0):
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=CONSUMER_GROUP, enable_auto_commit=False)
    await consumer.start()
    try:
        return await consumer.committed(TopicPartition(STATUS_TOPIC, partition))
    finally:
        await consumer.stop()


async def log_bounds(bootstrap, partition=0):
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        tp = TopicPartition(STATUS_TOPIC, partition)
        return (await consumer.beginning_offsets([tp]))[tp], (await consumer.end_offsets([tp]))[tp]
    finally:
        await consumer.stop()


async def skipped_on_metrics(service) -> float:
    """The skipped events the notifier's /metrics counts for the status topic (once its health server listens)."""
    await eventually(lambda: _listening(service))
    async with aiohttp.ClientSession() as http, http.get(service.health.url + "/metrics") as response:
        found = SKIPPED.search(await response.text())
    assert found, "no lagwatch_notifier_events_skipped_total for the status topic on the notifier's /metrics"
    return float(found.group(1))


async def _listening(service):
    return not service.health.url.endswith(":0")


def skipped_so_far() -> float:
    """The same counter before a notifier starts (one process: counters add up over the tests)."""
    labels = {"cluster": CLUSTER, "topic": STATUS_TOPIC}
    return REGISTRY.get_sample_value("lagwatch_notifier_events_skipped_total", labels) or 0.0


def fillers(count):
    """Events of groups no subscription takes, big enough that retention soon deletes what came before."""
    return [Timeline(f"filler-{i}").to("WARN", tuple(range(1, 41))) for i in range(count)]


def received(receiver, group):
    return [
        (r.headers["X-Lagwatch-Notification"], r.headers.get("X-Lagwatch-Reason"), r.json()["incident_id"])
        for r in receiver.requests
        if r.json()["group"] == group
    ]


async def test_a_notifier_whose_position_fell_off_the_log_counts_what_it_skipped_and_reconciles(
    kafka, redis_server, redis
):
    kafka.create_topic(STATUS_TOPIC, 1)
    store = StatusStore(redis, expire_group_ms=HOUR_MS)
    past = int(time.time() * 1000) - HOUR_MS  # the evaluations happened before the notifier came back
    billing, payments = Timeline("billing", start_ms=past), Timeline("payments", start_ms=past)
    async with Receiver() as receiver:
        config = notifier_config(kafka, redis_server, receiver)
        before = [billing.to("OK"), billing.to("WARN", (50, 0)), payments.to("OK")]
        await evaluated(store, *before)
        async with running(NotifierService(config, CLUSTER, http_port=0)):
            await publish(kafka.bootstrap, before)
            await receiver.wait_for(1, timeout=30)  # billing's open
            await eventually(lambda: _committed_is(kafka.bootstrap, 3), timeout=30)
        # while the notifier is down: billing's incident closes, payments' opens, and retention deletes both events
        opened = before[1]["incident_id"]
        lost = [billing.to("OK"), payments.to("ERR", (0, 900))]
        await evaluated(store, *lost)
        await publish(kafka.bootstrap, lost)
        await publish(kafka.bootstrap, fillers(FILLER_EVENTS))
        log_start, _ = await log_bounds(kafka.bootstrap)
        assert log_start > 5  # the mock deleted them

        counted_before = skipped_so_far()
        async with running(NotifierService(config, CLUSTER, http_port=0)) as service:
            await receiver.wait_for(3, timeout=60)  # billing's close and payments' open, reconciled
            assert await skipped_on_metrics(service) - counted_before == log_start - 3
    assert received(receiver, "billing") == [("open", None, opened), ("close", "reconciled", opened)]
    assert received(receiver, "payments") == [("open", "reconciled", lost[1]["incident_id"])]
    close = receiver.requests[1].json()
    assert (close["status"], close["incident_started_at"]) == ("OK", before[1]["incident_started_at"])


async def _committed_is(bootstrap, offset):
    return await committed(bootstrap) == offset


async def test_an_event_of_a_new_incident_first_closes_the_announced_one_whose_close_was_missed(
    kafka, redis_server, redis
):
    kafka.create_topic(STATUS_TOPIC, 1)
    billing = Timeline("billing")
    first = [billing.to("OK"), billing.to("WARN", (50, 0))]
    billing.to("OK")  # never read: retention took it, say
    again = billing.to("ERR", (0, 900))
    async with Receiver() as receiver:
        service = NotifierService(notifier_config(kafka, redis_server, receiver), CLUSTER, http_port=0)
        async with running(service):
            await publish(kafka.bootstrap, [*first, again])
            await receiver.wait_for(3, timeout=30)
    old, new = first[1]["incident_id"], again["incident_id"]
    assert received(receiver, "billing") == [("open", None, old), ("close", "reconciled", old), ("open", None, new)]


async def test_a_position_beyond_the_log_end_reads_on_from_the_end_and_reconciles(kafka, redis_server, redis):
    """The topic was made anew (or truncated) while the notifier's committed position stayed: nothing was deleted
    unread that can be counted; reading goes on at the log end (not the log start: every old incident would be
    announced again), and the groups are reconciled."""
    kafka.create_topic(STATUS_TOPIC, 1)
    store = StatusStore(redis, expire_group_ms=HOUR_MS)
    orders = Timeline("orders", start_ms=int(time.time() * 1000) - HOUR_MS)
    old = [orders.to("OK"), orders.to("ERR", (0, 700))]
    await evaluated(store, *old)
    await publish(kafka.bootstrap, old)
    await commit(kafka.bootstrap, 1000)
    billing = Timeline("billing")
    async with Receiver() as receiver:
        counted_before = skipped_so_far()
        async with running(NotifierService(notifier_config(kafka, redis_server, receiver), CLUSTER, http_port=0)) as s:
            await receiver.wait_for(1, timeout=30)  # orders' ERR, told by the reconciliation
            await publish(kafka.bootstrap, [billing.to("OK"), billing.to("WARN", (50, 0))])
            await receiver.wait_for(2, timeout=30)
            assert await skipped_on_metrics(s) == counted_before
    assert received(receiver, "orders") == [("open", "reconciled", old[1]["incident_id"])]  # not its events again
    assert [r.json()["group"] for r in receiver.requests] == ["orders", "billing"]


async def commit(bootstrap, offset, partition=0):
    """Commit a position for the notifier's group as a consumer with no group membership does (before any joined)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=CONSUMER_GROUP, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(STATUS_TOPIC, partition)
        consumer.assign([tp])
        await consumer.commit({tp: offset})
    finally:
        await consumer.stop()
