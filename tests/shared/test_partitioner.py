"""Kafka's default partitioner (shared/kafka/partitioner.py): records lagwatch sends to a partition of its own
choosing land where Kafka's Java producer would have put their key."""

from aiokafka.partitioner import murmur2
from hypothesis import given
from hypothesis import strategies as st

from lagwatch.shared.kafka.partitioner import PartitionCache, partition_for


@given(st.binary(max_size=300), st.integers(1, 500))
def test_a_key_s_partition_is_the_one_kafka_s_java_partitioner_gives_it(key, partitions):
    assert partition_for(key, partitions) == (murmur2(key) & 0x7FFFFFFF) % partitions  # aiokafka's port of Java's


def test_the_cache_starts_over_when_the_partition_count_changes():
    cache: PartitionCache[str] = PartitionCache()
    cache.lookup(4)["billing"] = 3
    assert cache.lookup(4) == {"billing": 3}
    assert cache.lookup(6) == {}
