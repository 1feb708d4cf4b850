"""Sending many keyed records with aiokafka, one record batch per partition: sending thousands of small records one
by one costs more than the work that produced them. Partitions follow Kafka's default partitioner (murmur2 of the
key), so a key's records stay in order in one partition, as with `send`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import murmur2


def partition_for(key: bytes, partitions: int) -> int:
    known = _PARTITIONS.get((key, partitions))
    if known is None:
        if len(_PARTITIONS) >= PARTITION_CACHE_LIMIT:
            _PARTITIONS.clear()
        known = _PARTITIONS[(key, partitions)] = (murmur2(key) & 0x7FFFFFFF) % partitions
    return known


# murmur2 in Python costs more than the rest of a change notice: the same group keys come back batch after batch
PARTITION_CACHE_LIMIT = 200_000
_PARTITIONS: dict[tuple[bytes, int], int] = {}


async def send_keyed(
    producer: AIOKafkaProducer, topic: str, records: Iterable[tuple[bytes, bytes]]
) -> list[asyncio.Future[Any]]:
    """Queue the (key, value) records; returns one future per batch sent, resolved when Kafka acknowledges it."""
    count = len(await producer.partitions_for(topic))
    batches: dict[int, Any] = {}  # partition -> its aiokafka BatchBuilder
    futures: list[asyncio.Future[Any]] = []

    async def send(partition: int, batch: Any) -> None:
        batch.close()
        futures.append(await producer.send_batch(batch, topic, partition=partition))

    for key, value in records:
        partition = partition_for(key, count)
        batch = batches.setdefault(partition, producer.create_batch())
        if batch.append(key=key, value=value, timestamp=None) is None:  # full: send it, start another
            await send(partition, batch)
            batch = batches[partition] = producer.create_batch()
            batch.append(key=key, value=value, timestamp=None)
    for partition, batch in batches.items():
        await send(partition, batch)
    return futures
