"""Topic deletions on their way to the history topic, kept in Redis until it took them (`keys.history_deletions`).

One lost with a stopping worker's memory would leave the deleted topic's partitions in the replay for good. Kept
here, each worker's start sends again what is left, and so does the log-end poller's worker every
`history_publisher.ADOPT_EVERY_S`. A deletion archived twice changes nothing in the replay."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from redis.asyncio import Redis

from lagwatch.shared.protocol import keys
from lagwatch.shared.records.history import KIND_TOPIC_DELETED, HistoryRecord, HistoryRecordInvalid, decode
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.redis_client import reply

log = logging.getLogger(__name__)


class PendingDeletions:
    def __init__(self, redis: Redis, cluster: str) -> None:
        self.redis = redis
        self.key = keys.history_deletions(cluster)

    async def add(self, records: Sequence[HistoryRecord]) -> None:
        at = str(now_ms())
        await reply(self.redis.hset(self.key, mapping={_field(r): at for r in records}))

    async def strike(self, records: Sequence[HistoryRecord]) -> None:
        """The history topic took them."""
        await reply(self.redis.hdel(self.key, *(_field(r) for r in records)))

    async def load(self) -> list[HistoryRecord]:
        """Every deletion kept, in the order they happened; one that is not a deletion record lagwatch wrote is
        struck."""
        kept = await reply(self.redis.hkeys(self.key))
        records, unreadable = [], []
        for value in kept:
            try:
                record = decode(value)
                if record.kind != KIND_TOPIC_DELETED:
                    raise HistoryRecordInvalid(f"a {record.kind} record, not a topic deletion")
                records.append(record)
            except HistoryRecordInvalid as exc:
                log.warning("history: struck an unreadable topic deletion kept in %s (%s)", self.key, exc)
                unreadable.append(value)
        if unreadable:
            await reply(self.redis.hdel(self.key, *unreadable))
        return sorted(records, key=lambda r: r.observed_at)


def _field(record: HistoryRecord) -> str:
    return record.encode().decode()  # JSON with every character escaped to ASCII
