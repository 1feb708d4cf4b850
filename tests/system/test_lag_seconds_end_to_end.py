"""Lag in seconds end to end: a consumer that pauses shows the pause (± a poll) in the API and the metrics;
a caught-up consumer of a quiet topic shows 0. The metrics come from the evaluator's ready results, so the
evaluator runs too (the ingest's change and log-end notices reach it)."""

import asyncio
import time

import aiohttp

from lagwatch.devkit.offsets_topic_writer import OffsetsTopicWriter
from lagwatch.services.api.service import ApiServer
from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.services.ingest.service import IngestWorker
from tests.kafka_helpers import CLUSTER, eventually, make_config, produce, running

POLL_S = 0.3  # offset-refresh in make_config


async def lag_of(http, api, group):
    async with http.get(f"{api.url}/v3/kafka/{CLUSTER}/consumer/{group}/lag") as response:
        body = await response.json()
    return body["status"] if response.status == 200 else None


async def test_a_paused_consumer_shows_its_pause_and_a_quiet_caught_up_one_shows_zero(kafka, redis_server):
    kafka.create_topic("orders", 1)
    kafka.create_topic("audit", 1)
    kafka.create_topic("lagwatch.changes", 4)
    kafka.create_topic("lagwatch.status", 3)
    config = make_config(kafka.bootstrap, redis_server.url)
    async with (
        OffsetsTopicWriter(kafka.bootstrap) as writer,
        running(IngestWorker(config, CLUSTER)),
        running(EvaluatorService(config, CLUSTER, http_port=0)),
        running(ApiServer(config, port=0)) as api,
        aiohttp.ClientSession() as http,
    ):
        await api.started.wait()
        await produce(kafka.bootstrap, "audit", {0: 5})
        await produce(kafka.bootstrap, "orders", {0: 10})
        await asyncio.sleep(3 * POLL_S)
        await writer.commit("archiver", "audit", 0, 5)  # caught up; the topic then stays quiet
        await writer.commit("billing", "orders", 0, 10)  # caught up ...
        for group in ("archiver", "billing"):  # in different offsets-topic partitions: read in either order
            await eventually(lambda group=group: lag_of(http, api, group))
        await asyncio.sleep(3 * POLL_S)
        produced_at = time.time()
        await produce(kafka.bootstrap, "orders", {0: 10})  # ... and now it pauses while messages arrive
        await asyncio.sleep(3)
        paused = time.time() - produced_at
        status = await lag_of(http, api, "billing")
        paused_by_answer = time.time() - produced_at  # the answer is the pause as of the request
        [part] = status["partitions"]
        assert part["current_lag"] == 10
        api_seconds = part["current_lag_seconds"]
        assert paused - (POLL_S + 0.5) <= api_seconds <= paused_by_answer + POLL_S + 0.5, (api_seconds, paused)
        assert part["current_lag_seconds_lower_bound"] is False
        assert status["max_lag_seconds"] == part["current_lag_seconds"]
        quiet = await lag_of(http, api, "archiver")
        assert quiet["partitions"][0]["current_lag_seconds"] == 0 and quiet["max_lag_seconds"] == 0
        async with http.get(f"{api.url}/metrics") as response:
            metrics = await response.text()
        paused_by_scrape = time.time() - produced_at  # the metric is the pause as of the scrape (can take a while)
        line = next(
            m
            for m in metrics.splitlines()
            if m.startswith("lagwatch_consumer_lag_seconds{") and 'consumer_group="billing"' in m
        )
        metric_seconds = float(line.split()[-1])
        assert paused - (POLL_S + 1.0) <= metric_seconds <= paused_by_scrape + POLL_S + 1.0, (metric_seconds, paused)
        assert 'lagwatch_consumer_group_max_lag_seconds{cluster="local",consumer_group="archiver"} 0.0' in metrics
