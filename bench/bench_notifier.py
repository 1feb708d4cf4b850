"""Notifier: notifications per second to a local receiver, and the latency the notifier adds (event on the status
topic -> HTTP request received), p50/p99.

Setup: the Kafka mock cluster in its own process, a fresh redis-server, `lagwatch run notifier` as a process with
one webhook subscription (a signed webhook to an aiohttp receiver in this process, which answers 200 at once). The
bursts begin once the notifier has completed its look at the new subscription's scope (its first ticks), which scans
every incident going on and would otherwise be timed with whichever burst it fell in.
* Throughput: `events` status-change events (each a group going OK -> ERR, so each is an `open` notification) are
  published in one burst; notifications/s = events / (last request received - first event published).
* Quiet events: `events` first statuses (NOTFOUND -> OK: a new group, which notifies nobody) in one burst, then
  one `open` event behind them; quiet events/s = events / (its notification received - first event published).
  This is the pace at which a flood of new groups passes through the notifier ahead of a real alert.
* Latency: `probes` more events, one at a time: time from just before the producer sends the event to the request
  arriving at the receiver (Kafka fetch + Faust agent + outbox in Redis + claim + HTTP). The Kafka mock answers a
  fetch only when its wait (100 ms, lagwatch's setting) is over, so a bare consumer of the same events is timed
  too, and the difference is what the notifier adds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from redis.asyncio import Redis

from lagwatch.devkit.mock_kafka import start_mock_kafka_process, stop_process
from lagwatch.devkit.redis_server import RedisServer
from lagwatch.shared.events.status_event import Incident, StatusEvent, build_event, encode, new_incident_id, record_key
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import GroupStatus, OffsetEntry, PartitionStatus, Status

CLUSTER = "local"
STATUS_TOPIC = "lagwatch.status"


class Receiver:
    def __init__(self) -> None:
        self.arrivals: dict[str, float] = {}  # group -> when its request arrived
        self.count = 0
        self.changed = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.arrivals[json.loads(body)["group"]] = time.perf_counter()
        self.count += 1
        self.changed.set()
        return web.Response(text="ok")

    async def start(self) -> web.AppRunner:
        app = web.Application()
        app.router.add_post("/hook", self.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = runner.addresses[0][1]
        return runner

    async def until(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.count < n:
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(f"only {self.count} of {n} notifications arrived within {timeout}s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)


class KafkaArrivals:
    """A bare consumer of the status topic (fetch wait 100 ms, as the notifier's): when each group's event arrives."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = AIOKafkaConsumer(
            STATUS_TOPIC, bootstrap_servers=bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=100
        )
        self.seen: dict[str, float] = {}

    async def __aenter__(self) -> KafkaArrivals:
        await self.consumer.start()
        while not self.consumer.assignment():
            await asyncio.sleep(0.05)
        for tp in self.consumer.assignment():
            await self.consumer.position(tp)  # settle "latest" before the first probe is sent
        self.task = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc) -> None:
        self.task.cancel()
        await self.consumer.stop()

    async def _read(self) -> None:
        async for message in self.consumer:
            self.seen[message.key.decode().split("/", 1)[1]] = time.perf_counter()

    async def arrival(self, group: str, timeout: float = 30) -> float:
        deadline = time.monotonic() + timeout
        while group not in self.seen:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the bare consumer never saw {group}")
            await asyncio.sleep(0.001)
        return self.seen[group]


def open_event(group: str, now_ms: int) -> StatusEvent:
    """A group going OK -> ERR (stalled): an `open` notification."""
    return _event(group, now_ms, Status.STALL, lag=500, seq=2, previous=Status.OK)


def first_status_event(group: str, now_ms: int) -> StatusEvent:
    """A new group's first status, NOTFOUND -> OK: it notifies nobody."""
    return _event(group, now_ms, Status.OK, lag=0, seq=1, previous=Status.NOTFOUND)


def _event(group: str, now_ms: int, partition_status: Status, *, lag: int, seq: int, previous: Status) -> StatusEvent:
    entry = OffsetEntry(10, now_ms)
    part = PartitionStatus("orders", 0, partition_status, entry, entry, lag, 1.0)
    status = GroupStatus(CLUSTER, group, partition_status.as_group_status(), 1.0, (part,), part, lag)
    incident = Incident(new_incident_id(CLUSTER, group, seq), now_ms)
    return build_event(
        cluster=CLUSTER,
        group=group,
        seq=seq,
        previous=previous,
        group_status=status,
        incident=incident,
        evaluated_at=now_ms,
    )


async def scope_looked(redis_url: str, subscription_id: str, timeout: float = 60) -> None:
    """Until the notifier's look at a new subscription's scope is complete (it looks twice, on its first ticks: the
    service's scope watch, `ScopeWatch.check`): a look scans every incident going on, so one running during a burst
    would be timed with it."""
    deadline = time.monotonic() + timeout
    async with Redis.from_url(redis_url) as redis:
        while not await redis.hexists(keys.NOTIFY_SCOPE_LOOKED, subscription_id):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the notifier never completed its look at {subscription_id}")
            await asyncio.sleep(0.05)


def notifier_process(config: Path, env: dict) -> subprocess.Popen:
    lagwatch = Path(sys.executable).parent / "lagwatch"
    log = Path(tempfile.gettempdir()) / "lagwatch-bench-notifier.log"
    return subprocess.Popen(
        [str(lagwatch), "run", "notifier", "--config", str(config), "--http-port", "0", "--log-level", "WARNING"],
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )


async def measure(bootstrap: str, config_dir: Path, env: dict, events: int, probes: int) -> dict:
    receiver = Receiver()
    runner = await receiver.start()
    config = config_dir / "notifier.yaml"
    config.write_text(
        json.dumps(
            {
                "notifier": {"allow-private-targets": True, "per-host-concurrency": 32, "per-host-queue": 2000},
                "subscriptions": [
                    {"id": "bench", "url": f"http://127.0.0.1:{receiver.port}/hook", "secret": "bench-secret-0123"}
                ],
            }
        )
    )
    proc = notifier_process(config, env)
    try:
        async with AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
            # warm-up: the notifier has joined its group once a first notification arrives
            await producer.send_and_wait(STATUS_TOPIC, encode(open_event("warmup", _ms())), key=b"local/warmup")
            await receiver.until(1, timeout=120)
            await scope_looked(env["REDIS_URL"], "bench")

            now = _ms()
            batch = [open_event(f"group-{i}", now) for i in range(events)]
            start = time.perf_counter()
            for event in batch:
                await producer.send(STATUS_TOPIC, encode(event), key=record_key(CLUSTER, event.group))
            await producer.flush()
            await receiver.until(1 + events, timeout=600)
            burst = max(receiver.arrivals[e.group] for e in batch) - start

            now = _ms()
            quiet = [first_status_event(f"new-{i}", now) for i in range(events)]
            start = time.perf_counter()
            for event in quiet:
                await producer.send(STATUS_TOPIC, encode(event), key=record_key(CLUSTER, event.group))
            marker = open_event("behind-the-new", now)
            await producer.send(STATUS_TOPIC, encode(marker), key=record_key(CLUSTER, marker.group))
            await producer.flush()
            await receiver.until(2 + events, timeout=600)
            quiet_seconds = receiver.arrivals[marker.group] - start

            latencies, floor = [], []
            async with KafkaArrivals(bootstrap) as kafka_only:
                for i in range(probes):
                    group = f"probe-{i}"
                    sent = time.perf_counter()
                    await producer.send_and_wait(
                        STATUS_TOPIC, encode(open_event(group, _ms())), key=f"local/{group}".encode()
                    )
                    await receiver.until(2 + events + i + 1, timeout=60)
                    latencies.append(receiver.arrivals[group] - sent)
                    floor.append(await kafka_only.arrival(group) - sent)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        await runner.cleanup()
    latencies.sort()
    floor.sort()
    added = sorted(a - b for a, b in zip(latencies, floor, strict=True))
    return {
        "notifications_per_second": round(events / burst),
        "burst_seconds": round(burst, 2),
        "quiet_events_per_second": round(events / quiet_seconds),
        "latency_p50_ms": round(statistics.median(latencies) * 1000, 1),
        "latency_p99_ms": round(latencies[max(0, int(len(latencies) * 0.99) - 1)] * 1000, 1),
        "latency_max_ms": round(latencies[-1] * 1000, 1),
        # the same events read by a bare aiokafka consumer (same 100 ms fetch wait): what the Kafka mock costs
        "kafka_only_p50_ms": round(statistics.median(floor) * 1000, 1),
        "added_by_notifier_p50_ms": round(statistics.median(added) * 1000, 1),
        "added_by_notifier_p99_ms": round(added[max(0, int(len(added) * 0.99) - 1)] * 1000, 1),
    }


def _ms() -> int:
    return int(time.time() * 1000)


def run(events: int = 2000, probes: int = 200) -> dict:
    with tempfile.TemporaryDirectory() as tmp, RedisServer() as redis:
        redis.start()
        kafka, control = start_mock_kafka_process(Path(tmp), {STATUS_TOPIC: 12, "lagwatch.dlq": 1})
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAGWATCH")}
        env.update(REDIS_URL=redis.url, KAFKA_BOOTSTRAP_SERVERS=control.bootstrap)
        try:
            result = asyncio.run(measure(control.bootstrap, Path(tmp), env, events, probes))
        finally:
            stop_process(kafka)
    return {"events": events, "probes": probes, **result}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("events", type=int, nargs="?", default=2000, help="events in the burst (default 2000)")
    parser.add_argument("probes", type=int, nargs="?", default=200, help="events timed one by one (default 200)")
    options = parser.parse_args()
    for key, value in run(options.events, options.probes).items():
        print(f"notifier: {key}: {value}")
