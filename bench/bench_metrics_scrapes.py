"""`/metrics` asked by many at once (Prometheus replicas, federation, someone's curl): one scrape alone against
SCRAPES scrapes sent together, in the same run, and how many renders those cost.

    python bench/bench_metrics_scrapes.py [GROUPS]        (default 200,000 groups of one partition)

Starts its own redis-server and stores what `/metrics` reads, as bench_dashboard.py does (every group's ready result,
most of them behind, so their lag in seconds moves and each render renders them again; each topic's log ends), runs
`lagwatch run api` as a separate process, and times: the first scrape (the scrape process starting), one scrape
alone, then SCRAPES scrapes sent together, each on a connection opened beforehand (the slowest and the median, with
their HTTP statuses), and the renders they cost (`lagwatch_api_metrics_renders_total` before and after).
"""

from __future__ import annotations

import asyncio
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).parent))
from bench_api import against_api, wait_until_serving
from bench_dashboard import populate

SCRAPES = 20
TAIL_BYTES = 64 * 1024
RENDERS = re.compile(rb"^lagwatch_api_metrics_renders_total (\S+)$", re.MULTILINE)


async def timed_scrape(session: aiohttp.ClientSession, base: str) -> tuple[float, int, int, bytes]:
    """Seconds, HTTP status, size and the end of the body (the api's own series) of one scrape. The rest is
    dropped as it arrives: 20 bodies held at once would measure this client's memory more than the api."""
    started = time.perf_counter()
    size, tail = 0, b""
    async with session.get(f"{base}/metrics", timeout=aiohttp.ClientTimeout(total=600)) as response:
        async for chunk in response.content.iter_chunked(1 << 20):
            size += len(chunk)
            tail = (tail + chunk)[-TAIL_BYTES:]
        return time.perf_counter() - started, response.status, size, tail


def renders_in(body: bytes) -> float | None:
    found = RENDERS.search(body)
    return float(found.group(1)) if found else None


async def open_connections(session: aiohttp.ClientSession, base: str, count: int) -> None:
    """`count` connections left idle in the session's pool, so the scrapes sent together need no handshake."""
    responses = await asyncio.gather(*(session.get(f"{base}/healthz") for _ in range(count)))
    for response in responses:
        await response.read()
        response.release()


async def measure(base: str) -> dict:
    result: dict = {"scrapes_together": SCRAPES}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=SCRAPES)) as session:
        await wait_until_serving(session, base)
        first_s, _, _, _ = await timed_scrape(session, base)
        result["metrics_first_scrape_s"] = round(first_s, 2)
        alone_s, status, size, tail = await timed_scrape(session, base)
        assert status == 200, status
        result["metrics_one_scrape_s"] = round(alone_s, 2)
        result["metrics_mib"] = round(size / 2**20, 1)
        before = renders_in(tail)
        await open_connections(session, base, SCRAPES)
        started = time.perf_counter()
        together = await asyncio.gather(*(timed_scrape(session, base) for _ in range(SCRAPES)))
        result["metrics_together_all_done_s"] = round(time.perf_counter() - started, 2)
    seconds = sorted(s for s, _, _, _ in together)
    result["metrics_together_median_s"] = round(statistics.median(seconds), 2)
    result["metrics_together_slowest_s"] = round(seconds[-1], 2)
    result["metrics_together_statuses"] = dict(Counter(status for _, status, _, _ in together))
    after = max((renders_in(tail) or 0.0) for _, _, _, tail in together)
    result["metrics_together_renders"] = None if before is None else int(after - before)
    return result


def run(groups: int = 200_000) -> dict:
    return against_api(groups, 1, populate, measure)


if __name__ == "__main__":
    r = run(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
    print(f"metrics: {r['groups']:,} groups x {r['partitions_per_group']} partition (stored in {r['populate_s']} s)")
    print(f"metrics: first scrape (the scrape process starting): {r['metrics_first_scrape_s']} s")
    print(f"metrics: one scrape alone: {r['metrics_one_scrape_s']} s, {r['metrics_mib']} MiB")
    print(
        f"metrics: {r['scrapes_together']} scrapes sent together: all done in {r['metrics_together_all_done_s']} s "
        f"(median {r['metrics_together_median_s']} s, slowest {r['metrics_together_slowest_s']} s), "
        f"statuses {r['metrics_together_statuses']}, {r['metrics_together_renders']} render(s)"
    )
