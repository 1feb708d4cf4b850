"""The dashboard's overview at scale: how long `GET /dashboard/api/overview` takes, how big it is, and how long the
api's `/healthz` waits meanwhile (a Kubernetes liveness probe that waits too long restarts the api).

    python bench/bench_dashboard.py [GROUPS]        (default 100,000)

Starts its own redis-server and stores what the overview reads, as the evaluator and the ingest would: every
group's ready result (10 partitions of one of 1,000 topics, 1% ERR with an open incident, 5% WARN, the rest OK), its
10-point sparkline and its status in the evaluator's index, and each topic's log ends. Then runs `lagwatch run api`
as a separate process (so client and server do not share an event loop) and measures, with `/healthz` probed every
20 ms from another thread:

- the first overview (nothing shared yet: a full computation), its body size and `/healthz`'s worst latency;
- a poll 1 s after it finished (what a second viewer, or a page polling every 5 s, sees);
- a filtered overview (`q=`, one group's name) and the same filter again 6 s later (computed afresh).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import urllib.request
from pathlib import Path

import aiohttp
from redis.asyncio import Redis

sys.path.insert(0, str(Path(__file__).parent))
from bench_api import against_api, wait_until_serving

from lagwatch.shared.events.status_event import Incident, build_event, encode, next_incident
from lagwatch.shared.events.status_store import StatusStore, Transition
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import GroupStatus, Status, WindowConfig
from lagwatch.shared.statuses.results_store import GroupResult, PartitionResult, ResultsStore
from lagwatch.shared.windows.store import WindowStore

CLUSTER = "bench"
TOPICS = 1_000
LOG_END = 1_000_000
BATCH = 5_000


def status_of(g: int) -> Status:
    return Status.ERR if g % 100 == 0 else Status.WARN if g % 20 == 1 else Status.OK


def result(g: int, partitions: int, now: int) -> GroupResult:
    topic, status = f"topic-{g % TOPICS}", status_of(g)
    behind = 5_000 if status == Status.ERR else 500 if status == Status.WARN else g % 50
    parts = tuple(
        PartitionResult(topic, p, status, LOG_END - behind - p, 10, now - 60_000 if behind else -2)
        for p in range(partitions)
    )
    return GroupResult(f"group-{g}", status, now - 5_000, (), parts)


async def populate(url: str, groups: int, partitions: int) -> None:
    redis = Redis.from_url(url)
    now = int(time.time() * 1000)
    store = WindowStore(redis, WindowConfig())
    polls = {f"topic-{t}": dict.fromkeys(range(partitions), LOG_END) for t in range(TOPICS)}
    await store.writes.add_broker_polls(CLUSTER, polls, sampled_at=now)
    results = ResultsStore(redis)
    for start in range(0, groups, BATCH):
        chunk = {f"group-{g}": result(g, partitions, now) for g in range(start, min(groups, start + BATCH))}
        lines = {name: [(now - 60_000 * (10 - i), 1000 * i) for i in range(10)] for name in chunk}
        await results.write(CLUSTER, chunk, lines)
    await open_incidents(redis, [g for g in range(groups) if status_of(g) == Status.ERR], now)
    for start in range(0, groups, BATCH):  # the evaluator's index of every group's status (the ERR ones have theirs)
        chunk = range(start, min(groups, start + BATCH))
        known = {f"group-{g}": status_of(g).name for g in chunk if status_of(g) != Status.ERR}
        await redis.hset(keys.statuses_index(CLUSTER), mapping=known)
    await redis.aclose()


async def open_incidents(redis: Redis, groups: list[int], now: int) -> None:
    """The evaluator's records of the ERR groups: each turned ERR a minute ago (an open incident)."""
    history = StatusStore(redis, 7 * 86_400_000)
    items = []
    for g in groups:
        name = f"group-{g}"
        carried, keeps = next_incident(Status.NOTFOUND, Status.ERR, Incident(None, None), CLUSTER, name, 1, now)
        status = GroupStatus(CLUSTER, name, Status.ERR, 1.0, totallag=5_000)
        event = build_event(
            cluster=CLUSTER,
            group=name,
            seq=1,
            previous=Status.NOTFOUND,
            group_status=status,
            incident=carried,
            evaluated_at=now - 60_000,
        )
        items.append(Transition(name, 0, Status.ERR, keeps, encode(event), now - 60_000))
    for start in range(0, len(items), BATCH):
        await history.transitions(CLUSTER, items[start : start + BATCH])


class HealthProbe(threading.Thread):
    """GET /healthz every 20 ms on its own thread; the slowest answer while it ran."""

    def __init__(self, base: str) -> None:
        super().__init__(daemon=True)
        self.url, self.worst, self.count, self._done = f"{base}/healthz", 0.0, 0, threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            started = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=60) as response:
                response.read()
            self.worst = max(self.worst, time.perf_counter() - started)
            self.count += 1
            self._done.wait(0.02)

    def stop(self) -> float:
        self._done.set()
        self.join()
        return self.worst


async def overview(session: aiohttp.ClientSession, base: str, query: str = "") -> tuple[float, bytes, float]:
    """(seconds, body, /healthz's worst latency in seconds) of one overview."""
    probe = HealthProbe(base)
    probe.start()
    started = time.perf_counter()
    async with session.get(f"{base}/dashboard/api/overview{query}") as response:
        body = await response.read()
        assert response.status == 200, (response.status, body[:200])
    elapsed = time.perf_counter() - started
    await asyncio.to_thread(time.sleep, 0.1)  # a last probe or two after the answer
    return elapsed, body, probe.stop()


async def measure(base: str, groups: int) -> dict:
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await wait_until_serving(session, base)
        seconds, body, healthz = await overview(session, base)
        shown = json.loads(body)
        result = {
            "overview_s": round(seconds, 2),
            "overview_bytes": len(body),
            "overview_rows": len(shown["groups"]),
            "healthz_worst_ms": round(healthz * 1000, 1),
        }
        await asyncio.sleep(1)
        seconds, _, healthz = await overview(session, base)
        result["poll_1s_later_s"], result["poll_1s_later_healthz_worst_ms"] = round(seconds, 3), round(healthz * 1000)
        wanted = f"?q=group-{groups - 1}"
        seconds, body, _ = await overview(session, base, wanted)
        result["filtered_s"], result["filtered_bytes"] = round(seconds, 3), len(body)
        await asyncio.sleep(6)  # older than the reuse window: computed again
        seconds, _, healthz = await overview(session, base, wanted)
        result["filtered_fresh_s"], result["filtered_fresh_healthz_worst_ms"] = round(seconds, 2), round(healthz * 1000)
    return result


def run(groups: int = 100_000, partitions: int = 10) -> dict:
    return against_api(groups, partitions, populate, lambda base: measure(base, groups))


if __name__ == "__main__":
    r = run(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
    print(f"dashboard: {r['groups']:,} groups x {r['partitions_per_group']} partitions (stored in {r['populate_s']} s)")
    print(
        f"dashboard: first overview {r['overview_s']} s, {r['overview_bytes'] / 2**20:.2f} MiB, "
        f"{r['overview_rows']:,} rows; /healthz worst {r['healthz_worst_ms']} ms meanwhile"
    )
    print(
        f"dashboard: a poll 1 s after it finished: {r['poll_1s_later_s']} s "
        f"(/healthz worst {r['poll_1s_later_healthz_worst_ms']} ms)"
    )
    print(
        f"dashboard: filtered to one group: {r['filtered_s']} s, {r['filtered_bytes']:,} bytes; "
        f"computed afresh: {r['filtered_fresh_s']} s (/healthz worst {r['filtered_fresh_healthz_worst_ms']} ms)"
    )
