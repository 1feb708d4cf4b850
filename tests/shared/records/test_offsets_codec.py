"""The ``__consumer_offsets`` codec: what each record looks like on the wire and what it decodes to.

Expected bytes are spelled out by hand from Kafka's JSON schemas with the small writers below (never with
the dev kit's encoders), so an encoder and decoder that agree on a wrong layout cannot pass. Property
tests then check that encoders and decoder round-trip and that damaged bytes only ever raise CodecError.
"""

from __future__ import annotations

import dataclasses
import json
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
from lagwatch.shared.records import offsets_codec
from lagwatch.shared.records.group_records import RECORD_CLASSES as GROUP_RECORD_CLASSES
from lagwatch.shared.records.offsets_codec import (
    CodecError,
    ConsumerGroupAssignment,
    ConsumerGroupMember,
    GroupMember,
    GroupMetadata,
    OffsetCommit,
    OtherRecord,
    decode_assignment,
    decode_offset_commit_key,
    decode_offset_commit_value,
    decode_record,
)
from lagwatch.shared.records.offsets_layouts import GROUP_MEMBER, GROUP_METADATA_VALUE, OFFSET_COMMIT_VALUE
from tests.shared.records.layout_strategies import corrupted
from tests.shared.records.wire_bytes import NO_TAGS, cs, i8, i16, i32, i64, s, tags, uv

RECORD_CLASSES = (
    OffsetCommit,
    GroupMetadata,
    ConsumerGroupMember,
    ConsumerGroupAssignment,
    OtherRecord,
    *GROUP_RECORD_CLASSES.values(),
)

# ------------------------------------------------------------------ hand-written wire writers (big-endian)


def b32(data: bytes | None) -> bytes:
    """Classic bytes: int32 length, -1 for null."""
    return i32(-1) if data is None else i32(len(data)) + data


def cb(data: bytes) -> bytes:
    """Compact bytes."""
    return uv(len(data) + 1) + data


# ------------------------------------------------------------------------------------- offset commits


def test_offset_commit_known_bytes() -> None:
    """Key type 1 (group "g", topic "t", partition 3) and a v3 value, byte by byte."""
    key = bytes.fromhex("000100016700017400000003")
    value = bytes.fromhex(
        "0003"  # value version 3
        "000000000000002a"  # offset 42
        "00000007"  # leader epoch 7
        "0001"
        "6d"  # metadata "m"
        "00000000000003e8"  # commit timestamp 1000
    )
    assert encode_offset_commit_key("g", "t", 3) == key
    assert encode_offset_commit_value(42, 1000, metadata="m", leader_epoch=7) == value
    expected = OffsetCommit(
        key_version=1,
        value_version=3,
        group="g",
        topic="t",
        partition=3,
        offset=42,
        leader_epoch=7,
        metadata="m",
        commit_timestamp=1000,
        expire_timestamp=None,
        tombstone=False,
    )
    decoded = decode_record(key, value)
    assert decoded == expected
    # A record indistinguishable from the dataclass's own: equal, hashable, frozen.
    assert type(decoded) is OffsetCommit and hash(decoded) == hash(expected)
    with pytest.raises(dataclasses.FrozenInstanceError):
        decoded.offset = 0  # type: ignore[misc]


# Per value version: the bytes Kafka writes for offset 42, leader epoch 7, metadata "meta", commit
# timestamp 1000, expire timestamp 2000; and the fields that version carries (others decode as None).
OFFSET_VALUES = {
    0: (i16(0) + i64(42) + s("meta") + i64(1000), {}),
    1: (i16(1) + i64(42) + s("meta") + i64(1000) + i64(2000), {"expire_timestamp": 2000}),
    2: (i16(2) + i64(42) + s("meta") + i64(1000), {}),
    3: (i16(3) + i64(42) + i32(7) + s("meta") + i64(1000), {"leader_epoch": 7}),
    4: (i16(4) + i64(42) + i32(7) + cs("meta") + i64(1000) + NO_TAGS, {"leader_epoch": 7}),
}


@pytest.mark.parametrize("key_version", [0, 1])
@pytest.mark.parametrize("value_version", sorted(OFFSET_VALUES))
def test_offset_commit_every_key_and_value_version(key_version: int, value_version: int) -> None:
    key = i16(key_version) + s("orders-app") + s("orders") + i32(11)
    value, present = OFFSET_VALUES[value_version]
    assert encode_offset_commit_key("orders-app", "orders", 11, version=key_version) == key
    encoded = encode_offset_commit_value(
        42, 1000, metadata="meta", leader_epoch=7, expire_timestamp=2000, version=value_version
    )
    assert encoded == value
    expected = {"leader_epoch": None, "expire_timestamp": None, **present}
    assert decode_record(key, value) == OffsetCommit(
        key_version=key_version,
        value_version=value_version,
        group="orders-app",
        topic="orders",
        partition=11,
        offset=42,
        metadata="meta",
        commit_timestamp=1000,
        tombstone=False,
        **expected,
    )


@pytest.mark.parametrize("empty", [None, b""])
def test_offset_commit_tombstone(empty: bytes | None) -> None:
    record = decode_record(i16(1) + s("g") + s("t") + i32(0), empty)
    assert record == OffsetCommit(1, None, "g", "t", 0, None, None, None, None, None, True)


def test_flexible_offset_commit_skips_unknown_tagged_fields() -> None:
    value = i16(4) + i64(5) + i32(-1) + cs("") + i64(99) + tags((0, b"abc"), (7, b""), (300, b"\x01" * 200))
    record = decode_record(encode_offset_commit_key("g", "t", 0), value)
    assert isinstance(record, OffsetCommit)
    assert (record.offset, record.leader_epoch, record.metadata, record.commit_timestamp) == (5, -1, "", 99)


def test_trailing_bytes_after_the_last_field_are_ignored_like_kafka() -> None:
    value = OFFSET_VALUES[3][0] + b"future field"
    record = decode_record(encode_offset_commit_key("g", "t", 0), value)
    assert isinstance(record, OffsetCommit) and record.offset == 42


def test_any_bytes_like_buffer_is_accepted() -> None:
    key, value = encode_offset_commit_key("g", "t", 2), OFFSET_VALUES[3][0]
    expected = decode_record(key, value)
    assert decode_record(bytearray(key), memoryview(value)) == expected
    assert decode_record(memoryview(key), bytearray(value)) == expected


# ------------------------------------------------------------------------------------- group metadata

ALICE = GroupMember(
    member_id="consumer-1-a",
    group_instance_id="static-a",
    client_id="consumer-1",
    client_host="/10.0.0.1",
    rebalance_timeout=300000,
    session_timeout=45000,
    subscription=b"sub-a",
    assignment=b"asg-a",
)
BOB = GroupMember(
    member_id="consumer-2-b",
    group_instance_id=None,
    client_id="consumer-2",
    client_host="/10.0.0.2",
    rebalance_timeout=60000,
    session_timeout=10000,
    subscription=b"",
    assignment=b"",
)


def member_bytes(m: GroupMember, version: int) -> bytes:
    """MemberMetadata as GroupMetadataValue `version` lays it out."""
    if version >= 4:
        return (
            cs(m.member_id)
            + cs(m.group_instance_id)
            + cs(m.client_id)
            + cs(m.client_host)
            + i32(m.rebalance_timeout or 0)
            + i32(m.session_timeout)
            + cb(m.subscription)
            + cb(m.assignment)
            + NO_TAGS
        )
    return (
        s(m.member_id)
        + (s(m.group_instance_id) if version >= 3 else b"")
        + s(m.client_id)
        + s(m.client_host)
        + (i32(m.rebalance_timeout or 0) if version >= 1 else b"")
        + i32(m.session_timeout)
        + b32(m.subscription)
        + b32(m.assignment)
    )


def group_value_bytes(version: int, members: list[GroupMember]) -> bytes:
    """protocol_type "consumer", generation 5, protocol "range", leader = first member, state time 1234."""
    text = cs if version >= 4 else s
    leader = members[0].member_id if members else None
    head = i16(version) + text("consumer") + i32(5) + text("range") + text(leader)
    if version >= 2:
        head += i64(1234)
    count = uv(len(members) + 1) if version >= 4 else i32(len(members))
    body = b"".join(member_bytes(m, version) for m in members)
    return head + count + body + (NO_TAGS if version >= 4 else b"")


def as_decoded(m: GroupMember, version: int) -> GroupMember:
    """What survives a trip through `version`: no instance id before v3, no rebalance timeout in v0."""
    return GroupMember(
        m.member_id,
        m.group_instance_id if version >= 3 else None,
        m.client_id,
        m.client_host,
        m.rebalance_timeout if version >= 1 else None,
        m.session_timeout,
        m.subscription,
        m.assignment,
    )


def test_group_metadata_key_known_bytes() -> None:
    assert encode_group_metadata_key("g1") == bytes.fromhex("000200026731")


def test_group_metadata_v3_known_bytes() -> None:
    """One member, written out field by field."""
    member = GroupMember("m", "i", "c", "h", 7, 8, b"\x01", b"")
    value = bytes.fromhex(
        "0003"  # value version 3
        "0008"
        "636f6e73756d6572"  # protocol type "consumer"
        "00000002"  # generation 2
        "0005"
        "72616e6765"  # protocol "range"
        "0001"
        "6d"  # leader "m"
        "ffffffffffffffff"  # current state timestamp -1
        "00000001"  # one member:
        "0001"
        "6d"  # member id "m"
        "0001"
        "69"  # group instance id "i"
        "0001"
        "63"  # client id "c"
        "0001"
        "68"  # client host "h"
        "00000007"  # rebalance timeout 7
        "00000008"  # session timeout 8
        "00000001"
        "01"  # subscription
        "00000000"  # assignment (empty)
    )
    encoded = encode_group_metadata_value(generation=2, protocol="range", leader="m", members=[member])
    assert encoded == value
    record = decode_record(encode_group_metadata_key("grp"), value)
    assert record == GroupMetadata(2, 3, "grp", "consumer", 2, "range", "m", -1, (member,), False)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_every_value_version(version: int) -> None:
    value = group_value_bytes(version, [ALICE, BOB])
    encoded = encode_group_metadata_value(
        generation=5,
        protocol="range",
        leader=ALICE.member_id,
        members=[ALICE, BOB],
        current_state_timestamp=1234,
        version=version,
    )
    assert encoded == value
    record = decode_record(encode_group_metadata_key("orders-app"), value)
    assert record == GroupMetadata(
        key_version=2,
        value_version=version,
        group="orders-app",
        protocol_type="consumer",
        generation=5,
        protocol="range",
        leader=ALICE.member_id,
        current_state_timestamp=1234 if version >= 2 else None,
        members=(as_decoded(ALICE, version), as_decoded(BOB, version)),
        tombstone=False,
    )


def test_group_instance_ids_exist_from_v3() -> None:
    for version, expected in [(2, None), (3, "static-a"), (4, "static-a")]:
        record = decode_record(encode_group_metadata_key("g"), group_value_bytes(version, [ALICE]))
        assert isinstance(record, GroupMetadata)
        assert record.members[0].group_instance_id == expected


def test_empty_group_has_null_protocol_and_leader() -> None:
    value = i16(3) + s("consumer") + i32(0) + s(None) + s(None) + i64(-1) + i32(0)
    record = decode_record(encode_group_metadata_key("g"), value)
    assert isinstance(record, GroupMetadata)
    assert (record.protocol, record.leader, record.members) == (None, None, ())
    assert encode_group_metadata_value(generation=0, protocol=None, leader=None, members=[]) == value


@pytest.mark.parametrize("empty", [None, b""])
def test_group_metadata_tombstone(empty: bytes | None) -> None:
    record = decode_record(encode_group_metadata_key("gone"), empty)
    assert record == GroupMetadata(2, None, "gone", None, None, None, None, None, (), True)


def test_flexible_group_metadata_skips_unknown_tagged_fields() -> None:
    """v4 puts a tagged-fields section after every member and after the whole value."""
    member = cs("m") + cs(None) + cs("c") + cs("h") + i32(1) + i32(2) + cb(b"") + cb(b"") + tags((3, b"member extra"))
    value = (
        i16(4)
        + cs("consumer")
        + i32(9)
        + cs("range")
        + cs("m")
        + i64(77)
        + uv(2)
        + member
        + tags((0, b"x"), (1, b"yz"))
    )
    record = decode_record(encode_group_metadata_key("g"), value)
    assert record == GroupMetadata(
        2, 4, "g", "consumer", 9, "range", "m", 77, (GroupMember("m", None, "c", "h", 1, 2, b"", b""),), False
    )


def test_error_names_the_member_and_field() -> None:
    """Cut inside member 1's client host: the error says exactly where."""
    value = group_value_bytes(3, [ALICE, BOB])
    cut = value.index(s(BOB.client_host)) + 4
    with pytest.raises(CodecError) as err:
        decode_record(encode_group_metadata_key("g"), value[:cut])
    assert err.value.field == "value.members[1].client_host"
    assert err.value.record_type == 2
    assert "value.members[1].client_host" in str(err.value)
    assert "truncated" in str(err.value)


# --------------------------------------------------------------------- consumer protocol (member bytes)


def test_assignment_known_bytes() -> None:
    """ConsumerProtocolAssignment v0: topics with their partitions, then (null) user data."""
    data = bytes.fromhex(
        "0000"  # version 0
        "00000002"  # two topics
        "0001"
        "61"
        "00000002"
        "00000000"
        "00000003"  # "a": [0, 3]
        "0001"
        "62"
        "00000000"  # "b": []
        "ffffffff"  # user data: null
    )
    assert encode_assignment({"a": [0, 3], "b": []}) == data
    assert decode_assignment(data) == {"a": [0, 3], "b": []}
    member = GroupMember("m", None, "c", "h", 1, 1, b"", data)
    assert member.partitions() == {"a": [0, 3], "b": []}


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignment_versions_share_one_layout(version: int) -> None:
    data = i16(version) + i32(1) + s("orders") + i32(2) + i32(4) + i32(5) + b32(None)
    assert encode_assignment({"orders": [4, 5]}, version=version) == data
    assert decode_assignment(data) == {"orders": [4, 5]}


def test_assignment_of_a_newer_version_is_read_with_the_known_layout_like_kafka() -> None:
    data = i16(9) + i32(1) + s("t") + i32(1) + i32(0) + b32(b"user data") + b"fields from the future"
    assert decode_assignment(data) == {"t": [0]}


def test_empty_assignment_means_nothing_assigned_yet() -> None:
    assert GroupMember("m", None, "c", "h", 1, 1, b"", b"").partitions() == {}


@pytest.mark.parametrize(
    "data",
    [
        i16(0) + i32(1) + s("t") + i32(2) + i32(0),  # second partition missing
        i16(0) + i32(1) + s("t") + i32(0),  # user data missing
        i16(-1) + i32(0) + b32(None),  # negative version
        b"\x00",  # not even a version
    ],
)
def test_undecodable_assignment_raises_codec_error_on_the_assignment(data: bytes) -> None:
    with pytest.raises(CodecError) as err:
        GroupMember("m", None, "c", "h", 1, 1, b"", data).partitions()
    assert err.value.field == "assignment"


@pytest.mark.parametrize(
    ("version", "tail"),
    [
        (0, b""),
        (1, i32(0)),  # no owned partitions
        (2, i32(0) + i32(-1)),  # ... and generation -1
        (3, i32(0) + i32(-1) + s(None)),  # ... and no rack id
    ],
)
def test_subscription_known_bytes(version: int, tail: bytes) -> None:
    expected = i16(version) + i32(2) + s("a") + s("b") + b32(None) + tail
    assert encode_subscription(["a", "b"], version=version) == expected


# ------------------------------------------------------------------- KIP-848 (new consumer protocol)

TOPIC_ID = "0123456789abcdef0123456789abcdef"
OTHER_TOPIC_ID = "fedcba9876543210fedcba9876543210"


def test_consumer_group_member_known_bytes() -> None:
    """Record type 5, ConsumerGroupMemberMetadataValue v0 (flexible), with a classic-member tag."""
    key = i16(5) + s("grp") + s("member-A")
    value = (
        i16(0)
        + cs("inst-1")
        + cs(None)
        + cs("client-1")
        + cs("/10.0.0.1")
        + uv(3)
        + cs("orders")
        + cs("payments")  # subscribed topic names
        + cs(None)
        + i32(45000)
        + cs("uniform")  # regex, rebalance timeout, server assignor
        + tags((0, i32(10000) + uv(1)))  # classic member metadata: session timeout, no protocols
    )
    assert decode_record(key, value) == ConsumerGroupMember(
        record_type=5,
        group="grp",
        member_id="member-A",
        client_id="client-1",
        client_host="/10.0.0.1",
        instance_id="inst-1",
        tombstone=False,
    )
    assert encode_consumer_group_member_key("grp", "member-A") == key
    encoded = encode_consumer_group_member_value(
        client_id="client-1",
        client_host="/10.0.0.1",
        instance_id="inst-1",
        subscribed_topics=["orders", "payments"],
        rebalance_timeout=45000,
        server_assignor="uniform",
    )
    assert encoded == value[: -len(tags((0, i32(10000) + uv(1))))] + NO_TAGS


def test_consumer_group_assignment_known_bytes() -> None:
    """Record type 8, ConsumerGroupCurrentMemberAssignmentValue v0, with KIP-1251 assignment epochs."""
    key = i16(8) + s("grp") + s("member-A")
    epochs = uv(4) + i32(3) + i32(3) + i32(3)
    value = (
        i16(0)
        + i32(12)
        + i32(11)
        + i8(0)  # member epoch, previous epoch, state
        + uv(2)
        + bytes.fromhex(TOPIC_ID)
        + uv(4)
        + i32(0)
        + i32(1)
        + i32(2)
        + tags((0, epochs))
        + uv(2)
        + bytes.fromhex(OTHER_TOPIC_ID)
        + uv(2)
        + i32(9)
        + NO_TAGS  # pending revocation
        + NO_TAGS
    )
    assert decode_record(key, value) == ConsumerGroupAssignment(
        record_type=8,
        group="grp",
        member_id="member-A",
        member_epoch=12,
        partitions={TOPIC_ID: [0, 1, 2]},
        tombstone=False,
    )
    named = decode_record(key, value, topic_names={TOPIC_ID: "orders"})
    assert isinstance(named, ConsumerGroupAssignment) and named.partitions == {"orders": [0, 1, 2]}
    assert encode_consumer_group_assignment_key("grp", "member-A") == key
    encoded = encode_consumer_group_assignment_value(
        member_epoch=12,
        previous_member_epoch=11,
        partitions={TOPIC_ID: [0, 1, 2]},
        pending_revocation={OTHER_TOPIC_ID: [9]},
    )
    assert encoded == value.replace(tags((0, epochs)), NO_TAGS)


@pytest.mark.parametrize("empty", [None, b""])
def test_kip848_tombstones(empty: bytes | None) -> None:
    member = decode_record(encode_consumer_group_member_key("g", "m"), empty)
    assert member == ConsumerGroupMember(5, "g", "m", None, None, None, True)
    assignment = decode_record(encode_consumer_group_assignment_key("g", "m"), empty)
    assert assignment == ConsumerGroupAssignment(8, "g", "m", None, {}, True)


@pytest.mark.parametrize("record_type", [3, 4, 6, 7, 16, 25, 32767])
def test_other_record_types_are_passed_over_never_an_error(record_type: int) -> None:
    assert decode_record(i16(record_type) + b"anything", b"\xff garbage") == OtherRecord(record_type, False)
    assert decode_record(i16(record_type), None) == OtherRecord(record_type, True)


# ------------------------------------------------------------------------------------ version errors


@pytest.mark.parametrize("record_type", [-1, -2, -32768])
def test_negative_record_type_is_an_error(record_type: int) -> None:
    with pytest.raises(CodecError) as err:
        decode_record(i16(record_type) + s("g"), None)
    assert err.value.field == "key.version"


@pytest.mark.parametrize(
    ("key", "bad_version"),
    [
        (encode_offset_commit_key("g", "t", 0), 5),
        (encode_offset_commit_key("g", "t", 0), -1),
        (encode_group_metadata_key("g"), 5),
        (encode_consumer_group_member_key("g", "m"), 1),
        (encode_consumer_group_assignment_key("g", "m"), 1),
    ],
)
def test_unknown_value_version_is_an_error_like_kafka(key: bytes, bad_version: int) -> None:
    with pytest.raises(CodecError) as err:
        decode_record(key, i16(bad_version) + b"\x00" * 40)
    assert err.value.field == "value.version"
    assert str(bad_version) in str(err.value)


# ----------------------------------------------------------------------------------- malformed bytes


@pytest.mark.parametrize(
    ("key", "value", "field", "reason"),
    [
        (b"", None, "key.version", "truncated"),
        (b"\x00", None, "key.version", "truncated"),
        (i16(1) + s(None) + s("t") + i32(0), None, "key.group", "null"),
        (i16(1) + i16(-2) + s("t") + i32(0), None, "key.group", "negative"),
        (i16(1) + s("g") + i16(5) + b"ab", None, "key.topic", "truncated"),
        (i16(1) + i16(2) + b"\xff\xfe" + s("t") + i32(0), None, "key.group", "UTF-8"),
        (i16(1) + s("g") + s("t") + b"\x00\x00", None, "key.partition", "truncated"),
        (encode_offset_commit_key("g", "t", 0), i16(3) + i64(1) + b"\x00", "value.leader_epoch", "truncated"),
        (
            encode_offset_commit_key("g", "t", 0),
            i16(4) + i64(1) + i32(0) + uv(40000) + b"x",
            "value.metadata",
            "exceeds",
        ),
        (
            encode_offset_commit_key("g", "t", 0),
            i16(4) + i64(1) + i32(0) + b"\xff" * 5 + b"\x01",
            "value.metadata",
            "varint",
        ),
        (
            encode_group_metadata_key("g"),
            i16(0) + s("c") + i32(1) + s(None) + s(None) + i32(1000),
            "value.members",
            "cannot fit",
        ),
        (
            encode_group_metadata_key("g"),
            i16(0) + s("c") + i32(1) + s(None) + s(None) + i32(-1),
            "value.members",
            "null",
        ),
    ],
)
def test_malformed_bytes_name_the_field(key: bytes, value: bytes | None, field: str, reason: str) -> None:
    with pytest.raises(CodecError) as err:
        decode_record(key, value)
    assert err.value.field == field
    assert reason in str(err.value)


def test_codec_error_survives_pickling() -> None:
    error = CodecError("value.offset", "truncated", 1)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.field, copy.reason, copy.record_type, str(copy)) == (
        "value.offset",
        "truncated",
        1,
        "record type 1: value.offset: truncated",
    )
    assert isinstance(copy, ValueError)


# ------------------------------------------------------------------------------------ property tests

texts = st.text(max_size=12)
int8s = st.integers(-(2**7), 2**7 - 1)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
topic_ids = st.binary(min_size=16, max_size=16).map(bytes.hex)
partition_lists = st.lists(int32s, max_size=5)


@st.composite
def offset_commit_records(draw: st.DrawFn) -> tuple[bytes, bytes, OffsetCommit]:
    key_version, value_version = draw(st.sampled_from([0, 1])), draw(st.integers(0, 4))
    group, topic, partition = draw(texts), draw(texts), draw(int32s)
    offset, epoch, metadata = draw(int64s), draw(int32s), draw(texts)
    commit, expire = draw(int64s), draw(int64s)
    key = encode_offset_commit_key(group, topic, partition, version=key_version)
    value = encode_offset_commit_value(
        offset, commit, metadata=metadata, leader_epoch=epoch, expire_timestamp=expire, version=value_version
    )
    expected = OffsetCommit(
        key_version,
        value_version,
        group,
        topic,
        partition,
        offset,
        epoch if value_version >= 3 else None,
        metadata,
        commit,
        expire if value_version == 1 else None,
        False,
    )
    return key, value, expected


group_members = st.builds(
    GroupMember,
    member_id=texts,
    group_instance_id=st.none() | texts,
    client_id=texts,
    client_host=texts,
    rebalance_timeout=int32s,
    session_timeout=int32s,
    subscription=st.binary(max_size=8),
    assignment=st.dictionaries(texts, partition_lists, max_size=3).map(encode_assignment),
)


@st.composite
def group_metadata_records(draw: st.DrawFn) -> tuple[bytes, bytes, GroupMetadata]:
    version, members = draw(st.integers(0, 4)), draw(st.lists(group_members, max_size=3))
    group, protocol_type, generation = draw(texts), draw(texts), draw(int32s)
    protocol, leader, state_time = draw(st.none() | texts), draw(st.none() | texts), draw(int64s)
    value = encode_group_metadata_value(
        protocol_type=protocol_type,
        generation=generation,
        protocol=protocol,
        leader=leader,
        members=members,
        current_state_timestamp=state_time,
        version=version,
    )
    expected = GroupMetadata(
        2,
        version,
        group,
        protocol_type,
        generation,
        protocol,
        leader,
        state_time if version >= 2 else None,
        tuple(as_decoded(m, version) for m in members),
        False,
    )
    return encode_group_metadata_key(group), value, expected


@st.composite
def consumer_group_member_records(draw: st.DrawFn) -> tuple[bytes, bytes, ConsumerGroupMember]:
    group, member_id, client_id, client_host, instance = (
        draw(texts),
        draw(texts),
        draw(texts),
        draw(texts),
        draw(st.none() | texts),
    )
    value = encode_consumer_group_member_value(
        client_id=client_id,
        client_host=client_host,
        instance_id=instance,
        rack_id=draw(st.none() | texts),
        subscribed_topics=draw(st.lists(texts, max_size=3)),
        subscribed_regex=draw(st.none() | texts),
        rebalance_timeout=draw(int32s),
        server_assignor=draw(st.none() | texts),
    )
    expected = ConsumerGroupMember(5, group, member_id, client_id, client_host, instance, False)
    return encode_consumer_group_member_key(group, member_id), value, expected


@st.composite
def consumer_group_assignment_records(draw: st.DrawFn) -> tuple[bytes, bytes, ConsumerGroupAssignment]:
    group, member_id, epoch = draw(texts), draw(texts), draw(int32s)
    partitions = draw(st.dictionaries(topic_ids, partition_lists, max_size=3))
    value = encode_consumer_group_assignment_value(
        member_epoch=epoch,
        partitions=partitions,
        previous_member_epoch=draw(int32s),
        state=draw(int8s),
        pending_revocation=draw(st.dictionaries(topic_ids, partition_lists, max_size=2)),
    )
    expected = ConsumerGroupAssignment(8, group, member_id, epoch, partitions, False)
    return encode_consumer_group_assignment_key(group, member_id), value, expected


any_known_record = (
    offset_commit_records()
    | group_metadata_records()
    | consumer_group_member_records()
    | consumer_group_assignment_records()
)


@given(any_known_record)
def test_round_trip(record: tuple[bytes, bytes, object]) -> None:
    key, value, expected = record
    assert decode_record(key, value) == expected


@given(group_metadata_records())
def test_member_assignments_round_trip(record: tuple[bytes, bytes, GroupMetadata]) -> None:
    key, value, _ = record
    decoded = decode_record(key, value)
    assert isinstance(decoded, GroupMetadata)
    for member in decoded.members:
        assert encode_assignment(member.partitions()) == member.assignment


@given(any_known_record)
def test_every_truncation_raises_codec_error_naming_a_field(record: tuple[bytes, bytes, object]) -> None:
    key, value, _ = record
    for end in range(len(key)):
        with pytest.raises(CodecError) as err:
            decode_record(key[:end], value)
        assert err.value.field.startswith("key.")
    for end in range(1, len(value)):  # an empty value would be a tombstone
        with pytest.raises(CodecError) as err:
            decode_record(key, value[:end])
        assert err.value.field.startswith("value.")
        assert "truncated" in err.value.reason


def decodes_or_codec_error(key: bytes, value: bytes | None) -> None:
    """The one contract for untrusted bytes: a record (which renders as JSON), or CodecError."""
    try:
        record = decode_record(key, value)
    except CodecError as exc:
        assert exc.field
        return
    assert isinstance(record, RECORD_CLASSES)
    json.dumps(record_to_json(record))


@given(st.binary(max_size=64), st.none() | st.binary(max_size=256))
def test_random_bytes_never_raise_anything_but_codec_error(key: bytes, value: bytes | None) -> None:
    decodes_or_codec_error(key, value)


@given(
    st.sampled_from([i16(t) for t in (0, 1, 2, 5, 8)]),
    st.binary(max_size=40),
    st.sampled_from([i16(v) for v in range(5)]),
    st.binary(max_size=200),
)
def test_random_bytes_behind_known_types_and_versions(
    key_type: bytes, key: bytes, version: bytes, value: bytes
) -> None:
    decodes_or_codec_error(key_type + key, version + value)


@given(any_known_record, st.data())
def test_corrupted_records_never_raise_anything_but_codec_error(
    record: tuple[bytes, bytes, object], data: st.DataObject
) -> None:
    key, value, _ = record
    decodes_or_codec_error(key, corrupted(data, value))


def _decoded_or_field(decode, key: bytes) -> tuple | str:
    try:
        return decode(key)
    except CodecError as exc:
        return exc.field


@given(
    st.sampled_from([i16(0), i16(1)]),
    st.text(max_size=12).map(str.encode) | st.binary(max_size=12),  # any bytes: invalid UTF-8 too
    st.text(max_size=12).map(str.encode),
    st.integers(-(2**31), 2**31 - 1),
    st.binary(max_size=6),
    st.data(),
)
def test_commit_key_decoder_agrees_with_decode_record(
    key_type: bytes, group: bytes, topic: bytes, partition: int, tail: bytes, data: st.DataObject
) -> None:
    """The key decoder's sliced path: the same group, topic and partition as reading the key field by field for
    well-formed keys (trailing bytes included), the same CodecError field for cut, damaged or invalid UTF-8 ones."""
    key = bytearray(key_type + i16(len(group)) + group + i16(len(topic)) + topic + i32(partition) + tail)
    if data.draw(st.booleans()):  # damage it: a cut, or bytes overwritten (lengths, -1, invalid UTF-8)
        key = key[: data.draw(st.integers(2, len(key)))]
        for _ in range(data.draw(st.integers(0, 3))):
            if len(key) > 2:
                key[data.draw(st.integers(2, len(key) - 1))] = data.draw(
                    st.sampled_from([0x00, 0x7F, 0x80, 0xFF, 0xC3])
                )

    def via_record(k: bytes) -> tuple[str, str, int]:
        record = decode_record(k, None)
        assert isinstance(record, OffsetCommit)
        return record.group, record.topic, record.partition

    expected = _decoded_or_field(lambda k: tuple(offsets_codec._read_offset_commit_key(k)), bytes(key))
    assert _decoded_or_field(decode_offset_commit_key, bytes(key)) == expected
    assert _decoded_or_field(via_record, bytes(key)) == expected  # decode_record reads keys through it


@given(offset_commit_records(), st.data())
def test_commit_value_decoder_reads_what_the_layout_states(
    record: tuple[bytes, bytes, OffsetCommit], data: st.DataObject
) -> None:
    """`decode_offset_commit_value` is OFFSET_COMMIT_VALUE read unrolled, for the ingest's hot path: whole, cut or
    damaged, a value gives the fields that reading it by the layout gives, or a CodecError on the same field."""
    value = bytearray(record[1])
    if data.draw(st.booleans()):
        value = value[: data.draw(st.integers(0, len(value)))]
        for _ in range(data.draw(st.integers(0, 3)) if value else 0):
            value[data.draw(st.integers(0, len(value) - 1))] = data.draw(
                st.sampled_from([0x00, 0x04, 0x7F, 0x80, 0xFF])
            )

    def by_layout(v: bytes) -> tuple[object, ...]:
        version, fields = offsets_codec._read_value(OFFSET_COMMIT_VALUE, v)
        return (version, *fields)

    assert _decoded_or_field(decode_offset_commit_value, bytes(value)) == _decoded_or_field(by_layout, bytes(value))


def test_the_records_hold_their_layouts_fields_in_order() -> None:
    """The decoder builds records from a layout's values by position: each record's fields are the layout's."""

    def names(record_class: type) -> list[str]:
        return [field.name for field in dataclasses.fields(record_class)]

    assert names(GroupMember) == [field.name for field in GROUP_MEMBER]
    assert names(GroupMetadata)[3:9] == [field.name for field in GROUP_METADATA_VALUE.fields]
    assert names(OffsetCommit)[5:10] == [field.name for field in OFFSET_COMMIT_VALUE.fields]
