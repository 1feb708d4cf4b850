"""A lag-seconds threshold end to end: ingest, evaluator and notifier against the Kafka mock and a real Redis. A
consumer that stops while messages keep arriving raises "lag above 3 s" at a local HTTP receiver while Burrow's
rules still say OK, and "back under 3 s" when it catches up; a subscription without the threshold hears nothing."""

import asyncio
import contextlib
import dataclasses
import time

from faust.exceptions import ConsumerNotStarted

from lagwatch.devkit.offsets_topic_writer import OffsetCommitSpec, OffsetsTopicWriter
from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.services.notifier.service import NotifierService
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.runtime.config import SubscriptionConfig
from tests.kafka_helpers import CLUSTER, eventually, in_background, make_config, produce, running
from tests.services.notifier.test_notifier_service import FAST
from tests.services.notifier.test_notifier_support import Receiver

THRESHOLD_S = 3


@contextlib.asynccontextmanager
async def producing(bootstrap, topic, every_s=0.2):
    """A producer that keeps writing to the topic until the block ends."""

    async def loop():
        while True:
            await produce(bootstrap, topic, {0: 2})
            await asyncio.sleep(every_s)

    async with in_background(loop):
        yield


async def test_a_stopped_consumer_raises_the_lag_alert_while_burrow_says_ok_and_closes_it(kafka, redis_server):
    for topic, partitions in [("orders", 1), ("lagwatch.changes", 2), ("lagwatch.status", 2)]:
        kafka.create_topic(topic, partitions)
    kafka.create_topic("lagwatch.lag-thresholds", 2)
    async with Receiver() as receiver:
        config = dataclasses.replace(
            make_config(kafka.bootstrap, redis_server.url, **FAST, EVALUATOR__SWEEP_INTERVAL="0.3"),
            subscriptions=[
                SubscriptionConfig(id="lag", url=receiver.url("/lag"), lag_seconds_threshold=THRESHOLD_S),
                SubscriptionConfig(id="lag-slack", type="slack", url=receiver.url("/slack"), lag_seconds_threshold=3),
                SubscriptionConfig(id="plain", url=receiver.url("/plain")),
            ],
        )
        async with (
            OffsetsTopicWriter(kafka.bootstrap) as writer,
            running(IngestWorker(config, CLUSTER)),
            running(EvaluatorService(config, CLUSTER, http_port=0)) as evaluator,
            running(NotifierService(config, CLUSTER, http_port=0)),
        ):
            await eventually(lambda: _assigned(evaluator))
            await produce(kafka.bootstrap, "orders", {0: 10})
            await asyncio.sleep(1.0)  # a few log-end polls: the history knows when the log end reached 10
            now = int(time.time() * 1000)  # caught up; the window spans a minute, so Burrow will not STOP soon
            await writer.commits(
                [OffsetCommitSpec("billing", "orders", 0, 10, timestamp=t) for t in (now - 60_000, now)]
            )
            statuses = StatusStore(evaluator.redis, config.window().expire_group_ms)
            await eventually(lambda: _status(statuses, "OK"))
            async with producing(kafka.bootstrap, "orders"):  # the consumer has stopped; messages keep coming
                alerts = {r.path: r for r in await receiver.wait_for(2, timeout=30)}
                assert await _status(statuses, "OK")  # Burrow's rules: still OK
            body = alerts["/lag"].json()
            assert alerts["/lag"].headers["X-Lagwatch-Notification"] == "lag-open"
            assert body["above"] is True and body["threshold_seconds"] == THRESHOLD_S and body["status"] == "OK"
            assert body["max_lag_seconds"] > THRESHOLD_S and body["partitions"][0]["current_lag"] > 0
            assert alerts["/slack"].json()["text"] == ":hourglass_flowing_sand: Lag above 3 s: billing on local"
            await asyncio.sleep(1.0)  # the producer has stopped: let the poller see the final log end
            await writer.commit("billing", "orders", 0, await _log_end(evaluator, "orders"))  # caught up again
            await receiver.wait_for(4, timeout=30)
            await asyncio.sleep(1.0)  # a few more sweeps: nothing else may be sent
    by_path = [(r.path, r.headers["X-Lagwatch-Notification"]) for r in receiver.requests]
    assert sorted(by_path) == [
        ("/lag", "lag-close"),
        ("/lag", "lag-open"),
        ("/slack", "lag-close"),
        ("/slack", "lag-open"),
    ]
    closed = next(
        r for r in receiver.requests if r.path == "/lag" and r.headers["X-Lagwatch-Notification"] == "lag-close"
    )
    assert closed.json()["above"] is False and closed.json()["incident_id"] == body["incident_id"]
    assert closed.json()["max_lag_seconds"] <= THRESHOLD_S
    assert not any(r.path == "/plain" for r in receiver.requests)  # no threshold, and Burrow never left OK


async def _assigned(evaluator):
    try:
        return evaluator.owned_partitions() is not None
    except ConsumerNotStarted:
        return False


async def _status(statuses, expected):
    [state] = await statuses.states(CLUSTER, ["billing"])
    return state.status.name == expected and state.seq == 1  # OK since the first evaluation, never anything else


async def _log_end(evaluator, topic):
    return (await evaluator.store.reads.latest_broker_offsets(CLUSTER, [(topic, 0)]))[(topic, 0)]
