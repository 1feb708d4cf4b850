"""`lagwatch offsets decode`'s JSON view of a decoded `__consumer_offsets` record."""

from __future__ import annotations

import json

from lagwatch.devkit.offsets_encoders import (
    encode_assignment,
    encode_consumer_group_assignment_key,
    encode_consumer_group_assignment_value,
    encode_consumer_group_member_key,
    encode_consumer_group_member_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    encode_subscription,
)
from lagwatch.offsets_view import record_to_json
from lagwatch.shared.records.offsets_codec import GroupMember, decode_record

TOPIC_ID = "0123456789abcdef0123456789abcdef"
# offset 42, metadata "meta", commit timestamp 1000, expire timestamp 2000 (tests/shared/records spells its bytes)
V1_VALUE = encode_offset_commit_value(42, 1000, metadata="meta", expire_timestamp=2000, version=1)
TYPE_3_KEY = bytes.fromhex("0003000167")  # record type 3, then group "g"


def test_offset_commit_json() -> None:
    record = decode_record(encode_offset_commit_key("g", "t", 3), V1_VALUE)
    assert record_to_json(record) == {
        "kind": "offset_commit",
        "key_version": 1,
        "value_version": 1,
        "group": "g",
        "topic": "t",
        "partition": 3,
        "offset": 42,
        "leader_epoch": None,
        "metadata": "meta",
        "commit_timestamp": 1000,
        "expire_timestamp": 2000,
        "tombstone": False,
    }
    tombstone = record_to_json(decode_record(encode_offset_commit_key("g", "t", 3), None))
    assert tombstone["tombstone"] is True and tombstone["offset"] is None


def test_group_metadata_json_decodes_assignments() -> None:
    member = GroupMember(
        "m1", "static", "c1", "/h", 300, 45, encode_subscription(["t"]), encode_assignment({"t": [0, 1]})
    )
    broken = GroupMember("m2", None, "c2", "/h2", 300, 45, b"", b"\x00\x00\x00")
    value = encode_group_metadata_value(generation=3, protocol="range", leader="m1", members=[member, broken])
    assert record_to_json(decode_record(encode_group_metadata_key("g"), value)) == {
        "kind": "group_metadata",
        "key_version": 2,
        "value_version": 3,
        "group": "g",
        "protocol_type": "consumer",
        "generation": 3,
        "protocol": "range",
        "leader": "m1",
        "members": [
            {
                "member_id": "m1",
                "group_instance_id": "static",
                "client_id": "c1",
                "client_host": "/h",
                "session_timeout": 45,
                "rebalance_timeout": 300,
                "assignment": {"t": [0, 1]},
            },
            # an undecodable assignment shows as null rather than hiding the whole record
            {
                "member_id": "m2",
                "group_instance_id": None,
                "client_id": "c2",
                "client_host": "/h2",
                "session_timeout": 45,
                "rebalance_timeout": 300,
                "assignment": None,
            },
        ],
        "tombstone": False,
    }


def test_non_consumer_groups_have_no_decoded_assignment() -> None:
    """Kafka Connect groups use their own assignment format: it is not read as a consumer's."""
    member = GroupMember("w1", None, "connect-1", "/h", 300, 45, b"", encode_assignment({"t": [0]}))
    value = encode_group_metadata_value(
        protocol_type="connect", generation=1, protocol="sessioned", leader="w1", members=[member]
    )
    view = record_to_json(decode_record(encode_group_metadata_key("connect-cluster"), value))
    assert view["members"][0]["assignment"] is None


def test_kip848_and_other_json() -> None:
    member = decode_record(
        encode_consumer_group_member_key("g", "m"),
        encode_consumer_group_member_value(client_id="c", client_host="/h", instance_id="i"),
    )
    assert record_to_json(member) == {
        "kind": "consumer_group_member",
        "record_type": 5,
        "group": "g",
        "member_id": "m",
        "client_id": "c",
        "client_host": "/h",
        "instance_id": "i",
        "tombstone": False,
    }
    assignment = decode_record(
        encode_consumer_group_assignment_key("g", "m"),
        encode_consumer_group_assignment_value(member_epoch=4, partitions={TOPIC_ID: [1]}),
    )
    assert record_to_json(assignment) == {
        "kind": "consumer_group_assignment",
        "record_type": 8,
        "group": "g",
        "member_id": "m",
        "member_epoch": 4,
        "partitions": {TOPIC_ID: [1]},
        "tombstone": False,
    }
    assert record_to_json(decode_record(TYPE_3_KEY, None)) == {
        "kind": "other",
        "record_type": 3,
        "tombstone": True,
    }
    json.dumps([record_to_json(member), record_to_json(assignment)])
