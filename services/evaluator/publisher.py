"""Status-change events onto the status topic (and lag-threshold events onto theirs): an idempotent producer with
acks=all, key `<cluster>/<group>` so a group's events keep their order in one partition."""

from __future__ import annotations

import logging
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, MessageSizeTooLargeError
from prometheus_client import Counter

from lagwatch.shared.domain.status_event import record_key

log = logging.getLogger(__name__)
PUBLISHED = Counter("lagwatch_events_published_total", "Status-change events acknowledged by Kafka", ["cluster"])
FAILED = Counter(
    "lagwatch_events_publish_failures_total", "Status-change events Kafka did not take (retried)", ["cluster"]
)


class EventPublisher:
    def __init__(self, kafka_kwargs: dict[str, Any], topic: str) -> None:
        self.topic = topic
        self._producer = AIOKafkaProducer(**kafka_kwargs, acks="all", enable_idempotence=True, linger_ms=2)

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def publish(self, items: list[tuple[str, str, bytes]], topic: str | None = None) -> set[bytes]:
        """Send (cluster, group, event) items to `topic` (default: the status topic); returns the events Kafka
        acknowledged. For each group only an unbroken run from its first event counts, so a group's events are
        never acknowledged out of order."""
        sent: list[tuple[str, str, bytes, Any]] = []
        refused: set[tuple[str, str]] = set()
        try:
            for cluster, group, event in items:
                if (cluster, group) in refused:
                    continue  # its events go in order: none after one Kafka refused
                try:
                    future = await self._producer.send(topic or self.topic, event, key=record_key(cluster, group))
                except MessageSizeTooLargeError as exc:  # this record's fault: the other groups' events still go
                    log.error("status event for %s/%s refused (%s); it stays in the outbox", cluster, group, exc)
                    refused.add((cluster, group))
                    FAILED.labels(cluster).inc()
                    continue
                sent.append((cluster, group, event, future))
        except (KafkaError, OSError) as exc:
            log.warning("publishing status events failed (%s); they stay in the outbox", exc)
        acknowledged: set[bytes] = set()
        broken: set[tuple[str, str]] = set()
        for cluster, group, event, future in sent:
            try:
                await future
            except (KafkaError, OSError) as exc:
                log.warning("status event for %s/%s not acknowledged (%s); it stays in the outbox", cluster, group, exc)
                broken.add((cluster, group))
                FAILED.labels(cluster).inc()
                continue
            if (cluster, group) not in broken:
                acknowledged.add(event)
                PUBLISHED.labels(cluster).inc()
        return acknowledged
