"""The ingest's history writer: every decoded commit and every log-end sample, as `shared/history.py` records, to
the history topic (`history.topic`, when `history.enabled`), for the archiver and the Spark replay.

Commits are durable: `publish` returns once Kafka acknowledged them (acks=all) and raises otherwise, and the ingest
commits its offsets-topic position only after that, so a failure makes it read the batch again (re-read commits
are duplicates, which the replay drops by `order`). Log-end samples are best effort: one that is lost leaves a gap
of one poll in the history, which the interpolation of lag in seconds bridges.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from lagwatch.shared.history import HistoryRecord, broker_records
from lagwatch.shared.kafka_batches import send_keyed

log = logging.getLogger(__name__)


class HistoryPublisher:
    def __init__(self, cluster: str, kafka_kwargs: dict[str, Any], topic: str) -> None:
        self.cluster = cluster
        self.topic = topic
        self.samples_lost = 0
        self._producer = AIOKafkaProducer(**kafka_kwargs, acks="all", linger_ms=20, compression_type="gzip")

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def publish_commits(self, records: list[tuple[bytes, bytes]]) -> int:
        """Send commits' records (`history.encode_commit`: key, value) and wait for Kafka's acknowledgement;
        KafkaError when it did not come."""
        return await self._send_items(records)

    async def publish_samples(self, by_topic: dict[str, dict[int, int]], sampled_at: int) -> None:
        try:
            await self._send(broker_records(self.cluster, by_topic, sampled_at))
        except (KafkaError, OSError) as exc:
            self.samples_lost += sum(len(p) for p in by_topic.values())
            log.warning("history: log-end samples not archived (%s); the history has a gap of one poll", exc)

    async def _send(self, records: Iterable[HistoryRecord]) -> int:
        return await self._send_items([(r.key(), r.encode()) for r in records])

    async def _send_items(self, items: list[tuple[bytes, bytes]]) -> int:
        if items:
            await asyncio.gather(*await send_keyed(self._producer, self.topic, items))
        return len(items)
