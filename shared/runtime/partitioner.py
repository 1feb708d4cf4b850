"""Kafka's default partitioner, for records lagwatch sends to a partition it chose itself: the partition a key gets
from Kafka's Java producer (and librdkafka's `murmur2_random`), so records sent with an explicit partition land
where the key would have put them, and readers that own partitions by key (the evaluator's sweep) agree."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable
from typing import Generic, TypeVar

from confluent_kafka import KafkaException, Producer
from murmurhash2 import murmurhash2

from lagwatch.shared.runtime.own_thread import on_own_thread

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

KAFKA_MURMUR2_SEED = 0x9747B28C  # Kafka's murmur2 is MurmurHash2 with this seed
ANY_PARTITION = -1  # librdkafka's RD_KAFKA_PARTITION_UA: its partitioner chooses from the key


def partition_for(key: bytes, partitions: int) -> int:
    return (murmurhash2(key, KAFKA_MURMUR2_SEED) & 0x7FFFFFFF) % partitions


class PartitionCache(Generic[K]):
    """Partitions already computed, for one partition count: the ingest sends for the same groups batch after
    batch, and a dict look-up costs a fraction of hashing the key again. Keyed by whatever names the key."""

    LIMIT = 200_000  # entries kept; then it starts over

    def __init__(self) -> None:
        self._partitions: int | None = None
        self._known: dict[K, int] = {}

    def lookup(self, partitions: int) -> dict[K, int]:
        """The entries for `partitions` (emptied when the count changed or past LIMIT entries); the caller fills
        in a miss with `partition_for`."""
        if partitions != self._partitions or len(self._known) > self.LIMIT:
            self._partitions, self._known = partitions, {}
        return self._known


class PartitionCount:
    """A topic's partition count as metadata last gave it, read again in the background every REFRESH_S: a send
    never waits for metadata (Kafka away would hold it for the metadata timeout). None until a read succeeded."""

    REFRESH_S = 30.0
    METADATA_TIMEOUT_S = 5.0

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.known: int | None = None
        self._read_at = float("-inf")  # monotonic time of the last metadata request
        self._reading: asyncio.Task[None] | None = None

    def current(self, producer: Producer) -> int | None:
        """The count known now; starts a read when one is due."""
        due = time.monotonic() - self._read_at >= self.REFRESH_S
        if due and (self._reading is None or self._reading.done()):
            self._read_at = time.monotonic()
            self._reading = asyncio.ensure_future(self._read(producer))
        return self.known

    def cancel(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
            self._reading = None  # the cancelled read's frames hold the producer

    async def partitions(self, producer: Producer) -> list[int]:
        """The topic's partitions, from a metadata request now; KafkaException when there is no answer."""
        metadata = await on_own_thread(producer.list_topics, self.topic, self.METADATA_TIMEOUT_S)
        described = metadata.topics.get(self.topic)
        if described is None or described.error is not None:
            raise KafkaException(described.error if described is not None else "no metadata")
        return sorted(described.partitions)

    async def _read(self, producer: Producer) -> None:
        try:
            self.known = len(await self.partitions(producer)) or None
        except KafkaException as exc:  # the last count stays (or none): read again when due
            log.debug("no metadata for %s (%s)", self.topic, exc)
