"""Status-change events onto the status topic (and lag-threshold events onto theirs): an idempotent producer with
acks=all, key `<cluster>/<group>` so a group's events keep their order in one partition.

The evaluator publishes under its lock, so a publish must never wait on Kafka for long: aiokafka retries a record
whose partition leader is unreachable for as long as it stays so, and blocks a send while that partition's batch is
full. Each send and the wait for acknowledgements are bounded (`SEND_WAIT_S`, `ACK_WAIT_S`); what is not acknowledged
in time stays in the outbox, and the group is evaluated again soon. A record still in flight is not sent again: a
later publish looks at its delivery instead, so one partition's outage neither stops the other groups' events nor
queues a copy of its own at every retry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, MessageSizeTooLargeError
from prometheus_client import Counter

from lagwatch.shared.events.deliveries import InFlight, stop_producer
from lagwatch.shared.events.status_event import record_key
from lagwatch.shared.runtime.partitioner import partition_for

log = logging.getLogger(__name__)
PUBLISHED = Counter("lagwatch_events_published_total", "Status-change events acknowledged by Kafka", ["cluster"])
FAILED = Counter(
    "lagwatch_events_publish_failures_total", "Status-change events Kafka did not take (retried)", ["cluster"]
)
SEND_WAIT_S = 1.0  # a send waits this long for room in its partition's batch (full while the leader is away)
ACK_WAIT_S = 1.0  # a publish waits this long for its new records' acknowledgements (milliseconds when Kafka is well)
STOP_FLUSH_S = 5.0  # stopping waits this long for records in flight; the outbox keeps the rest


class EventPublisher:
    def __init__(self, kafka_kwargs: dict[str, Any], topic: str) -> None:
        self.topic = topic
        self._producer = AIOKafkaProducer(**kafka_kwargs, acks="all", enable_idempotence=True, linger_ms=2)
        self._in_flight: InFlight[tuple[str, bytes]] = InFlight()  # by (topic, event)

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        """Stop, waiting a little for the records in flight: aiokafka's own stop would wait for a partition whose
        leader is away until it is back. What was not delivered stays in the outbox, for whoever evaluates next."""
        if not await stop_producer(self._producer, STOP_FLUSH_S):
            log.warning("stopping with status events not delivered; they stay in the outbox")

    async def publish(self, items: list[tuple[str, str, bytes]], topic: str | None = None) -> set[bytes]:
        """Send (cluster, group, event) items to `topic` (default: the status topic); the events Kafka acknowledged:
        for each group only an unbroken run from its first, so a group's events are never acknowledged out of order."""
        topic = topic or self.topic
        deliveries, new = await self._send(items, topic)
        if new:
            await asyncio.wait(new, timeout=ACK_WAIT_S)
        acknowledged: set[bytes] = set()
        broken: set[tuple[str, str]] = set()
        published: dict[str, int] = {}  # per cluster, counted once per publish (a label lookup per event adds up)
        for cluster, group, event in items:
            delivery = deliveries.get(event)
            if (cluster, group) in broken or delivery is None or not delivery.done():
                broken.add((cluster, group))
                continue
            self._in_flight.settle((topic, event))  # a later publish of it sends it afresh
            exc = delivery.exception()
            if exc is not None:
                log.warning("status event for %s/%s not acknowledged (%s); it stays in the outbox", cluster, group, exc)
                broken.add((cluster, group))
                FAILED.labels(cluster).inc()
                continue
            acknowledged.add(event)
            published[cluster] = published.get(cluster, 0) + 1
        for cluster, count in published.items():
            PUBLISHED.labels(cluster).inc(count)
        return acknowledged

    async def _send(
        self, items: list[tuple[str, str, bytes]], topic: str
    ) -> tuple[dict[bytes, asyncio.Future], list[asyncio.Future]]:
        """Each item's delivery (its own, or the one already in flight), and those sent now. After one partition
        kept a send waiting, the items bound for it wait for the next publish."""
        deliveries: dict[bytes, asyncio.Future] = {}
        new: list[asyncio.Future] = []
        refused: set[tuple[str, str]] = set()
        blocked: set[int] = set()
        try:
            partitions = sorted(await asyncio.wait_for(self._producer.partitions_for(topic), SEND_WAIT_S))
        except (KafkaError, OSError, TimeoutError) as exc:
            log.warning("publishing status events failed (%s); they stay in the outbox", exc)
            return deliveries, new
        for cluster, group, event in items:
            if (cluster, group) in refused:
                continue  # its events go in order: none after one that did not go
            flying = self._in_flight.get((topic, event))
            if flying is not None:
                deliveries[event] = flying
                continue
            key = record_key(cluster, group)
            partition = partitions[partition_for(key, len(partitions))]  # where the producer would put the key
            if partition in blocked:
                refused.add((cluster, group))
                continue
            try:
                async with asyncio.timeout(SEND_WAIT_S):  # not wait_for: no task per send (a chunk sends hundreds)
                    future = await self._producer.send(topic, event, key=key, partition=partition)
            except TimeoutError:  # its partition's batch is full and not draining: its leader is away
                log.warning("status events for partition %d of %s wait: its leader does not answer", partition, topic)
                blocked.add(partition)
                refused.add((cluster, group))
                continue
            except MessageSizeTooLargeError as exc:  # this record's fault: the other groups' events still go
                log.error("status event for %s/%s refused (%s); it stays in the outbox", cluster, group, exc)
                refused.add((cluster, group))
                FAILED.labels(cluster).inc()
                continue
            except (KafkaError, OSError) as exc:
                log.warning("publishing status events failed (%s); they stay in the outbox", exc)
                break
            self._in_flight.add((topic, event), future)
            deliveries[event] = future
            new.append(future)
        return deliveries, new


async def publish_outboxes(
    publish: Callable[[list[tuple[str, str, bytes]]], Awaitable[set[bytes]]],
    cluster: str,
    outbox: Mapping[str, list[bytes]],
    acknowledge: Callable[[str, dict[str, list[bytes]]], Awaitable[None]],
    as_sent: Callable[[bytes], bytes] = lambda event: event,
) -> tuple[int, frozenset[str]]:
    """Publish each group's events in order (`publish`: an `EventPublisher.publish`; `as_sent`: an event as it
    goes out); what Kafka acknowledged leaves the outbox (`acknowledge`), the rest waits there for the group's next
    evaluation. Returns (events acknowledged, groups with events left in their outbox)."""
    if not outbox:
        return 0, frozenset()
    sent = {event: as_sent(event) for events in outbox.values() for event in events}
    items = [(cluster, group, sent[event]) for group, events in outbox.items() for event in events]
    acknowledged = await publish(items)
    done = {
        group: acked for group, events in outbox.items() if (acked := [e for e in events if sent[e] in acknowledged])
    }
    if done:
        await acknowledge(cluster, done)
    unsent = frozenset(group for group, events in outbox.items() if len(done.get(group, ())) < len(events))
    return sum(len(acked) for acked in done.values()), unsent
