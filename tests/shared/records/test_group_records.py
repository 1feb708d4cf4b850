"""Share- and streams-group records of ``__consumer_offsets`` (types 9-15, 17-24): what they look like on the wire
and what they decode to.

Expected bytes are spelled out by hand from Kafka's JSON schemas (wire_bytes.py, never the dev kit's encoders); the
property tests then hold the dev kit's encoders and the decoder to each other for every type, and damaged bytes to
CodecError.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagwatch.devkit.group_state_encoders import encode_group_record
from lagwatch.offsets_view import record_to_json
from lagwatch.shared.records import group_layouts
from lagwatch.shared.records.group_layouts import (
    CopartitionGroup,
    KeyValue,
    ResolvedTopicIds,
    ShareStateTopic,
    StreamsEndpoint,
    StreamsTopic,
    Subtopology,
    TaskIds,
    TopicPartitions,
    TopicRef,
)
from lagwatch.shared.records.group_records import (
    RECORD_CLASSES,
    ShareGroupCurrentMemberAssignment,
    ShareGroupMember,
    ShareGroupMetadata,
    ShareGroupStatePartitionMetadata,
    StreamsGroupMember,
    StreamsGroupMetadata,
    StreamsGroupResolvedTopicIds,
    StreamsGroupTopology,
)
from lagwatch.shared.records.offsets_codec import CodecError, decode_record
from tests.shared.records.layout_strategies import corrupted, decoded_or_codec_error, records
from tests.shared.records.wire_bytes import NO_TAGS, carray, cs, i8, i16, i32, i64, s, tags, u16, uv

TOPIC_ID = "000102030405060708090a0b0c0d0e0f"
UUID = bytes.fromhex(TOPIC_ID)


def group_key(record_type: int, group: str) -> bytes:
    return i16(record_type) + s(group)


def member_key(record_type: int, group: str, member: str) -> bytes:
    return i16(record_type) + s(group) + s(member)


# a StreamsGroupMemberMetadataValue up to its endpoint
STREAMS_MEMBER_HEAD = i16(0) + cs(None) * 2 + cs("c") + cs("h") + i32(0) * 2 + cs("p")


# ------------------------------------------------------------------------------------------ share groups


def test_share_group_metadata_known_bytes() -> None:
    value = i16(0) + i32(7) + i64(-99) + NO_TAGS
    assert decode_record(group_key(11, "sg"), value) == ShareGroupMetadata(11, "sg", 7, -99, False)


def test_share_group_member_known_bytes() -> None:
    value = i16(0) + cs(None) + cs("client-1") + cs("/10.0.0.1") + carray(cs("orders"), cs("refunds")) + NO_TAGS
    assert decode_record(member_key(10, "sg", "m1"), value) == ShareGroupMember(
        10, "sg", "m1", None, "client-1", "/10.0.0.1", ["orders", "refunds"], False
    )


def test_share_group_current_member_assignment_known_bytes() -> None:
    topic = UUID + carray(i32(0), i32(2)) + NO_TAGS
    value = i16(0) + i32(5) + i32(4) + i8(0) + carray(topic) + NO_TAGS
    assert decode_record(member_key(14, "sg", "m1"), value) == ShareGroupCurrentMemberAssignment(
        14, "sg", "m1", 5, 4, 0, (TopicPartitions(TOPIC_ID, [0, 2]),), False
    )


def test_share_group_state_partition_metadata_known_bytes() -> None:
    initialized = UUID + cs("orders") + carray(i32(0), i32(1)) + NO_TAGS
    deleting = bytes(16) + cs("gone") + NO_TAGS
    value = i16(0) + carray() + carray(initialized) + carray(deleting) + NO_TAGS
    assert decode_record(group_key(15, "sg"), value) == ShareGroupStatePartitionMetadata(
        15, "sg", (), (ShareStateTopic(TOPIC_ID, "orders", [0, 1]),), (TopicRef("0" * 32, "gone"),), False
    )


# ---------------------------------------------------------------------------------------- streams groups


def test_streams_group_metadata_known_bytes() -> None:
    """Kafka 4.2 writes the validated topology epoch (tag 0) and the last assignment configs (tag 1) when it has
    them; Kafka 4.1.0's record has neither."""
    configs = carray(cs("num.standby.replicas") + cs("1") + NO_TAGS)
    value = i16(0) + i32(9) + i64(-5) + tags((0, i32(4)), (1, configs))
    assert decode_record(group_key(17, "app"), value) == StreamsGroupMetadata(
        17, "app", 9, -5, 4, (KeyValue("num.standby.replicas", "1"),), False
    )
    kafka_4_1_0 = i16(0) + i32(9) + i64(-5) + NO_TAGS
    assert decode_record(group_key(17, "app"), kafka_4_1_0) == StreamsGroupMetadata(17, "app", 9, -5, None, None, False)


def test_streams_group_member_known_bytes() -> None:
    endpoint = i8(1) + cs("app-1.local") + u16(8080) + NO_TAGS
    head = cs(None) + cs("rack-a") + cs("app-StreamThread-1") + cs("/10.0.0.2") + i32(300_000) + i32(2)
    value = i16(0) + head + cs("proc-1") + endpoint + carray(cs("zone") + cs("a") + NO_TAGS) + NO_TAGS
    assert decode_record(member_key(19, "app", "m1"), value) == StreamsGroupMember(
        19,
        "app",
        "m1",
        None,
        "rack-a",
        "app-StreamThread-1",
        "/10.0.0.2",
        300_000,
        2,
        "proc-1",
        StreamsEndpoint("app-1.local", 8080),
        (KeyValue("zone", "a"),),
        False,
    )
    no_endpoint = i16(0) + head + cs("proc-1") + i8(-1) + carray() + NO_TAGS
    assert decode_record(member_key(19, "app", "m1"), no_endpoint).user_endpoint is None  # type: ignore[union-attr]


def test_streams_group_topology_known_bytes() -> None:
    changelog = cs("app-store-changelog") + i32(0) + i16(3) + carray(cs("cleanup.policy") + cs("compact") + NO_TAGS)
    copartition = carray(i16(0), i16(1)) + carray() + carray() + NO_TAGS
    subtopology = (
        cs("0")
        + carray(cs("orders"), cs("payments"))
        + carray()
        + carray(changelog + NO_TAGS)
        + carray(cs("app-repartition"))
        + carray()
        + carray(copartition)
        + NO_TAGS
    )
    value = i16(0) + i32(1) + carray(subtopology) + NO_TAGS
    store = StreamsTopic("app-store-changelog", 0, 3, (KeyValue("cleanup.policy", "compact"),))
    expected = Subtopology(
        "0", ["orders", "payments"], [], (store,), ["app-repartition"], (), (CopartitionGroup([0, 1], [], []),)
    )
    assert decode_record(group_key(23, "app"), value) == StreamsGroupTopology(23, "app", 1, (expected,), False)


def test_streams_group_current_member_assignment_known_bytes() -> None:
    active = carray(cs("0") + carray(i32(1)) + NO_TAGS)
    value = i16(0) + i32(3) + i32(2) + i8(1) + active + carray() + carray() + active + carray() + carray() + NO_TAGS
    record = decode_record(member_key(22, "app", "m1"), value)
    assert record == RECORD_CLASSES[22](22, "app", "m1", 3, 2, 1, *[(TaskIds("0", [1]),), (), ()] * 2, False)


def test_streams_group_resolved_topic_ids_known_bytes() -> None:
    value = i16(0) + i32(4) + carray(cs("0") + carray(UUID, bytes(16)) + NO_TAGS) + NO_TAGS
    assert decode_record(group_key(24, "app"), value) == StreamsGroupResolvedTopicIds(
        24, "app", 4, (ResolvedTopicIds("0", [TOPIC_ID, "0" * 32]),), False
    )


# ------------------------------------------------------------------------------------ every type


@pytest.mark.parametrize("record_type", sorted(group_layouts.LAYOUTS))
@pytest.mark.parametrize("empty", [None, b""])
def test_tombstones_of_every_type(record_type: int, empty: bytes | None) -> None:
    layout = group_layouts.LAYOUTS[record_type]
    keys = ["g", "m"][: len(layout.key)]
    key = i16(record_type) + b"".join(s(k) for k in keys)
    expected = RECORD_CLASSES[record_type](record_type, *keys, *[None] * len(layout.value.fields), True)
    assert decode_record(key, empty) == expected


@pytest.mark.parametrize("record_type", sorted(group_layouts.LAYOUTS))
def test_unknown_value_version_is_an_error_like_kafka(record_type: int) -> None:
    with pytest.raises(CodecError) as err:
        decode_record(member_key(record_type, "g", "m"), i16(1) + b"\x00" * 40)
    assert (err.value.field, err.value.record_type) == ("value.version", record_type)


def test_unknown_tagged_fields_are_skipped() -> None:
    value = i16(0) + i32(7) + i64(1) + tags((0, b"\x01\x02"), (5, b""))
    assert decode_record(group_key(11, "sg"), value) == ShareGroupMetadata(11, "sg", 7, 1, False)
    streams = i16(0) + i32(7) + i64(1) + tags((0, i32(3)), (2, b"\x01\x02"), (9, b""))
    assert decode_record(group_key(17, "app"), streams) == StreamsGroupMetadata(17, "app", 7, 1, 3, None, False)


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        (group_key(11, "sg"), i16(0) + i32(7), "value.metadata_hash"),
        (member_key(19, "a", "m"), STREAMS_MEMBER_HEAD, "value.user_endpoint"),
        (member_key(19, "a", "m"), STREAMS_MEMBER_HEAD + i8(1), "value.user_endpoint.host"),
        (group_key(24, "a"), i16(0) + i32(1) + carray(cs("0") + uv(3) + UUID), "value.resolved_topic_ids[0].topic_ids"),
        (group_key(15, "sg"), i16(0) + carray() + i8(100), "value.initialized_topics"),
        (member_key(10, "sg", "m"), i16(0) + cs(None) + cs(None), "value.client_id"),
    ],
)
def test_malformed_bytes_name_the_field(key: bytes, value: bytes, field: str) -> None:
    with pytest.raises(CodecError) as err:
        decode_record(key, value)
    assert err.value.field == field
    assert err.value.record_type == int.from_bytes(key[:2], "big")


def any_group_record() -> st.SearchStrategy:
    def of_type(record_type: int) -> st.SearchStrategy:
        layout = group_layouts.LAYOUTS[record_type]
        return records(RECORD_CLASSES[record_type], record_type, layout.key, layout.value, group_layouts.STRUCTS)

    return st.sampled_from(sorted(group_layouts.LAYOUTS)).flatmap(of_type)


@given(any_group_record())
def test_round_trip_through_the_dev_kit_encoder(record: object) -> None:
    key, value = encode_group_record(record)  # type: ignore[arg-type]
    assert decode_record(key, value) == record
    json.dumps(record_to_json(decode_record(key, value)))  # `lagwatch offsets decode` shows every type


@given(any_group_record())
def test_every_truncation_raises_codec_error_naming_a_field(record: object) -> None:
    key, value = encode_group_record(record)  # type: ignore[arg-type]
    for end in range(len(key)):
        with pytest.raises(CodecError) as err:
            decode_record(key[:end], value)
        assert err.value.field.startswith("key.")
    for end in range(1, len(value or b"")):  # an empty value would be a tombstone
        with pytest.raises(CodecError) as err:
            decode_record(key, value[:end])  # type: ignore[index]
        assert err.value.field.startswith("value.")


def decodes_or_codec_error(key: bytes, value: bytes | None) -> None:
    record = decoded_or_codec_error(decode_record, key, value)
    assert record is None or isinstance(record, tuple(RECORD_CLASSES.values()))


@given(st.sampled_from(sorted(group_layouts.LAYOUTS)), st.binary(max_size=24), st.binary(max_size=200))
def test_random_bytes_behind_group_types_never_raise_anything_but_codec_error(
    record_type: int, key: bytes, value: bytes
) -> None:
    decodes_or_codec_error(i16(record_type) + s("g") + s("m") + key, i16(0) + value)


@given(any_group_record(), st.data())
def test_corrupted_records_never_raise_anything_but_codec_error(record: object, data: st.DataObject) -> None:
    key, value = encode_group_record(record)  # type: ignore[arg-type]
    decodes_or_codec_error(key, corrupted(data, value or b"\x00\x00"))


@pytest.mark.parametrize("record_type", sorted(group_layouts.LAYOUTS))
def test_the_records_hold_their_layouts_fields_in_order(record_type: int) -> None:
    """The decoder builds a record from its key's and value's fields by position, the encoder reads them by name."""
    layout = group_layouts.LAYOUTS[record_type]
    names = [field.name for field in (*layout.key, *layout.value.fields)]
    assert [field.name for field in dataclasses.fields(RECORD_CLASSES[record_type])] == [
        "record_type",
        *names,
        "tombstone",
    ]
