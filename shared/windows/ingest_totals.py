"""The ingest's running totals in Redis: the contract between the ingest (writes) and the api (reads, for /metrics).

One hash per cluster (`keys.ingest_stats`), incremented once per batch by every ingest worker, so the api shows what
all of them did without reaching into their processes. Field names: `records`, `batches`, `decode_error:<type>`,
`skipped_type:<type>`, `filtered`, `offset_commit_tombstone`, `outcome:<name>` (window outcomes), `redis_retries`.
A `<type>` is a label from a fixed set (`type_label`): a corrupt record must not mint a new metric series.
"""

from __future__ import annotations

from collections import Counter

from redis.asyncio import Redis

from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.redis_client import reply

# Kafka's coordinator record types are small numbers; anything else (a corrupt key) is counted under one label
KNOWN_TYPES = range(32)


def type_label(record_type: int | None, key: bytes = b"") -> str:
    """A metric label for a record type, from a fixed set. Without a type (an error in a commit's value) it is the
    key's."""
    if record_type is None and len(key) >= 2:
        record_type = int.from_bytes(key[:2], "big", signed=True)
    return str(record_type) if record_type in KNOWN_TYPES else "other"


async def add_to_totals(redis: Redis, cluster: str, tally: Counter[str]) -> None:
    if not tally:
        return
    async with redis.pipeline(transaction=False) as pipe:
        for name, n in tally.items():
            pipe.hincrby(keys.ingest_stats(cluster), name, n)
        await pipe.execute()


async def read_totals(redis: Redis, cluster: str) -> dict[str, int]:
    raw = await reply(redis.hgetall(keys.ingest_stats(cluster)))
    return {k.decode(): int(v) for k, v in raw.items()}
