"""Topics leaving the windows held in memory: those deleted from Kafka (the poller removed them from Redis) and those
the api deleted from a group (`store.deletions.delete_group_topic`). Either way a ring left in memory would come back
with the next write."""

from __future__ import annotations

import logging
import time

from redis.asyncio import Redis
from redis.exceptions import RedisError

from lagwatch.services.ingest.broker_offsets import BrokerOffsets
from lagwatch.services.ingest.history_publisher import HistoryPublisher
from lagwatch.services.ingest.processor import BatchProcessor
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.redis_client import reply

log = logging.getLogger(__name__)
DELETIONS_EVERY_S = 1.0  # how often the api's topic deletions are looked for
DELETIONS_KEPT_MS = 60_000  # an entry no worker holds the group of is dropped after this


class TopicDeletions:
    def __init__(
        self, redis: Redis, processor: BatchProcessor, broker_offsets: BrokerOffsets, history: HistoryPublisher | None
    ) -> None:
        self.cluster = broker_offsets.cluster
        self.redis, self.processor, self.broker_offsets, self.history = redis, processor, broker_offsets, history
        self._known_topics: dict[str, int] = broker_offsets.partition_counts
        self._checked = 0.0  # monotonic time the api's deletions were last looked for

    def forget_deleted(self) -> None:
        """The poller removed deleted topics (and re-created ones with fewer partitions) from Redis; their rings
        leave memory too. Its topic table is replaced, never changed in place, so an identity check suffices."""
        current = self.broker_offsets.partition_counts
        if current is not self._known_topics:
            gone = {topic for topic, count in self._known_topics.items() if current.get(topic, 0) < count}
            if gone and current:
                self.processor.cache.forget_topics(gone)
            self._known_topics = current

    async def apply_api_deletions(self) -> None:
        """The worker holding the group takes the api's entry; one nobody holds is dropped after a minute (whoever
        loads the group later reads it without the topic). A commit of that topic applied before this check, after
        the deletion, goes with it. Each taken deletion goes to the history, for the replay (by every worker dropping
        one nobody held: the same deletion twice changes nothing there)."""
        now = time.monotonic()
        if now - self._checked < DELETIONS_EVERY_S:
            return
        self._checked = now
        key = keys.topic_deletions(self.cluster)
        try:
            entries = await reply(self.redis.hgetall(key))
            stale_before = now_ms() - DELETIONS_KEPT_MS
            taken = []
            for name, at in entries.items():
                group, _, topic = name.decode(errors="replace").rpartition("\n")  # a topic holds no newline
                deleted_at = _millis(at)  # None: not an entry lagwatch wrote, dropped rather than read every second
                stale = deleted_at is None or deleted_at < stale_before
                if self.processor.cache.delete_topic_of_group(group, topic) or stale:
                    taken.append(name)
                    if self.history is not None and deleted_at is not None:
                        await self.history.publish_deletions([topic], deleted_at, group)
            if taken:
                await reply(self.redis.hdel(key, *taken))
        except RedisError as exc:  # checked again in a second
            log.warning("ingest %s: could not read the api's topic deletions (%s)", self.cluster, exc)


def _millis(at: bytes) -> int | None:
    """A deletion entry's time (ms), or None when lagwatch did not write it."""
    try:
        return int(at)
    except ValueError:
        return None
