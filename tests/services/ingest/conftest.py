import pytest

from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OFFSETS_TOPIC
from lagwatch.services.ingest.service import consumer_group
from tests.kafka_helpers import CLUSTER

HISTORY = "lagwatch.history"
AWAY = 3  # the broker `one_broker_apart` lets a test take down: it leads the history topic and `remote`, nothing else


@pytest.fixture
def one_broker_apart(three_brokers):
    """Three brokers: broker 1 leads the offsets topic, `orders` and the change notices and coordinates the ingest's
    group; broker AWAY leads the history topic and `remote` (a data topic), so taking it down leaves the rest."""
    for topic, partitions in ((OFFSETS_TOPIC, DEFAULT_PARTITIONS), ("orders", 2), ("lagwatch.changes", 1)):
        three_brokers.create_topic(topic, partitions, replication_factor=3)
        for p in range(partitions):
            three_brokers.set_partition_leader(topic, p, 1)
    for topic in (HISTORY, "remote"):
        three_brokers.create_topic(topic, 3, replication_factor=3)
        for p in range(3):
            three_brokers.set_partition_leader(topic, p, AWAY)
    three_brokers.set_group_coordinator(consumer_group(CLUSTER), 1)
    return three_brokers
