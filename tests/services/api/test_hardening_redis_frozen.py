"""Issue 18 row 10: a frozen Redis (SIGSTOP: it accepts connections and never answers) is an error, not a hang.

While Redis is stopped the api answers reads with a 503 JSON error and every service's `/readyz` answers "not
ready" within seconds; once it continues, everything is ready again and the ingest's bulk writer — which sends a
whole batch down one pooled connection — has retried its batch and stored it.
"""

import asyncio
import os
import signal
import time

import aiohttp

from lagwatch.devkit.offsets_topic_writer import OffsetsTopicWriter
from lagwatch.devkit.redis_server import RedisServer
from lagwatch.services.api.service import ApiServer
from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.services.notifier.service import NotifierService
from lagwatch.shared.runtime.redis_client import connect
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, running

# What a prober waits for an answer (Kubernetes' default is 1 s; the issue asked for 5 s): a hang fails the test.
PROBE_TIMEOUT_S = 8.0


async def answer(http, url):
    """(status, JSON body) of a GET, or an AssertionError when no answer comes within PROBE_TIMEOUT_S."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            async with http.get(url) as response:
                return response.status, await response.json()
    except TimeoutError:
        raise AssertionError(f"no answer from {url} within {PROBE_TIMEOUT_S}s") from None


async def ready(http, url):
    status, _ = await answer(http, url)
    return status == 200


async def test_a_frozen_redis_gives_503_and_unready_services_within_seconds_then_recovers(kafka):
    for topic, partitions in (("lagwatch.status", 3), ("lagwatch.changes", 4), ("lagwatch.dlq", 1), ("orders", 1)):
        kafka.create_topic(topic, partitions)
    with RedisServer() as own_redis:
        own_redis.start()
        config = make_config(kafka.bootstrap, own_redis.url, NOTIFIER__ALLOW_PRIVATE_TARGETS="true")
        ingest = IngestWorker(config, CLUSTER, http_port=0)
        evaluator = EvaluatorService(config, CLUSTER, http_port=0)
        notifier = NotifierService(config, CLUSTER, http_port=0)
        async with (
            aiohttp.ClientSession() as http,
            running(ApiServer(config, port=0)) as api,
            running(ingest),
            running(evaluator),
            running(notifier),
            OffsetsTopicWriter(kafka.bootstrap) as writer,
        ):
            await asyncio.wait_for(api.started.wait(), 10)
            services = {"api": api.url, **{s.health.service: s.health.url for s in (ingest, evaluator, notifier)}}
            for url in services.values():
                await eventually(lambda u=url: ready(http, f"{u}/readyz"), timeout=90, interval=0.5)
            now = int(time.time() * 1000)
            await writer.commit("billing", "orders", 0, 1, timestamp=now)
            consumer = f"{api.url}/v3/kafka/{CLUSTER}/consumer/billing"
            await eventually(lambda: _status_is(http, consumer, 200), timeout=30)

            os.kill(own_redis.pid, signal.SIGSTOP)
            try:
                await writer.commit("billing", "orders", 0, 2, timestamp=now + 1000)  # the ingest's write waits
                for path in (f"/v3/kafka/{CLUSTER}/consumer", "/v3/kafka/local/consumer/billing/lag"):
                    status, body = await answer(http, f"{api.url}{path}")
                    assert (status, body["error"]) == (503, True), (path, body)
                for name, url in services.items():
                    status, body = await answer(http, f"{url}/readyz")
                    assert (status, body["ready"], body["checks"]["redis"]) == (503, False, False), name
            finally:
                os.kill(own_redis.pid, signal.SIGCONT)

            for url in services.values():
                await eventually(lambda u=url: ready(http, f"{u}/readyz"), timeout=60, interval=0.5)
            store = WindowStore(connect(config.redis), config.window())
            try:  # the batch written while Redis was frozen was retried and stored
                await eventually(lambda: _newest_offset(store, "billing", 2), timeout=30)
            finally:
                await store.redis.aclose()
            assert (await answer(http, consumer))[0] == 200


async def _status_is(http, url, wanted):
    return (await answer(http, url))[0] == wanted


async def _newest_offset(store, group, offset):
    stored = await store.reads.get_group(CLUSTER, group)
    return stored is not None and stored.partitions[0].entries[-1].offset == offset
