"""The group-changes topic (shared/windows/changes.py): notices name many groups each, one per partition and reason,
and land in the partition each group's key gives, so the evaluator instance owning a group hears of it."""

import json

import pytest
from aiokafka import AIOKafkaConsumer

from lagwatch.shared.windows.changes import (
    GROUPS_PER_NOTICE,
    ChangePublisher,
    decode_notice,
    encode_groups_notice,
    encode_notice,
    groups_of,
    partition_of,
)
from tests.kafka_helpers import CLUSTER, eventually

TOPIC = "lagwatch.changes"


def test_both_notice_forms_decode_to_the_groups_they_name():
    single = decode_notice(encode_notice(CLUSTER, "billing", "commits", 1))
    many = decode_notice(encode_groups_notice(CLUSTER, ["billing", "audit"], "commits", 1))
    assert single is not None and groups_of(single) == ["billing"]
    assert many is not None and groups_of(many) == ["billing", "audit"]


@pytest.mark.parametrize(
    "names",
    [
        {"groups": ["billing", 7]},
        {"groups": "billing", "group": "billing"},  # a string would be read as its characters
        {"topics": "orders", "group": "billing"},
        {"topics": None, "group": "billing"},
    ],
)
def test_a_notice_whose_names_are_not_a_list_of_strings_is_rejected(names):
    bad = json.dumps({"cluster": CLUSTER, "reason": "commits", "at": 1, **names}).encode()
    assert decode_notice(bad) is None


async def test_a_publish_sends_a_notice_per_partition_and_reason_each_group_in_its_key_s_partition(kafka):
    touched = [(f"group-{i}", "commits") for i in range(300)] + [("gone-1", "deleted"), ("gone-2", "deleted")]
    records = await published(kafka, 4, touched)
    seen = {}
    for record in records:
        notice = decode_notice(record.value)
        assert notice is not None and record.key is None
        for group in groups_of(notice):
            assert group not in seen, f"{group} named twice"
            seen[group] = (notice["reason"], record.partition)
    assert seen == {group: (reason, partition_of(CLUSTER, group, 4)) for group, reason in touched}
    assert len(records) <= 4 * 2  # one per partition and reason


async def test_a_publish_of_more_groups_than_a_notice_holds_splits_them(kafka):
    records = await published(kafka, 1, [(f"group-{i}", "commits") for i in range(GROUPS_PER_NOTICE + 10)])
    assert [len(groups_of(decode_notice(r.value))) for r in records] == [GROUPS_PER_NOTICE, 10]


async def test_one_publisher_places_a_group_name_by_each_cluster_it_publishes_for(kafka):
    """The partitions a publisher remembers are its clusters' own: the same group name in another cluster goes where
    that cluster's key gives."""
    groups = [f"group-{i}" for i in range(50)]
    assert any(partition_of(CLUSTER, g, 4) != partition_of("other", g, 4) for g in groups)
    touched = {CLUSTER: [(g, "commits") for g in groups], "other": [(g, "commits") for g in groups]}
    records = await published(kafka, 4, touched[CLUSTER], also=touched)
    seen = {
        (notice["cluster"], group, record.partition)
        for record in records
        if (notice := decode_notice(record.value)) is not None
        for group in groups_of(notice)
    }
    assert seen == {(cluster, g, partition_of(cluster, g, 4)) for cluster in touched for g in groups}


async def published(
    kafka, partitions: int, touched: list[tuple[str, str]], also: dict[str, list[tuple[str, str]]] | None = None
) -> list:
    """The records one publish of `touched` (or a publish per cluster of `also`) puts on a changes topic of
    `partitions`, once the publisher knows the partition count."""
    kafka.create_topic(TOPIC, partitions)
    publisher = ChangePublisher({"bootstrap.servers": kafka.bootstrap}, TOPIC)
    await publisher.start()
    consumer = AIOKafkaConsumer(TOPIC, bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    records: list = []
    try:
        await eventually(lambda: _knows(publisher, partitions), timeout=20)
        for cluster, groups in (also or {CLUSTER: touched}).items():
            await publisher.publish(cluster, groups)
        count = sum(len(groups) for groups in (also or {CLUSTER: touched}).values())
        await eventually(lambda: _named(consumer, records, count), timeout=20)
    finally:
        await consumer.stop()
        await publisher.stop()
    assert publisher.failures == 0
    return records


async def _named(consumer, seen, count):
    batch = await consumer.getmany(timeout_ms=200)
    seen.extend(r for records in batch.values() for r in records)
    return sum(len(groups_of(decode_notice(r.value))) for r in seen) >= count


async def _knows(publisher, partitions):
    return publisher.partitions == partitions
