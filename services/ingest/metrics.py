"""The ingest's counters: Prometheus metrics of this process, and running totals in Redis for the api service.

Redis holds one hash per cluster (`keys.ingest_stats`), incremented once per batch, so the api can show what every
ingest worker did without reaching into their processes. Field names: `records`, `batches`, `decode_error:<type>`,
`skipped_type:<type>`, `filtered`, `offset_commit_tombstone`, `outcome:<name>` (window outcomes), `redis_retries`.
"""

from __future__ import annotations

from collections import Counter as Tally

from prometheus_client import Counter, Histogram
from redis.asyncio import Redis

from lagwatch.shared.store import keys

RECORDS = Counter("lagwatch_ingest_records_total", "Records read from the offsets topic", ["cluster"])
DECODE_ERRORS = Counter(
    "lagwatch_ingest_decode_errors_total", "Offsets-topic records that could not be decoded", ["cluster", "type"]
)
SKIPPED = Counter(
    "lagwatch_ingest_skipped_records_total",
    "Records skipped on purpose (other record types, tombstones, filtered groups)",
    ["cluster", "reason"],
)
COMMITS = Counter(
    "lagwatch_ingest_commits_total", "Offset commits by what the window store did with them", ["cluster", "outcome"]
)
BATCH_SECONDS = Histogram(
    "lagwatch_ingest_batch_seconds",
    "Time to decode and store one batch",
    ["cluster"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
RETRIES = Counter("lagwatch_ingest_retries_total", "Batches retried after a Redis or Kafka failure", ["cluster"])


def observe(cluster: str, tally: Tally[str]) -> None:
    """Feed one batch's tally to the Prometheus counters."""
    for name, n in tally.items():
        kind, _, detail = name.partition(":")
        if kind == "records":
            RECORDS.labels(cluster).inc(n)
        elif kind == "decode_error":
            DECODE_ERRORS.labels(cluster, detail).inc(n)
        elif kind == "outcome":
            COMMITS.labels(cluster, detail).inc(n)
        elif kind == "redis_retries":
            RETRIES.labels(cluster).inc(n)
        elif kind != "batches":
            SKIPPED.labels(cluster, detail or kind).inc(n)


async def add_to_totals(redis: Redis, cluster: str, tally: Tally[str]) -> None:
    if not tally:
        return
    async with redis.pipeline(transaction=False) as pipe:
        for name, n in tally.items():
            pipe.hincrby(keys.ingest_stats(cluster), name, n)
        await pipe.execute()


async def read_totals(redis: Redis, cluster: str) -> dict[str, int]:
    raw = await redis.hgetall(keys.ingest_stats(cluster))
    return {k.decode(): int(v) for k, v in raw.items()}
