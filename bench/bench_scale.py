"""Watching many partitions: idle cost, STOP detection delay, /metrics, cold start.

Setup per size: a fresh redis-server, the Kafka mock cluster in its own process, windows for G groups x 4
partitions seeded straight into Redis through the window store (10 commits each, every partition caught up and
quiet: no new commits, log ends still), then `lagwatch run evaluator` and `lagwatch run api` as processes with
default settings. Printed, for 25k and 100k partitions:

* cold start: seconds from starting the evaluator until every group has a ready result (its first status), and
  until every group also has its lag sparkline (drawn after the statuses; the idle measurement starts after that);
* idle CPU: the evaluator's and redis-server's CPU while nothing changes (% of one core, over `IDLE_S`);
* STOP delay: PROBES groups get windows whose STOP rule turns true at known instants a few seconds ahead (a lag, a
  log end already past the newest commit in every sample); delay = when the ERR event is read from the status
  topic minus the instant; p50/p99/max;
* /metrics: seconds and bytes of `GET /metrics` over HTTP (the first scrape starts the api's scrape process: shown
  apart), and its samples;
* restart: RESTART_PROBES more groups whose STOP the running evaluator schedules, then it stops (SIGTERM) and its
  instants pass while none runs; a new evaluator starts: seconds from its start to the first and to the last of those
  STOPs read from the status topic ("evaluator restart -> schedule resumed": the stored schedule runs at once), and
  to every group evaluated again (the takeover's catch-up).

Usage: `python bench/bench_scale.py [groups ...]` (default 6250 25000: 25k and 100k partitions).

`--ingest` (`scale_fleet.py`, its docstring says what it prints): instead of seeding Redis, the groups' offset
commits (two per group partition) are written to the Kafka mock's offsets topic and a cold `lagwatch run ingest` and
`lagwatch run evaluator` start together: one run per size gives the first statuses of every group with the ingest's
reading, the ingest's records/s beside Burrow's on the same records, idle CPU, STOP delay, `/metrics` with and
without partition-level series and the api's memory while it scrapes, every lagwatch process's memory against
Burrow's, the consumer list and the dashboard's first page, an evaluator's SIGTERM in the middle of a full
evaluation and its SIGKILL and restart. `python bench/bench_scale.py --ingest [--no-burrow] [groups ...]` (default
25000: 100k partitions; 250000 is 1M).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
from aiokafka import AIOKafkaConsumer
from redis.asyncio import Redis

from lagwatch.devkit.mock_kafka import start_mock_kafka_process, stop_process
from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OFFSETS_TOPIC
from lagwatch.devkit.ports import free_port
from lagwatch.devkit.redis_server import RedisServer
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Commit, WindowConfig
from lagwatch.shared.windows.changes import ChangePublisher
from lagwatch.shared.windows.store import WindowStore

CLUSTER = "local"
PARTITIONS = 4
GROUPS_PER_TOPIC = 25
COMMITS = 10
PROBES = 120
RESTART_PROBES = 20
PROBE_TOPIC = "probe"
IDLE_S = 20.0
MINUTE = 60_000
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def lagwatch_process(service: str, env: dict, port: int = 0) -> subprocess.Popen:
    lagwatch = Path(sys.executable).parent / "lagwatch"
    log = Path(env.get("BENCH_SCALE_LOG_DIR") or tempfile.gettempdir()) / f"lagwatch-bench-scale-{service}.log"
    return subprocess.Popen(
        [str(lagwatch), "run", service, "--http-port", str(port), "--log-level", "INFO", "--log-file", str(log)],
        env=env,
    )


async def seed(redis_url: str, groups: int) -> float:
    """G groups, each reading 4 partitions of its topic (25 groups a topic), 10 commits a minute apart, caught up."""
    started = time.perf_counter()
    redis = Redis.from_url(redis_url)
    store = WindowStore(redis, WindowConfig())
    now = int(time.time() * 1000)
    topics = (groups + GROUPS_PER_TOPIC - 1) // GROUPS_PER_TOPIC
    end = 1000 * COMMITS
    await store.writes.add_broker_polls(
        CLUSTER, {f"topic-{t}": dict.fromkeys(range(PARTITIONS), end) for t in range(topics)}, now - MINUTE
    )
    await store.writes.add_broker_polls(
        CLUSTER, {f"topic-{t}": dict.fromkeys(range(PARTITIONS), end) for t in range(topics)}, now
    )
    batch: list[Commit] = []
    order = 0
    for g in range(groups):
        topic = f"topic-{g % topics}"
        for k in range(COMMITS):
            at = now - (COMMITS - k) * MINUTE
            for p in range(PARTITIONS):
                order += 1
                batch.append(Commit(f"group-{g}", topic, p, 1000 * (k + 1), at, order, at))
        if len(batch) >= 40_000 or g == groups - 1:
            offsets = {(c.topic, c.partition): end for c in batch}
            await store.writes.add_commits(CLUSTER, batch, now, broker_offsets=offsets)
            batch = []
    await redis.aclose()
    return time.perf_counter() - started


async def seed_probes(
    redis_url: str, bootstrap: str, first_instant_ms: int, prefix: str = "probe", count: int = PROBES
) -> dict[str, int]:
    """Probe groups that STOP at known instants (60 ms apart from `first_instant_ms`), announced with change notices
    as the ingest would. Returns group -> instant."""
    redis = Redis.from_url(redis_url)
    store = WindowStore(redis, WindowConfig())
    now = int(time.time() * 1000)
    await store.writes.add_broker_polls(CLUSTER, {PROBE_TOPIC: {0: 1000}}, now - 2000)
    await store.writes.add_broker_polls(CLUSTER, {PROBE_TOPIC: {0: 1100}}, now - 1000)
    last = now - 1000
    instants, commits = {}, []
    for i in range(count):
        group = f"{prefix}-{i}"
        instant = first_instant_ms + i * 60
        span = instant - 1 - last  # the STOP rule holds from last + span + 1 on
        instants[group] = instant
        # three commits: a window of fewer (`minimum-entries`) is too young to be judged STOP at all
        commits += [
            Commit(group, PROBE_TOPIC, 0, 100, last - span, 3 * i + 1, last - span),
            Commit(group, PROBE_TOPIC, 0, 150, last - span // 2, 3 * i + 2, last - span // 2),
            Commit(group, PROBE_TOPIC, 0, 200, last, 3 * i + 3, last),
        ]
    await store.writes.add_commits(CLUSTER, commits, now, broker_offsets={(PROBE_TOPIC, 0): 1000})
    await redis.aclose()
    notices = ChangePublisher({"bootstrap.servers": bootstrap}, "lagwatch.changes")
    await notices.start()
    await notices.publish(CLUSTER, [(g, "commits") for g in instants])
    await notices.stop()
    return instants


async def wait_for_hash(redis_url: str, key: str, count: int, timeout: float, started: float) -> float:
    """Seconds from `started` (perf_counter) until the hash `key` has `count` fields."""
    redis = Redis.from_url(redis_url)
    try:
        while time.perf_counter() - started < timeout:
            if await redis.hlen(key) >= count:
                return time.perf_counter() - started
            await asyncio.sleep(0.1)
    finally:
        await redis.aclose()
    raise RuntimeError(f"{key} did not get {count} fields within {timeout}s")


async def stop_delays(bootstrap: str, redis_url: str, lead_s: float) -> list[float]:
    consumer = AIOKafkaConsumer(
        "lagwatch.status", bootstrap_servers=bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=20
    )
    await consumer.start()
    try:
        await consumer.getmany(timeout_ms=500)  # assigned, positioned at the end
        instants = await seed_probes(redis_url, bootstrap, int((time.time() + lead_s) * 1000))
        delays: dict[str, float] = {}
        deadline = time.time() + lead_s + PROBES * 0.06 + 30
        while len(delays) < len(instants) and time.time() < deadline:
            for messages in (await consumer.getmany(timeout_ms=100)).values():
                received = time.time() * 1000
                for m in messages:
                    event = json.loads(m.value)
                    if event["group"] in instants and event["status"] == "ERR":
                        delays.setdefault(event["group"], (received - instants[event["group"]]) / 1000)
        if len(delays) < len(instants):
            raise RuntimeError(f"only {len(delays)} of {len(instants)} probes were found STOPped")
        return sorted(delays.values())
    finally:
        await consumer.stop()


async def scrape(url: str) -> tuple[float, int, int]:
    async with aiohttp.ClientSession() as http:
        started = time.perf_counter()
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=120)) as response:
            body = await response.read()
        elapsed = time.perf_counter() - started
    samples = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return elapsed, len(body), samples


async def wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            try:
                async with http.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} did not answer")


async def scheduled(redis_url: str, groups: dict[str, int], timeout: float = 60) -> None:
    """Until every group is in the evaluator's schedule at its instant."""
    redis = Redis.from_url(redis_url)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            async with redis.pipeline(transaction=False) as pipe:
                for group in groups:
                    for partition in range(4):  # the changes topic's
                        pipe.zscore(keys.due_groups(CLUSTER, partition), group)
                found = await pipe.execute()
            if sum(score is not None for score in found) == len(groups):
                return
            await asyncio.sleep(0.1)
    finally:
        await redis.aclose()
    raise RuntimeError("the probes were not scheduled")


async def restart_delays(
    env: dict, redis_url: str, bootstrap: str, groups: int, stop_old: Callable[[], object], lead_ms: int = 10_000
) -> tuple[subprocess.Popen, dict]:
    """Restart probes STOP while no evaluator runs; a new one starts: seconds to their first and last STOP found,
    and until it evaluated every group again. `lead_ms`: the old evaluator schedules them, then stops before the
    first."""
    instants = await seed_probes(redis_url, bootstrap, int(time.time() * 1000) + lead_ms, "restart", RESTART_PROBES)
    await scheduled(redis_url, instants)
    stop_old()
    await asyncio.sleep(max(0.0, max(instants.values()) / 1000 - time.time()) + 0.5)
    consumer = AIOKafkaConsumer(
        "lagwatch.status", bootstrap_servers=bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=20
    )
    await consumer.start()
    redis = Redis.from_url(redis_url)
    stats = keys.evaluator_stats(CLUSTER)
    try:
        await consumer.getmany(timeout_ms=500)  # assigned, positioned at the end
        takeovers = int(await redis.hget(stats, "evaluations:takeover") or 0)
        started = time.perf_counter()
        evaluator = lagwatch_process("evaluator", env)
        found: list[float] = []
        while len(found) < len(instants) and time.perf_counter() - started < 600:
            for messages in (await consumer.getmany(timeout_ms=100)).values():
                stopped = [m for m in messages if json.loads(m.value)["group"] in instants]
                found += [time.perf_counter() - started for m in stopped if json.loads(m.value)["status"] == "ERR"]
        while int(await redis.hget(stats, "evaluations:takeover") or 0) - takeovers < groups:
            await asyncio.sleep(0.1)
        out = {
            "restart_first_stop_s": round(found[0], 2),
            "restart_all_stops_s": round(found[-1], 2),
            "restart_caught_up_s": round(time.perf_counter() - started, 1),
        }
        return evaluator, out
    finally:
        await consumer.stop()
        await redis.aclose()


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def run(groups: int) -> dict:
    out: dict = {"partitions": groups * PARTITIONS, "groups": groups}
    with tempfile.TemporaryDirectory() as tmp, RedisServer() as redis:
        redis.start()
        topics = {OFFSETS_TOPIC: DEFAULT_PARTITIONS, "lagwatch.changes": 4, "lagwatch.status": 4}
        kafka, control = start_mock_kafka_process(Path(tmp), topics)
        api_port = free_port()
        env = dict(os.environ, REDIS_URL=redis.url, KAFKA_BOOTSTRAP_SERVERS=control.bootstrap)
        services: list[subprocess.Popen] = []
        try:
            out["seed_s"] = round(asyncio.run(seed(redis.url, groups)), 1)
            started = time.perf_counter()
            evaluator = lagwatch_process("evaluator", env)
            services.append(evaluator)
            results, lines = keys.group_results(CLUSTER), keys.group_sparklines(CLUSTER)
            for name, key in (("cold_start_s", results), ("cold_start_sparklines_s", lines)):
                out[name] = round(asyncio.run(wait_for_hash(redis.url, key, groups, 600, started)), 1)
            time.sleep(3)  # the last evaluations' writes settle
            cpu = (cpu_seconds(evaluator.pid), cpu_seconds(redis.pid))
            time.sleep(IDLE_S)
            out["idle_cpu_evaluator_pct"] = round((cpu_seconds(evaluator.pid) - cpu[0]) / IDLE_S * 100, 2)
            out["idle_cpu_redis_pct"] = round((cpu_seconds(redis.pid) - cpu[1]) / IDLE_S * 100, 2)
            delays = asyncio.run(stop_delays(control.bootstrap, redis.url, lead_s=5.0))
            out["stop_probes"] = len(delays)
            out["stop_delay_p50_s"] = round(statistics.median(delays), 3)
            out["stop_delay_p99_s"] = round(percentile(delays, 0.99), 3)
            out["stop_delay_max_s"] = round(max(delays), 3)
            restarted, figures = asyncio.run(
                restart_delays(env, redis.url, control.bootstrap, groups, lambda: stop_process(evaluator, timeout=20))
            )
            services.append(restarted)
            out |= figures
            api = lagwatch_process("api", env, api_port)
            services.append(api)
            asyncio.run(wait_http(f"http://127.0.0.1:{api_port}/burrow/admin"))
            url = f"http://127.0.0.1:{api_port}/metrics"
            first = asyncio.run(scrape(url))
            out["metrics_first_scrape_s"] = round(first[0], 3)
            runs = [asyncio.run(scrape(url)) for _ in range(3)]
            out["metrics_s"] = round(statistics.median(r[0] for r in runs), 3)
            out["metrics_mb"] = round(runs[0][1] / 1e6, 1)
            out["metrics_samples"] = runs[0][2]
        finally:
            for proc in services:
                stop_process(proc, timeout=20)
            stop_process(kafka)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("groups", type=int, nargs="*", help="sizes in groups of 4 partitions (default: 6250 25000)")
    parser.add_argument("--ingest", action="store_true", help="the fleet read from the offsets topic (scale_fleet.py)")
    parser.add_argument("--no-burrow", action="store_true", help="--ingest without Burrow's run")
    parser.add_argument("--evaluators", type=int, default=1, help="--ingest: evaluator instances at the cold start")
    args = parser.parse_args(argv)
    import scale_fleet  # it builds on this module's helpers: imported here, where this module is whole

    for size in args.groups or ([25_000] if args.ingest else [6250, 25_000]):
        if args.ingest:
            result = scale_fleet.run(size, burrow=not args.no_burrow, evaluators=args.evaluators)
        else:
            result = run(size)
        print(f"scale: {result['partitions']} partitions ({result['groups']} groups x {PARTITIONS})")
        for key, value in result.items():
            if key not in ("partitions", "groups"):
                print(f"scale:   {key}: {value}")
        if args.ingest:
            print(f"scale:   summary: {scale_fleet.summary(result)}")


if __name__ == "__main__":
    main()
