"""The data-loss-risk and messages-skipped alerts end to end: the Kafka mock deletes a partition's oldest batches
once it holds about 5 MB, so a topic produced to fast behind a consumer that stopped really loses messages. The
ingest polls the log start as it moves, the evaluator sees retention closing in on the committed offset ("deleted
unread within 8 s": data-loss-risk) and then passing it (messages-skipped, with how many), and the notifier tells a
local HTTP receiver — webhook and Slack — and closes both when the consumer catches up. A subscription with only a
lag-seconds threshold hears none of it."""

import asyncio
import contextlib
import dataclasses
import time

from aiokafka import AIOKafkaProducer
from prometheus_client import REGISTRY

from lagwatch.devkit.offsets_topic_writer import OffsetCommitSpec, OffsetsTopicWriter
from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.services.notifier.service import NotifierService
from lagwatch.shared.runtime.config import SubscriptionConfig
from tests.kafka_helpers import CLUSTER, eventually, in_background, make_config, running
from tests.services.notifier.test_notifier_service import FAST
from tests.services.notifier.test_notifier_support import Receiver
from tests.system.test_lag_threshold_end_to_end import _assigned, _log_end

RISK_S = 8
PAYLOAD = b"x" * 2000  # 2,400 of these fill the mock's ~5 MB: from then on each new batch deletes the oldest
COMMITTED = 1200


@contextlib.asynccontextmanager
async def producing(bootstrap, topic, per_second=100):
    """A producer writing `per_second` 2 kB messages to partition 0 until the block ends."""
    async with AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0) as producer:

        async def loop():
            while True:
                for _ in range(per_second // 10):
                    await producer.send(topic, PAYLOAD, partition=0)
                await asyncio.sleep(0.1)

        try:
            async with in_background(loop):
                yield
        finally:
            await producer.flush()


async def fill(bootstrap, topic, n):
    async with AIOKafkaProducer(bootstrap_servers=bootstrap) as producer:
        for _ in range(n):
            await producer.send(topic, PAYLOAD, partition=0)
        await producer.flush()


def _log_start_evaluations():
    labels = {"cluster": CLUSTER, "trigger": "log-start"}
    return REGISTRY.get_sample_value("lagwatch_evaluations_total", labels) or 0


def _alert(request):
    """A lag-threshold notification (the others are Burrow's status changes: the stopped consumer goes ERR)."""
    return request.headers["X-Lagwatch-Notification"].startswith("lag-")


async def _alerts(receiver, kind, n):
    return len([r for r in receiver.requests if r.headers["X-Lagwatch-Notification"] == kind]) >= n


def by_alert(requests, path, kind):
    return {
        r.json()["alert"]: r.json() for r in requests if r.path == path and r.headers["X-Lagwatch-Notification"] == kind
    }


async def test_retention_deleting_behind_a_stopped_consumer_raises_data_loss_risk_then_messages_skipped(
    kafka, redis_server
):
    before = _log_start_evaluations()
    kafka.create_topic("orders", 1)
    for topic in ("lagwatch.changes", "lagwatch.status", "lagwatch.lag-thresholds"):
        kafka.create_topic(topic, 2)
    async with Receiver() as receiver:
        config = dataclasses.replace(
            make_config(kafka.bootstrap, redis_server.url, **FAST, EVALUATOR__SWEEP_INTERVAL="30"),
            subscriptions=[
                SubscriptionConfig(id="risk", url=receiver.url("/risk"), retention_risk_threshold=RISK_S),
                SubscriptionConfig(
                    id="risk-slack", type="slack", url=receiver.url("/slack"), retention_risk_threshold=RISK_S
                ),
                SubscriptionConfig(id="lag-only", url=receiver.url("/lag"), lag_seconds_threshold=3600),
            ],
        )
        async with (
            OffsetsTopicWriter(kafka.bootstrap) as writer,
            running_all(config) as evaluator,
        ):
            await eventually(lambda: _assigned(evaluator))
            await fill(kafka.bootstrap, "orders", 2400)
            await asyncio.sleep(1.0)  # the poller sees the log end and the log start (still 0)
            now = int(time.time() * 1000)  # read up to 1,200, then stopped
            await writer.commits(
                [OffsetCommitSpec("billing", "orders", 0, COMMITTED, timestamp=t) for t in (now - 60_000, now)]
            )
            async with producing(kafka.bootstrap, "orders"):  # ~100 msg/s: the log start moves ~100 msg/s too
                await eventually(lambda: _alerts(receiver, "lag-open", 4), timeout=60)
            opened = by_alert(receiver.requests, "/risk", "lag-open")
            slack = sorted(r.json()["text"] for r in receiver.requests if r.path == "/slack" and _alert(r))
            await asyncio.sleep(1.0)  # the producer has stopped: let the poller see the final log end
            await writer.commit("billing", "orders", 0, await _log_end(evaluator, "orders"))  # caught up again
            await eventually(lambda: _alerts(receiver, "lag-close", 4), timeout=30)
            await asyncio.sleep(1.0)  # a few more polls: nothing else may be sent

    assert set(opened) == {"data-loss-risk", "messages-skipped"}
    risk, skipped = opened["data-loss-risk"], opened["messages-skipped"]
    assert risk["above"] is True and risk["threshold_seconds"] == RISK_S
    assert 0 <= risk["retention_risk_seconds"] < RISK_S and risk["skipped_messages"] == 0
    assert [p["partition"] for p in risk["partitions"]] == [0]
    assert skipped["above"] is True and skipped["skipped_messages"] > 0
    assert skipped["partitions"][0]["skipped_messages"] == skipped["skipped_messages"]
    assert skipped["explanation"]["code"] == "messages-skipped"
    assert slack[0] == ":warning: At risk: retention deletes unread messages within 8 s: billing on local"
    assert slack[1].startswith(":x: Lost: ") and slack[1].endswith("messages deleted before consumed: billing on local")
    closed = by_alert(receiver.requests, "/risk", "lag-close")
    assert set(closed) == {"data-loss-risk", "messages-skipped"}
    assert closed["data-loss-risk"]["incident_id"] == risk["incident_id"]
    assert closed["messages-skipped"]["incident_id"] == skipped["incident_id"]
    assert closed["messages-skipped"]["skipped_messages"] == 0
    assert len([r for r in receiver.requests if _alert(r)]) == 8  # open and close of both, webhook and Slack, once
    assert not any(r.path == "/lag" and _alert(r) for r in receiver.requests)  # lag-seconds only: never an hour
    # the poller's log-start notices had the evaluator re-check the group as retention moved (the sweep is 30 s)
    assert _log_start_evaluations() > before


@contextlib.asynccontextmanager
async def running_all(config):
    """Ingest, evaluator and notifier; yields the evaluator."""
    async with (
        running(IngestWorker(config, CLUSTER)),
        running(EvaluatorService(config, CLUSTER, http_port=0)) as evaluator,
        running(NotifierService(config, CLUSTER, http_port=0)),
    ):
        yield evaluator
