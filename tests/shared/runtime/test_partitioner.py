"""Kafka's default partitioner (shared/runtime/partitioner.py): records lagwatch sends to a partition of its own
choosing land where Kafka's Java producer would have put their key; the partition count is read in the background
without holding a stop."""

import asyncio
import threading

from aiokafka.partitioner import murmur2
from hypothesis import given
from hypothesis import strategies as st

from lagwatch.shared.runtime.partitioner import PartitionCache, partition_for
from lagwatch.shared.windows.changes import ChangePublisher


@given(st.binary(max_size=300), st.integers(1, 500))
def test_a_key_s_partition_is_the_one_kafka_s_java_partitioner_gives_it(key, partitions):
    assert partition_for(key, partitions) == (murmur2(key) & 0x7FFFFFFF) % partitions  # aiokafka's port of Java's


def test_the_cache_starts_over_when_the_partition_count_changes():
    cache: PartitionCache[str] = PartitionCache()
    cache.lookup(4)["billing"] = 3
    assert cache.lookup(4) == {"billing": 3}
    assert cache.lookup(6) == {}


def test_a_stop_does_not_wait_for_a_partition_count_kafka_does_not_answer():
    """The count's metadata request cannot be interrupted and waits its whole timeout for a Kafka away. On the loop's
    default executor it held the loop's close, a service's stop, that long; now nothing but its caller waits."""

    async def started_and_stopped() -> None:
        publisher = ChangePublisher({"bootstrap.servers": "127.0.0.1:1"})  # nothing listens on port 1
        await publisher.start()  # the partition count's first read starts
        await asyncio.sleep(0.2)
        await publisher.stop()

    asyncio.run(started_and_stopped())  # closes its loop: returns only once the loop's own threads have ended
    assert [t for t in threading.enumerate() if t.name == "kafka-list_topics" and t.daemon and t.is_alive()]
