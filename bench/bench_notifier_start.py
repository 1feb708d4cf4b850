"""Notifier start-up: its first look at the subscriptions' scopes (services/notifier/scope_watch.py `ScopeWatch.check`),
with the subscriptions unchanged since the last look and, in the same run, with that look forgotten — what every start
did before the look was kept in Redis.

Setup: a fresh redis-server and the Kafka mock (in their own processes); `incidents` groups each with an ERR
incident going on, told to `subscriptions` webhook subscriptions from the configuration file (so each subscription
keeps a state per incident, and the incidents' latest events are kept for announcements). Then, each timed: a
notifier's first repeat tick after the look was recorded ("unchanged"), and the same after the record is deleted
("all", as before). Nothing is sent: no dispatcher runs.

    python bench/bench_notifier_start.py [incidents] [subscriptions]     # default 2000 x 20
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

from bench_notifier import STATUS_TOPIC, open_event  # type: ignore[import-not-found]

from lagwatch.devkit.mock_kafka import start_mock_kafka_process, stop_process
from lagwatch.devkit.redis_server import RedisServer
from lagwatch.services.notifier.events import STATUS_EVENTS
from lagwatch.services.notifier.service import NotifierService
from lagwatch.shared.events.status_event import encode
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.config import Config, SubscriptionConfig, load_config

CLUSTER = "local"


def _config(redis_url: str, bootstrap: str, subscriptions: int) -> Config:
    config = load_config(
        env={
            "REDIS_URL": redis_url,
            f"LAGWATCH__CLUSTERS__{CLUSTER}__BOOTSTRAP_SERVERS": bootstrap,
            "LAGWATCH__NOTIFIER__ALLOW_PRIVATE_TARGETS": "true",  # the subscriptions' URL: nothing is sent to it
        }
    )
    subs = [SubscriptionConfig(id=f"hook-{i}", url="http://127.0.0.1:9/") for i in range(subscriptions)]
    return dataclasses.replace(config, subscriptions=subs)


async def _first_tick(config: Config) -> float:
    """Seconds a fresh notifier's first repeat tick takes (its look at the scopes, and the repeats due)."""
    service = NotifierService(config, CLUSTER, http_port=0)
    try:
        started = time.perf_counter()
        await service.repeat_once()
        return time.perf_counter() - started
    finally:
        await service.redis.aclose()


def _quiet(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """The notifiers here are never started, so their Faust apps' producers are never closed: not worth a line."""
    if not str(context.get("message", "")).startswith("Unclosed AIOKafka"):
        loop.default_exception_handler(context)


async def measure(config: Config, incidents: int) -> dict:
    asyncio.get_running_loop().set_exception_handler(_quiet)
    seeding = NotifierService(config, CLUSTER, http_port=0)
    now = int(time.time() * 1000)
    try:
        for i in range(incidents):
            await seeding.handle(encode(open_event(f"group-{i:06d}", now)), STATUS_EVENTS)
            await seeding.redis.hset(keys.statuses_index(CLUSTER), f"group-{i:06d}", "ERR")
        await seeding.repeat_once()  # the first look, and the next tick's, which records it
        await seeding.repeat_once()
        unchanged = await _first_tick(config)
        await seeding.redis.delete(keys.NOTIFY_SCOPE_LOOKED)
        forgotten = await _first_tick(config)
    finally:
        await seeding.redis.aclose()
    return {"first_tick_unchanged_s": round(unchanged, 3), "first_tick_all_s": round(forgotten, 3)}


def run(incidents: int = 2000, subscriptions: int = 20) -> dict:
    with tempfile.TemporaryDirectory() as tmp, RedisServer() as redis:
        redis.start()
        kafka, control = start_mock_kafka_process(Path(tmp), {STATUS_TOPIC: 12, "lagwatch.dlq": 1})
        try:
            result = asyncio.run(measure(_config(redis.url, control.bootstrap, subscriptions), incidents))
        finally:
            stop_process(kafka)
    ratio = result["first_tick_all_s"] / max(result["first_tick_unchanged_s"], 1e-6)
    return {"incidents": incidents, "subscriptions": subscriptions, **result, "all_over_unchanged": round(ratio, 1)}


if __name__ == "__main__":  # [incidents] [subscriptions], as the docstring says
    for key, value in run(*(int(size) for size in sys.argv[1:3])).items():
        print(f"notifier start: {key}: {value}")
