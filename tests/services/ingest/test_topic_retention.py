"""Topics' retention settings from DescribeConfigs: what the entries mean for retention risk, and a broker that does
not answer (the Kafka mock) is "not readable", not an error."""

import time

import pytest

from lagwatch.services.ingest import topic_retention
from lagwatch.services.ingest.topic_retention import TopicRetention, TopicRetentionReader, parse_retention


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ({"retention.ms": "604800000", "retention.bytes": "-1", "cleanup.policy": "delete"}, (604_800_000, None)),
        ({"retention.ms": "3600000", "retention.bytes": "1073741824"}, (3_600_000, 1_073_741_824)),
        ({"retention.ms": "-1", "retention.bytes": "-1"}, (None, None)),  # unlimited
        ({"retention.ms": "60000", "cleanup.policy": "compact"}, (None, None)),  # compaction deletes by key only
        ({"retention.ms": "60000", "cleanup.policy": "compact,delete"}, (60_000, None)),
        ({"retention.ms": None, "retention.bytes": "garbage"}, (None, None)),  # unreadable values: unknown
        ({}, (None, None)),
    ],
)
def test_retention_entries_say_when_the_broker_deletes_by_age_and_size(entries, expected):
    assert parse_retention(entries) == TopicRetention(*expected)


async def test_a_broker_without_describe_configs_is_not_readable_and_not_asked_again_soon(kafka):
    kafka.create_topic("orders", 1)
    reader = TopicRetentionReader({"bootstrap.servers": kafka.bootstrap})
    assert await reader.read(["orders"]) == {}  # the mock refuses DescribeConfigs
    assert reader._retry_at > time.monotonic() + topic_retention.RETRY_S - 60
    assert await reader.read(["orders"]) == {}  # not asked: nothing to wait for
    assert await reader.read([]) == {}
