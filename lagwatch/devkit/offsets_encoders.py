"""Encoders of the records the Kafka group coordinator writes into ``__consumer_offsets``, byte for byte as Kafka
writes them, by the layouts the decoder reads (shared/records/offsets_layouts.py). Only the offsets-topic writer, the
tests and the benchmarks write such records (the services only read them), so the encoders live in the dev kit.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter
from typing import Any

from lagwatch.shared.records import offsets_layouts as layouts
from lagwatch.shared.records.offsets_codec import GroupMember
from lagwatch.shared.records.offsets_layouts import Field, Layout, Nested, since

# A member's subscription bytes: written for the demo's and the tests' groups, never read by lagwatch.
CONSUMER_PROTOCOL_SUBSCRIPTION = Layout(
    "ConsumerProtocolSubscription",
    range(4),
    range(0),
    (
        Field("topics", "[]string"),
        Field("user_data", "bytes?"),
        Field("owned_partitions", layouts.TOPIC_PARTITIONS, since(1)),
        Field("generation_id", "int32", since(2)),
        Field("rack_id", "string?", since(3)),
    ),
)

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_MEMBER_VALUES = attrgetter(*(field.name for field in layouts.GROUP_MEMBER))  # a GroupMember's, in the layout's order


def _length(out: bytearray, n: int, compact: bool, classic: struct.Struct = _I32) -> None:
    """A length or count, -1 for null: flexible, an unsigned varint of n + 1; classic, `classic`'s integer."""
    if not compact:
        out += classic.pack(n)
        return
    n += 1
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _string(out: bytearray, text: str | None, compact: bool) -> None:
    data = b"" if text is None else text.encode()
    if len(data) > layouts.MAX_STRING_LENGTH:
        raise ValueError(f"string of {len(data)} bytes is longer than Kafka allows ({layouts.MAX_STRING_LENGTH})")
    _length(out, -1 if text is None else len(data), compact, _I16)
    out += data


def _bytes(out: bytearray, data: bytes | None, compact: bool) -> None:
    _length(out, -1 if data is None else len(data), compact)
    out += data or b""


def _uuid(out: bytearray, topic_id: str, compact: bool) -> None:
    raw = bytes.fromhex(topic_id)
    if len(raw) != 16:
        raise ValueError(f"topic id must be 32 hex digits, not {topic_id!r}")
    out += raw


def _integer(layout: str) -> Callable[[bytearray, int | None, bool], None]:
    pack = struct.Struct(layout).pack

    def write(out: bytearray, n: int | None, compact: bool) -> None:
        out += pack(0 if n is None else n)  # Kafka's default for a missing integer is 0

    return write


def _int32s(out: bytearray, values: Sequence[int], compact: bool) -> None:
    _length(out, len(values), compact)
    out += struct.pack(f">{len(values)}i", *values)


def _int16s(out: bytearray, values: Sequence[int], compact: bool) -> None:
    _length(out, len(values), compact)
    out += struct.pack(f">{len(values)}h", *values)


def _strings(out: bytearray, texts: Sequence[str], compact: bool) -> None:
    _length(out, len(texts), compact)
    for text in texts:
        _string(out, text, compact)


def _uuids(out: bytearray, topic_ids: Sequence[str], compact: bool) -> None:
    _length(out, len(topic_ids), compact)
    for topic_id in topic_ids:
        _uuid(out, topic_id, compact)


_WRITERS: dict[str, Callable[[bytearray, Any, bool], None]] = {
    "int8": _integer(">b"),
    "int16": _integer(">h"),
    "uint16": _integer(">H"),
    "int32": _integer(">i"),
    "int64": _integer(">q"),
    "string": _string,
    "string?": _string,
    "bytes": _bytes,
    "bytes?": _bytes,
    "uuid": _uuid,
    "[]int32": _int32s,
    "[]string": _strings,
    "[]int16": _int16s,
    "[]uuid": _uuids,
}


def _write_field(
    out: bytearray, kind: str | tuple[Field, ...] | Nested, version: int, compact: bool, value: Any
) -> None:
    if isinstance(kind, str):
        _WRITERS[kind](out, value, compact)
    elif isinstance(kind, Nested):  # nullable: -1 for null, 1 before the struct
        out += _I8.pack(-1 if value is None else 1)
        if value is not None:
            _write(out, kind.fields, version, compact, value)
    else:
        _length(out, len(value), compact)
        for item in value:
            _write(out, kind, version, compact, item)


def _write(out: bytearray, fields: tuple[Field, ...], version: int, compact: bool, values: Sequence[Any]) -> None:
    """`values` in the order of `fields` (an array of structs: a sequence of such sequences); the fields `version`
    lacks are left out, as the decoder's reading of the same layout expects, and a tagged field is written in the
    tagged fields (in tag order, as Kafka writes them) unless its value is None."""
    tagged: list[tuple[int, bytes]] = []
    for (_, kind, versions, tag), value in zip(fields, values, strict=True):
        if version not in versions:
            continue
        if tag is None:
            _write_field(out, kind, version, compact, value)
        elif compact and value is not None:
            field_bytes = bytearray()
            _write_field(field_bytes, kind, version, compact, value)
            tagged.append((tag, bytes(field_bytes)))
    if compact:
        _length(out, len(tagged) - 1, True)  # the count, as an unsigned varint
        for tag, encoded in sorted(tagged):
            _length(out, tag - 1, True)
            _length(out, len(encoded) - 1, True)
            out += encoded


def encode_key(record_type: int, fields: tuple[Field, ...], *values: Any) -> bytes:
    """A coordinator record's key: the record type, then `values` by `fields` (keys are never flexible)."""
    out = bytearray(_I16.pack(record_type))
    _write(out, fields, 0, False, values)
    return bytes(out)


def encode_value(layout: Layout, version: int, *values: Any) -> bytes:
    """A coordinator record's value: `version`, then `values` in the order of `layout`'s fields."""
    if version not in layout.versions:
        raise ValueError(f"{layout.name} version must be {layout.versions[0]}-{layout.versions[-1]}, not {version}")
    out = bytearray(_I16.pack(version))
    _write(out, layout.fields, version, version in layout.flexible, values)
    return bytes(out)


def encode_offset_commit_key(group: str, topic: str, partition: int, version: int = 1) -> bytes:
    if version not in layouts.OFFSET_COMMIT_TYPES:
        raise ValueError(f"offset commit key version must be 0-1, not {version}")
    return encode_key(version, layouts.OFFSET_COMMIT_KEY, group, topic, partition)


def encode_offset_commit_value(
    offset: int,
    commit_timestamp: int,
    *,
    metadata: str = "",
    leader_epoch: int = -1,
    expire_timestamp: int = -1,
    version: int = 3,
) -> bytes:
    """An OffsetCommitValue; fields its version lacks (leader epoch before v3, expire timestamp outside v1) are left
    out."""
    layout = layouts.OFFSET_COMMIT_VALUE
    return encode_value(layout, version, offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def encode_group_metadata_key(group: str) -> bytes:
    return encode_key(layouts.GROUP_METADATA_TYPE, layouts.GROUP_METADATA_KEY, group)


def encode_group_metadata_value(
    *,
    protocol_type: str = "consumer",
    generation: int,
    protocol: str | None,
    leader: str | None,
    members: Sequence[GroupMember],
    current_state_timestamp: int = -1,
    version: int = 3,
) -> bytes:
    """A GroupMetadataValue; member fields the version lacks are dropped."""
    head = (protocol_type, generation, protocol, leader, current_state_timestamp)
    return encode_value(layouts.GROUP_METADATA_VALUE, version, *head, [_MEMBER_VALUES(member) for member in members])


def encode_assignment(partitions: Mapping[str, Sequence[int]], version: int = 0) -> bytes:
    """A ConsumerProtocolAssignment (the same layout in versions 0-3), without user data."""
    return encode_value(layouts.CONSUMER_PROTOCOL_ASSIGNMENT, version, list(partitions.items()), None)


def encode_subscription(topics: Sequence[str], version: int = 0) -> bytes:
    """A ConsumerProtocolSubscription: no user data, no owned partitions (v1+), generation -1 (v2+), no rack (v3+)."""
    return encode_value(CONSUMER_PROTOCOL_SUBSCRIPTION, version, topics, None, [], -1, None)


def encode_consumer_group_member_key(group: str, member_id: str) -> bytes:
    return encode_key(layouts.CONSUMER_GROUP_MEMBER_TYPE, layouts.MEMBER_KEY, group, member_id)


def encode_consumer_group_member_value(
    *,
    client_id: str,
    client_host: str,
    instance_id: str | None = None,
    rack_id: str | None = None,
    subscribed_topics: Sequence[str] = (),
    subscribed_regex: str | None = None,
    rebalance_timeout: int = -1,
    server_assignor: str | None = None,
) -> bytes:
    """A ConsumerGroupMemberMetadataValue v0 without the classic-member tagged field."""
    ids = (instance_id, rack_id, client_id, client_host)
    subscription = (subscribed_topics, subscribed_regex, rebalance_timeout, server_assignor)
    return encode_value(layouts.CONSUMER_GROUP_MEMBER_VALUE, 0, *ids, *subscription)


def encode_consumer_group_assignment_key(group: str, member_id: str) -> bytes:
    return encode_key(layouts.CONSUMER_GROUP_ASSIGNMENT_TYPE, layouts.MEMBER_KEY, group, member_id)


def encode_consumer_group_assignment_value(
    *,
    member_epoch: int,
    partitions: Mapping[str, Sequence[int]],
    previous_member_epoch: int = -1,
    state: int = 0,
    pending_revocation: Mapping[str, Sequence[int]] | None = None,
) -> bytes:
    """A ConsumerGroupCurrentMemberAssignmentValue v0; topics are keyed by topic id (32 hex digits)."""
    topics = (list(partitions.items()), list((pending_revocation or {}).items()))
    return encode_value(layouts.CONSUMER_GROUP_ASSIGNMENT_VALUE, 0, member_epoch, previous_member_epoch, state, *topics)
