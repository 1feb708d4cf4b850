"""The Redis key layout's helpers (shared/protocol/keys.py)."""

from lagwatch.shared.protocol import keys


def test_a_partition_field_reads_back_as_its_topic_and_partition():
    field = keys.partition_field("orders.v2", 11)
    assert keys.parse_partition_field(field) == ("orders.v2", 11)
    assert keys.parse_partition_field(field.encode()) == ("orders.v2", 11)


def test_a_parsed_topic_name_is_kept_once_however_many_fields_name_it():
    # a reader holding 100k group-partitions of one topic keeps one string, not one per field
    first, _ = keys.parse_partition_field(b"payments-ledger:0")
    second, _ = keys.parse_partition_field(b"payments-ledger:1")
    assert first is second
