"""Binary codec for the records the Kafka group coordinator writes into ``__consumer_offsets``.

Schemas: Apache Kafka's ``group-coordinator/src/main/resources/common/message/*.json`` and the clients'
``ConsumerProtocolAssignment.json`` / ``ConsumerProtocolSubscription.json``. All integers are big-endian.

Key = int16 record type (the historical "key version"), then fields. Keys are never flexible.

====  =========================================  ======================================================
type  key                                        value versions (``?`` = nullable, ``[]`` = array)
====  =========================================  ======================================================
0, 1  offset commit: group, topic, partition     OffsetCommitValue 0-4: offset i64, leader_epoch i32
      (int32)                                    (v3+), metadata, commit_timestamp i64,
                                                 expire_timestamp i64 (v1 only); v4 flexible
2     group metadata: group                      GroupMetadataValue 0-4: protocol_type, generation
                                                 i32, protocol?, leader?, current_state_timestamp i64
                                                 (v2+), members[]; v4 flexible. Member: member_id,
                                                 group_instance_id? (v3+), client_id, client_host,
                                                 rebalance_timeout i32 (v1+), session_timeout i32,
                                                 subscription bytes, assignment bytes
5     ConsumerGroupMemberMetadata (KIP-848):     0, flexible: instance_id?, rack_id?, client_id,
      group, member_id                           client_host, subscribed_topic_names[],
                                                 subscribed_topic_regex?, rebalance_timeout i32,
                                                 server_assignor?
8     ConsumerGroupCurrentMemberAssignment       0, flexible: member_epoch i32, previous_member_epoch
      (KIP-848): group, member_id                i32, state i8, assigned_partitions[],
                                                 partitions_pending_revocation[]; each
                                                 {topic_id uuid, partitions i32[]}
3+    other consumer/share/streams records    not decoded: ``OtherRecord``
====  =========================================  ======================================================

A member's ``assignment`` bytes are a ConsumerProtocolAssignment (versions 0-3, never flexible): int16
version, [topic, partitions i32[]], user_data bytes?. Kafka parses newer versions with the newest layout
it knows (fields are only ever appended), and so do we.

Primitive types: non-flexible string = int16 length + UTF-8 (-1 = null), bytes = int32 length (-1 = null),
array = int32 count. Flexible versions use unsigned varints (length + 1, 0 = null) and end every struct
with tagged fields (count, then tag, size, data per field); unknown tags are skipped.

Behaviour taken from Kafka's coordinator deserializer: a value version it does not know is an error, a
``None`` value is a tombstone (lagwatch treats an empty value the same), and bytes left over after the
last field are ignored (Kafka reads the fields it knows and never checks what remains). One
deliberate difference: invalid UTF-8 is an error here, where Java would substitute U+FFFD; Kafka's writer
only emits valid UTF-8, so such bytes are corruption and must not invent a new group or topic name.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

__all__ = [
    "CodecError",
    "ConsumerGroupAssignment",
    "ConsumerGroupMember",
    "GroupMember",
    "GroupMetadata",
    "OffsetCommit",
    "OtherRecord",
    "Record",
    "decode_assignment",
    "decode_offset_commit_key",
    "decode_record",
    "encode_assignment",
    "encode_consumer_group_assignment_key",
    "encode_consumer_group_assignment_value",
    "encode_consumer_group_member_key",
    "encode_consumer_group_member_value",
    "encode_group_metadata_key",
    "encode_group_metadata_value",
    "encode_offset_commit_key",
    "encode_offset_commit_value",
    "encode_subscription",
    "record_to_json",
]

# Record types (the key's leading int16).
OFFSET_COMMIT_TYPES = (0, 1)
GROUP_METADATA_TYPE = 2
CONSUMER_GROUP_MEMBER_TYPE = 5
CONSUMER_GROUP_ASSIGNMENT_TYPE = 8

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

_MAX_STRING = 0x7FFF  # Kafka rejects longer strings even where the length prefix could hold more


class CodecError(ValueError):
    """A record that cannot be decoded; ``field`` is the dotted path of the field being read."""

    def __init__(self, field: str, reason: str, record_type: int | None = None) -> None:
        super().__init__(field, reason)
        self.field = field
        self.reason = reason
        self.record_type = record_type

    def __str__(self) -> str:
        where = "" if self.record_type is None else f"record type {self.record_type}: "
        return f"{where}{self.field}: {self.reason}"

    def __reduce__(self) -> tuple[Any, ...]:
        # Keeps record_type across pickling (Spark workers ship exceptions between processes).
        return (CodecError, (self.field, self.reason, self.record_type))


# --------------------------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class GroupMember:
    """One member of a classic-protocol group, from a GroupMetadataValue."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int | None
    session_timeout: int
    subscription: bytes
    assignment: bytes

    def partitions(self) -> dict[str, list[int]]:
        """Topic -> partitions assigned to this member (decoded from ``assignment``)."""
        return decode_assignment(self.assignment)


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    key_version: int
    value_version: int | None
    group: str
    topic: str
    partition: int
    offset: int | None
    leader_epoch: int | None
    metadata: str | None
    commit_timestamp: int | None
    expire_timestamp: int | None
    tombstone: bool


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    key_version: int
    value_version: int | None
    group: str
    protocol_type: str | None
    generation: int | None
    protocol: str | None
    leader: str | None
    current_state_timestamp: int | None
    members: tuple[GroupMember, ...]
    tombstone: bool


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """KIP-848 ConsumerGroupMemberMetadata: who a new-protocol member is."""

    record_type: int
    group: str
    member_id: str
    client_id: str | None
    client_host: str | None
    instance_id: str | None
    tombstone: bool


@dataclass(frozen=True, slots=True)
class ConsumerGroupAssignment:
    """KIP-848 ConsumerGroupCurrentMemberAssignment: what a new-protocol member owns.

    ``partitions`` holds the assigned partitions (not those pending revocation), keyed by topic name when
    ``decode_record`` was given one for the topic id, else by the topic id as 32 hex digits.
    """

    record_type: int
    group: str
    member_id: str
    member_epoch: int | None
    partitions: dict[str, list[int]]
    tombstone: bool


@dataclass(frozen=True, slots=True)
class OtherRecord:
    """Any other record type (3 and up): consumer-, share- and streams-group state we do not need."""

    record_type: int
    tombstone: bool


Record = OffsetCommit | GroupMetadata | ConsumerGroupMember | ConsumerGroupAssignment | OtherRecord

# ------------------------------------------------------------------------------------ primitive readers
# Each reader takes (buffer, position, field path) and returns (value, next position); every length is
# bounds-checked, so a short buffer raises CodecError naming the field instead of returning short data.
# Readers work on ``bytes`` only (the public entry points convert other buffers once).


def _truncated(field: str, need: int, buf: bytes, pos: int) -> CodecError:
    return CodecError(field, f"truncated: needs {need} bytes at offset {pos}, {max(len(buf) - pos, 0)} left")


def _bad_length(field: str, n: int, what: str) -> CodecError:
    if n == -1:
        return CodecError(field, f"null for a non-nullable {what}")
    return CodecError(field, f"negative {what} length {n}")


def _int(st: struct.Struct, buf: bytes, pos: int, field: str) -> tuple[int, int]:
    try:
        return st.unpack_from(buf, pos)[0], pos + st.size
    except struct.error:
        raise _truncated(field, st.size, buf, pos) from None


def _uvarint(buf: bytes, pos: int, field: str) -> tuple[int, int]:
    # At most 5 bytes, like Kafka's readUnsignedVarint; the result is an unsigned 32-bit number.
    size = len(buf)
    result = 0
    shift = 0
    while True:
        if pos >= size:
            raise _truncated(field, 1, buf, pos)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & 0xFFFFFFFF, pos
        shift += 7
        if shift > 28:
            raise CodecError(field, "unsigned varint longer than 5 bytes")


def _text(buf: bytes, pos: int, n: int, field: str) -> tuple[str, int]:
    if n > _MAX_STRING:
        raise CodecError(field, f"string length {n} exceeds {_MAX_STRING}")
    end = pos + n
    if end > len(buf):
        raise _truncated(field, n, buf, pos)
    try:
        return buf[pos:end].decode(), end
    except UnicodeDecodeError:
        raise CodecError(field, "invalid UTF-8") from None


def _str16(buf: bytes, pos: int, field: str) -> tuple[str, int]:
    # The hot path reads three of these per offset commit, hence inlined rather than built on _int/_text.
    try:
        (n,) = _I16.unpack_from(buf, pos)
    except struct.error:
        raise _truncated(field, 2, buf, pos) from None
    if n < 0:
        raise _bad_length(field, n, "string")
    pos += 2
    end = pos + n
    if end > len(buf):
        raise _truncated(field, n, buf, pos)
    try:
        return buf[pos:end].decode(), end
    except UnicodeDecodeError:
        raise CodecError(field, "invalid UTF-8") from None


def _nstr16(buf: bytes, pos: int, field: str) -> tuple[str | None, int]:
    n, pos = _int(_I16, buf, pos, field)
    if n == -1:
        return None, pos
    if n < 0:
        raise _bad_length(field, n, "string")
    return _text(buf, pos, n, field)


def _cstr(buf: bytes, pos: int, field: str) -> tuple[str, int]:
    n, pos = _uvarint(buf, pos, field)
    if n == 0:
        raise _bad_length(field, -1, "string")
    return _text(buf, pos, n - 1, field)


def _ncstr(buf: bytes, pos: int, field: str) -> tuple[str | None, int]:
    n, pos = _uvarint(buf, pos, field)
    if n == 0:
        return None, pos
    return _text(buf, pos, n - 1, field)


def _blob(buf: bytes, pos: int, n: int, field: str) -> tuple[bytes, int]:
    end = pos + n
    if end > len(buf):
        raise _truncated(field, n, buf, pos)
    return buf[pos:end], end


def _bytes32(buf: bytes, pos: int, field: str) -> tuple[bytes, int]:
    n, pos = _int(_I32, buf, pos, field)
    if n < 0:
        raise _bad_length(field, n, "bytes")
    return _blob(buf, pos, n, field)


def _nbytes32(buf: bytes, pos: int, field: str) -> tuple[bytes | None, int]:
    n, pos = _int(_I32, buf, pos, field)
    if n == -1:
        return None, pos
    if n < 0:
        raise _bad_length(field, n, "bytes")
    return _blob(buf, pos, n, field)


def _cbytes(buf: bytes, pos: int, field: str) -> tuple[bytes, int]:
    n, pos = _uvarint(buf, pos, field)
    if n == 0:
        raise _bad_length(field, -1, "bytes")
    return _blob(buf, pos, n - 1, field)


def _checked_count(buf: bytes, pos: int, n: int, field: str) -> tuple[int, int]:
    # Kafka refuses a count larger than the bytes left: no element is smaller than one byte.
    if n > len(buf) - pos:
        raise CodecError(field, f"truncated or bad count: {n} elements cannot fit in the {len(buf) - pos} bytes left")
    return n, pos


def _count32(buf: bytes, pos: int, field: str) -> tuple[int, int]:
    n, pos = _int(_I32, buf, pos, field)
    if n < 0:
        raise _bad_length(field, n, "array")
    return _checked_count(buf, pos, n, field)


def _ccount(buf: bytes, pos: int, field: str) -> tuple[int, int]:
    n, pos = _uvarint(buf, pos, field)
    if n == 0:
        raise _bad_length(field, -1, "array")
    return _checked_count(buf, pos, n - 1, field)


def _skip_tags(buf: bytes, pos: int, field: str) -> int:
    """Skips a tagged-fields section; none of the tags defined so far carries anything we report."""
    count, pos = _uvarint(buf, pos, field)
    for _ in range(count):
        _tag, pos = _uvarint(buf, pos, field)
        size, pos = _uvarint(buf, pos, field)
        if pos + size > len(buf):
            raise _truncated(field, size, buf, pos)
        pos += size
    return pos


class _Wire(NamedTuple):
    """The readers for one encoding family: classic (fixed-width lengths) or compact (flexible)."""

    string: Callable[[bytes, int, str], tuple[str, int]]
    nstring: Callable[[bytes, int, str], tuple[str | None, int]]
    blob: Callable[[bytes, int, str], tuple[bytes, int]]
    array_length: Callable[[bytes, int, str], tuple[int, int]]


_CLASSIC = _Wire(_str16, _nstr16, _bytes32, _count32)
_COMPACT = _Wire(_cstr, _ncstr, _cbytes, _ccount)


def _int32_array(buf: bytes, pos: int, field: str, wire: _Wire) -> tuple[list[int], int]:
    n, pos = wire.array_length(buf, pos, field)
    if pos + 4 * n > len(buf):
        raise _truncated(field, 4 * n, buf, pos)
    return list(struct.unpack_from(f">{n}i", buf, pos)), pos + 4 * n


def _value_version(value: bytes, known_max: int, schema: str) -> tuple[int, int]:
    version, pos = _int(_I16, value, 0, "value.version")
    if not 0 <= version <= known_max:
        raise CodecError("value.version", f"unknown {schema} version {version} (known: 0-{known_max})")
    return version, pos


# ------------------------------------------------------------------------------------- record decoders


def _offset_commit_builder() -> Callable[..., OffsetCommit]:
    """A positional OffsetCommit constructor about 3x faster than the frozen dataclass's ``__init__``.

    The generated ``__init__`` of a frozen dataclass goes through ``object.__setattr__`` per field, which
    costs about half of an offset-commit decode; storing through the slot descriptors directly builds
    the very same object (equal, hashable, immutable) without it.
    """
    (s_kv, s_vv, s_group, s_topic, s_part, s_off, s_epoch, s_meta, s_commit, s_expire, s_tomb) = (
        getattr(OffsetCommit, f.name).__set__ for f in fields(OffsetCommit)
    )
    new = object.__new__

    def build(
        key_version: int,
        value_version: int | None,
        group: str,
        topic: str,
        partition: int,
        offset: int | None,
        leader_epoch: int | None,
        metadata: str | None,
        commit_timestamp: int | None,
        expire_timestamp: int | None,
        tombstone: bool,
    ) -> OffsetCommit:
        record = new(OffsetCommit)
        s_kv(record, key_version)
        s_vv(record, value_version)
        s_group(record, group)
        s_topic(record, topic)
        s_part(record, partition)
        s_off(record, offset)
        s_epoch(record, leader_epoch)
        s_meta(record, metadata)
        s_commit(record, commit_timestamp)
        s_expire(record, expire_timestamp)
        s_tomb(record, tombstone)
        return record

    return build


_new_offset_commit = _offset_commit_builder()


def decode_offset_commit_key(key: bytes) -> tuple[str, str, int]:
    """An offset commit's key (record type 0 or 1, not checked here): group, topic, partition.

    The ingest decodes every distinct key of a cluster once, 100k of them in a minute at start-up: a well-formed key
    is sliced directly (about a third of the field-by-field reading's cost); anything else is read field by field,
    which raises the CodecError naming the field at fault."""
    try:
        topic_at = 4 + ((key[2] << 8) | key[3])
        partition_at = topic_at + 2 + ((key[topic_at] << 8) | key[topic_at + 1])
        if key[2] < 0x80 and key[topic_at] < 0x80 and len(key) >= partition_at + 4:  # lengths not negative
            group, topic = key[4:topic_at].decode(), key[topic_at + 2 : partition_at].decode()
            return group, topic, int.from_bytes(key[partition_at : partition_at + 4], "big", signed=True)
    except (IndexError, UnicodeDecodeError):
        pass
    return _read_offset_commit_key(key)


def _read_offset_commit_key(key: bytes) -> tuple[str, str, int]:
    """`decode_offset_commit_key` field by field, checked: the reference for its sliced path."""
    group, pos = _str16(key, 2, "key.group")
    topic, pos = _str16(key, pos, "key.topic")
    try:
        (partition,) = _I32.unpack_from(key, pos)
    except struct.error:
        raise CodecError("key.partition", "truncated: the record ends inside this field") from None
    return group, topic, partition


def _decode_offset_commit(record_type: int, key: bytes, value: bytes | None) -> OffsetCommit:
    group, topic, partition = decode_offset_commit_key(key)
    if not value:
        return _new_offset_commit(record_type, None, group, topic, partition, None, None, None, None, None, True)
    version, offset, leader_epoch, metadata, commit_timestamp, expire_timestamp = decode_offset_commit_value(value)
    return _new_offset_commit(
        record_type,
        version,
        group,
        topic,
        partition,
        offset,
        leader_epoch,
        metadata,
        commit_timestamp,
        expire_timestamp,
        False,
    )


_V_HEAD = struct.Struct(">hq")  # OffsetCommitValue: version, offset
_I16_AT = _I16.unpack_from
_I64_AT = _I64.unpack_from
_V_HEAD_AT = _V_HEAD.unpack_from


def commit_offset_and_timestamp(value: bytes) -> tuple[int, int]:
    """(offset, commit_timestamp) of an OffsetCommitValue: the two fields the ingest needs, for every record.

    Versions 0-3 are read in place without decoding the metadata string (it is skipped by its length); anything
    else, or a value that is short, goes through `decode_offset_commit_value`, which names the bad field.
    """
    try:
        version, offset = _V_HEAD_AT(value)
        if version == 3:
            (n,) = _I16_AT(value, 14)
            at = 16 + n
        elif 0 <= version <= 2:
            (n,) = _I16_AT(value, 10)
            at = 12 + n
        else:
            n = -1
        if n >= 0 and len(value) >= at + (16 if version == 1 else 8):
            return offset, _I64_AT(value, at)[0]
    except struct.error:
        pass
    _, offset, _, _, commit_timestamp, _ = decode_offset_commit_value(value)
    return offset, commit_timestamp


def decode_offset_commit_value(value: bytes) -> tuple[int, int, int | None, str, int, int | None]:
    """An OffsetCommitValue (v0-v4): (version, offset, leader_epoch, metadata, commit_timestamp, expire_timestamp).

    The ingest's hot path: it decodes a commit's key once per distinct key and this for every record. Integers are
    unpacked in place and a struct.error is mapped to the field named in ``field``, so the happy path sets a local
    instead of calling helpers. Raises CodecError naming the field (without a record type: the caller knows it).
    """
    if type(value) is not bytes:
        value = bytes(value)
    field = "value.version"
    try:
        (version,) = _I16.unpack_from(value, 0)
        if not 0 <= version <= 4:
            raise CodecError(field, f"unknown OffsetCommitValue version {version} (known: 0-4)")
        field = "value.offset"
        (offset,) = _I64.unpack_from(value, 2)
        leader_epoch = None
        pos = 10
        if version >= 3:
            field = "value.leader_epoch"
            (leader_epoch,) = _I32.unpack_from(value, 10)
            pos = 14
        if version == 4:
            metadata, pos = _cstr(value, pos, "value.metadata")
        else:
            metadata, pos = _str16(value, pos, "value.metadata")
        field = "value.commit_timestamp"
        (commit_timestamp,) = _I64.unpack_from(value, pos)
        expire_timestamp = None
        if version == 1:
            field = "value.expire_timestamp"
            (expire_timestamp,) = _I64.unpack_from(value, pos + 8)
        elif version == 4:
            _skip_tags(value, pos + 8, "value.tagged_fields")
    except struct.error:
        raise CodecError(field, "truncated: the record ends inside this field") from None
    return version, offset, leader_epoch, metadata, commit_timestamp, expire_timestamp


def _decode_member(buf: bytes, pos: int, version: int, path: str) -> tuple[GroupMember, int]:
    wire = _COMPACT if version >= 4 else _CLASSIC
    member_id, pos = wire.string(buf, pos, path + ".member_id")
    instance_id = None
    if version >= 3:
        instance_id, pos = wire.nstring(buf, pos, path + ".group_instance_id")
    client_id, pos = wire.string(buf, pos, path + ".client_id")
    client_host, pos = wire.string(buf, pos, path + ".client_host")
    rebalance_timeout = None
    if version >= 1:
        rebalance_timeout, pos = _int(_I32, buf, pos, path + ".rebalance_timeout")
    session_timeout, pos = _int(_I32, buf, pos, path + ".session_timeout")
    subscription, pos = wire.blob(buf, pos, path + ".subscription")
    assignment, pos = wire.blob(buf, pos, path + ".assignment")
    if version >= 4:
        pos = _skip_tags(buf, pos, path + ".tagged_fields")
    member = GroupMember(
        member_id,
        instance_id,
        client_id,
        client_host,
        rebalance_timeout,
        session_timeout,
        subscription,
        assignment,
    )
    return member, pos


def _decode_group_metadata(record_type: int, key: bytes, value: bytes | None) -> GroupMetadata:
    group, _ = _str16(key, 2, "key.group")
    if not value:
        return GroupMetadata(record_type, None, group, None, None, None, None, None, (), True)
    version, pos = _value_version(value, 4, "GroupMetadataValue")
    wire = _COMPACT if version >= 4 else _CLASSIC
    protocol_type, pos = wire.string(value, pos, "value.protocol_type")
    generation, pos = _int(_I32, value, pos, "value.generation")
    protocol, pos = wire.nstring(value, pos, "value.protocol")
    leader, pos = wire.nstring(value, pos, "value.leader")
    state_timestamp = None
    if version >= 2:
        state_timestamp, pos = _int(_I64, value, pos, "value.current_state_timestamp")
    count, pos = wire.array_length(value, pos, "value.members")
    members = []
    for i in range(count):
        member, pos = _decode_member(value, pos, version, f"value.members[{i}]")
        members.append(member)
    if version >= 4:
        _skip_tags(value, pos, "value.tagged_fields")
    return GroupMetadata(
        record_type,
        version,
        group,
        protocol_type,
        generation,
        protocol,
        leader,
        state_timestamp,
        tuple(members),
        False,
    )


def _decode_group_and_member_key(key: bytes) -> tuple[str, str]:
    group, pos = _str16(key, 2, "key.group")
    member_id, _ = _str16(key, pos, "key.member_id")
    return group, member_id


def _decode_consumer_group_member(record_type: int, key: bytes, value: bytes | None) -> ConsumerGroupMember:
    group, member_id = _decode_group_and_member_key(key)
    if not value:
        return ConsumerGroupMember(record_type, group, member_id, None, None, None, True)
    _, pos = _value_version(value, 0, "ConsumerGroupMemberMetadataValue")
    instance_id, pos = _ncstr(value, pos, "value.instance_id")
    _rack_id, pos = _ncstr(value, pos, "value.rack_id")
    client_id, pos = _cstr(value, pos, "value.client_id")
    client_host, pos = _cstr(value, pos, "value.client_host")
    # The rest is read only to validate the record, as Kafka would.
    count, pos = _ccount(value, pos, "value.subscribed_topic_names")
    for i in range(count):
        _topic, pos = _cstr(value, pos, f"value.subscribed_topic_names[{i}]")
    _regex, pos = _ncstr(value, pos, "value.subscribed_topic_regex")
    _timeout, pos = _int(_I32, value, pos, "value.rebalance_timeout")
    _assignor, pos = _ncstr(value, pos, "value.server_assignor")
    _skip_tags(value, pos, "value.tagged_fields")  # tag 0 = classic member metadata, not needed
    return ConsumerGroupMember(record_type, group, member_id, client_id, client_host, instance_id, False)


def _decode_topic_partitions(
    buf: bytes, pos: int, path: str, topic_names: Mapping[str, str] | None
) -> tuple[dict[str, list[int]], int]:
    count, pos = _ccount(buf, pos, path)
    result: dict[str, list[int]] = {}
    for i in range(count):
        item = f"{path}[{i}]"
        topic_id, pos = _blob(buf, pos, 16, item + ".topic_id")
        partitions, pos = _int32_array(buf, pos, item + ".partitions", _COMPACT)
        pos = _skip_tags(buf, pos, item + ".tagged_fields")  # tag 0 = assignment epochs (KIP-1251)
        hex_id = topic_id.hex()
        topic = topic_names.get(hex_id, hex_id) if topic_names else hex_id
        result.setdefault(topic, []).extend(partitions)
    return result, pos


def _decode_consumer_group_assignment(
    record_type: int, key: bytes, value: bytes | None, topic_names: Mapping[str, str] | None
) -> ConsumerGroupAssignment:
    group, member_id = _decode_group_and_member_key(key)
    if not value:
        return ConsumerGroupAssignment(record_type, group, member_id, None, {}, True)
    _, pos = _value_version(value, 0, "ConsumerGroupCurrentMemberAssignmentValue")
    member_epoch, pos = _int(_I32, value, pos, "value.member_epoch")
    _previous_epoch, pos = _int(_I32, value, pos, "value.previous_member_epoch")
    _state, pos = _int(_I8, value, pos, "value.state")
    assigned, pos = _decode_topic_partitions(value, pos, "value.assigned_partitions", topic_names)
    _revoking, pos = _decode_topic_partitions(value, pos, "value.partitions_pending_revocation", None)
    _skip_tags(value, pos, "value.tagged_fields")
    return ConsumerGroupAssignment(record_type, group, member_id, member_epoch, assigned, False)


def decode_record(key: bytes, value: bytes | None, *, topic_names: Mapping[str, str] | None = None) -> Record:
    """Decodes one ``__consumer_offsets`` record; a ``None`` or empty value is a tombstone.

    ``topic_names`` (topic id as 32 hex digits -> name) names the topics of KIP-848 assignments.
    Raises CodecError (naming the field) for anything undecodable; types 3+ other than 5 and 8 are
    returned as OtherRecord without looking further.
    """
    if type(key) is not bytes:  # bytearray / memoryview: the readers slice and decode bytes
        key = bytes(key)
    if value is not None and type(value) is not bytes:
        value = bytes(value)
    try:
        (record_type,) = _I16.unpack_from(key, 0)
    except struct.error:
        raise _truncated("key.version", 2, key, 0) from None
    try:
        if record_type <= 1:
            if record_type < 0:
                raise CodecError("key.version", f"unknown record type {record_type}")
            return _decode_offset_commit(record_type, key, value)
        if record_type == GROUP_METADATA_TYPE:
            return _decode_group_metadata(record_type, key, value)
        if record_type == CONSUMER_GROUP_MEMBER_TYPE:
            return _decode_consumer_group_member(record_type, key, value)
        if record_type == CONSUMER_GROUP_ASSIGNMENT_TYPE:
            return _decode_consumer_group_assignment(record_type, key, value, topic_names)
        return OtherRecord(record_type, not value)
    except CodecError as exc:
        exc.record_type = record_type
        raise
    except (struct.error, IndexError, UnicodeDecodeError, OverflowError) as exc:
        # Safety net only: every reader checks its bounds, so reaching this is a codec bug.
        raise CodecError("record", f"undecodable ({exc})", record_type) from exc


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    """Decodes a ConsumerProtocolAssignment (a classic member's assignment bytes); empty -> {}.

    Raises CodecError with field ``"assignment"``; the message names the part that failed.
    """
    if not data:
        return {}
    if type(data) is not bytes:
        data = bytes(data)
    try:
        version, pos = _int(_I16, data, 0, "version")
        if version < 0:
            raise CodecError("version", f"unknown ConsumerProtocolAssignment version {version}")
        count, pos = _count32(data, pos, "assigned_partitions")
        result: dict[str, list[int]] = {}
        for i in range(count):
            topic, pos = _str16(data, pos, f"assigned_partitions[{i}].topic")
            partitions, pos = _int32_array(data, pos, f"assigned_partitions[{i}].partitions", _CLASSIC)
            result.setdefault(topic, []).extend(partitions)
        _nbytes32(data, pos, "user_data")
    except CodecError as exc:
        raise CodecError("assignment", f"{exc.field}: {exc.reason}") from None
    return result


# ------------------------------------------------------------------------------------------- JSON view


def _member_json(member: GroupMember, consumer_protocol: bool) -> dict[str, Any]:
    # Only the "consumer" protocol type carries ConsumerProtocolAssignment bytes (Connect does not), and
    # a bad assignment must not hide the rest of the record: both show as null.
    assignment: dict[str, list[int]] | None = None
    if consumer_protocol:
        try:
            assignment = member.partitions()
        except CodecError:
            assignment = None
    return {
        "member_id": member.member_id,
        "group_instance_id": member.group_instance_id,
        "client_id": member.client_id,
        "client_host": member.client_host,
        "session_timeout": member.session_timeout,
        "rebalance_timeout": member.rebalance_timeout,
        "assignment": assignment,
    }


def record_to_json(record: Record) -> dict[str, Any]:
    """The CLI's JSON shape of a decoded record (fields absent from the record's version are null)."""
    if isinstance(record, OffsetCommit):
        return _offset_commit_json(record)
    if isinstance(record, GroupMetadata):
        return _group_metadata_json(record)
    if isinstance(record, ConsumerGroupMember):
        return _member_record_json(record)
    if isinstance(record, ConsumerGroupAssignment):
        return _assignment_record_json(record)
    return {"kind": "other", "record_type": record.record_type, "tombstone": record.tombstone}


def _offset_commit_json(record: OffsetCommit) -> dict[str, Any]:
    return {
        "kind": "offset_commit",
        "key_version": record.key_version,
        "value_version": record.value_version,
        "group": record.group,
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "leader_epoch": record.leader_epoch,
        "metadata": record.metadata,
        "commit_timestamp": record.commit_timestamp,
        "expire_timestamp": record.expire_timestamp,
        "tombstone": record.tombstone,
    }


def _group_metadata_json(record: GroupMetadata) -> dict[str, Any]:
    consumer = record.protocol_type == "consumer"
    return {
        "kind": "group_metadata",
        "key_version": record.key_version,
        "value_version": record.value_version,
        "group": record.group,
        "protocol_type": record.protocol_type,
        "generation": record.generation,
        "protocol": record.protocol,
        "leader": record.leader,
        "members": [_member_json(m, consumer) for m in record.members],
        "tombstone": record.tombstone,
    }


def _member_record_json(record: ConsumerGroupMember) -> dict[str, Any]:
    return {
        "kind": "consumer_group_member",
        "record_type": record.record_type,
        "group": record.group,
        "member_id": record.member_id,
        "client_id": record.client_id,
        "client_host": record.client_host,
        "instance_id": record.instance_id,
        "tombstone": record.tombstone,
    }


def _assignment_record_json(record: ConsumerGroupAssignment) -> dict[str, Any]:
    return {
        "kind": "consumer_group_assignment",
        "record_type": record.record_type,
        "group": record.group,
        "member_id": record.member_id,
        "member_epoch": record.member_epoch,
        "partitions": {topic: list(parts) for topic, parts in record.partitions.items()},
        "tombstone": record.tombstone,
    }


# ------------------------------------------------------------------------------------ primitive writers


def _w_uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _w_str(out: bytearray, s: str | None, compact: bool) -> None:
    if s is None:
        out += b"\x00" if compact else b"\xff\xff"
        return
    data = s.encode()
    if len(data) > _MAX_STRING:
        raise ValueError(f"string of {len(data)} bytes is longer than Kafka allows ({_MAX_STRING})")
    if compact:
        _w_uvarint(out, len(data) + 1)
    else:
        out += _I16.pack(len(data))
    out += data


def _w_bytes(out: bytearray, data: bytes | None, compact: bool) -> None:
    if data is None:
        out += b"\x00" if compact else b"\xff\xff\xff\xff"
    else:
        _w_count(out, len(data), compact)
        out += data


def _w_count(out: bytearray, n: int, compact: bool) -> None:
    if compact:
        _w_uvarint(out, n + 1)
    else:
        out += _I32.pack(n)


def _w_int32_array(out: bytearray, values: Sequence[int], compact: bool) -> None:
    _w_count(out, len(values), compact)
    out += struct.pack(f">{len(values)}i", *values)


def _w_no_tags(out: bytearray) -> None:
    out.append(0)


def _check_version(version: int, highest: int, schema: str) -> None:
    if not 0 <= version <= highest:
        raise ValueError(f"{schema} version must be 0-{highest}, not {version}")


# ------------------------------------------------------------------------------------------- encoders


def encode_offset_commit_key(group: str, topic: str, partition: int, version: int = 1) -> bytes:
    _check_version(version, 1, "offset commit key")
    out = bytearray(_I16.pack(version))
    _w_str(out, group, False)
    _w_str(out, topic, False)
    out += _I32.pack(partition)
    return bytes(out)


def encode_offset_commit_value(
    offset: int,
    commit_timestamp: int,
    *,
    metadata: str = "",
    leader_epoch: int = -1,
    expire_timestamp: int = -1,
    version: int = 3,
) -> bytes:
    """An OffsetCommitValue; fields its version lacks (leader epoch before v3, expire timestamp
    outside v1) are left out."""
    _check_version(version, 4, "OffsetCommitValue")
    out = bytearray(_I16.pack(version))
    out += _I64.pack(offset)
    if version >= 3:
        out += _I32.pack(leader_epoch)
    _w_str(out, metadata, version >= 4)
    out += _I64.pack(commit_timestamp)
    if version == 1:
        out += _I64.pack(expire_timestamp)
    if version >= 4:
        _w_no_tags(out)
    return bytes(out)


def encode_group_metadata_key(group: str) -> bytes:
    out = bytearray(_I16.pack(GROUP_METADATA_TYPE))
    _w_str(out, group, False)
    return bytes(out)


def _w_member(out: bytearray, member: GroupMember, version: int) -> None:
    compact = version >= 4
    _w_str(out, member.member_id, compact)
    if version >= 3:
        _w_str(out, member.group_instance_id, compact)
    _w_str(out, member.client_id, compact)
    _w_str(out, member.client_host, compact)
    if version >= 1:
        # Kafka's default for a missing int32 is 0.
        out += _I32.pack(0 if member.rebalance_timeout is None else member.rebalance_timeout)
    out += _I32.pack(member.session_timeout)
    _w_bytes(out, member.subscription, compact)
    _w_bytes(out, member.assignment, compact)
    if compact:
        _w_no_tags(out)


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
    _check_version(version, 4, "GroupMetadataValue")
    compact = version >= 4
    out = bytearray(_I16.pack(version))
    _w_str(out, protocol_type, compact)
    out += _I32.pack(generation)
    _w_str(out, protocol, compact)
    _w_str(out, leader, compact)
    if version >= 2:
        out += _I64.pack(current_state_timestamp)
    _w_count(out, len(members), compact)
    for member in members:
        _w_member(out, member, version)
    if compact:
        _w_no_tags(out)
    return bytes(out)


def encode_assignment(partitions: Mapping[str, Sequence[int]], version: int = 0) -> bytes:
    """A ConsumerProtocolAssignment (the same layout in versions 0-3), without user data."""
    _check_version(version, 3, "ConsumerProtocolAssignment")
    out = bytearray(_I16.pack(version))
    _w_count(out, len(partitions), False)
    for topic, parts in partitions.items():
        _w_str(out, topic, False)
        _w_int32_array(out, parts, False)
    _w_bytes(out, None, False)
    return bytes(out)


def encode_subscription(topics: Sequence[str], version: int = 0) -> bytes:
    """A ConsumerProtocolSubscription: no user data, no owned partitions (v1+), generation -1 (v2+),
    no rack (v3+)."""
    _check_version(version, 3, "ConsumerProtocolSubscription")
    out = bytearray(_I16.pack(version))
    _w_count(out, len(topics), False)
    for topic in topics:
        _w_str(out, topic, False)
    _w_bytes(out, None, False)
    if version >= 1:
        _w_count(out, 0, False)
    if version >= 2:
        out += _I32.pack(-1)
    if version >= 3:
        _w_str(out, None, False)
    return bytes(out)


def _group_and_member_key(record_type: int, group: str, member_id: str) -> bytes:
    out = bytearray(_I16.pack(record_type))
    _w_str(out, group, False)
    _w_str(out, member_id, False)
    return bytes(out)


def encode_consumer_group_member_key(group: str, member_id: str) -> bytes:
    return _group_and_member_key(CONSUMER_GROUP_MEMBER_TYPE, group, member_id)


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
    out = bytearray(_I16.pack(0))
    _w_str(out, instance_id, True)
    _w_str(out, rack_id, True)
    _w_str(out, client_id, True)
    _w_str(out, client_host, True)
    _w_count(out, len(subscribed_topics), True)
    for topic in subscribed_topics:
        _w_str(out, topic, True)
    _w_str(out, subscribed_regex, True)
    out += _I32.pack(rebalance_timeout)
    _w_str(out, server_assignor, True)
    _w_no_tags(out)
    return bytes(out)


def encode_consumer_group_assignment_key(group: str, member_id: str) -> bytes:
    return _group_and_member_key(CONSUMER_GROUP_ASSIGNMENT_TYPE, group, member_id)


def _w_topic_partitions(out: bytearray, partitions: Mapping[str, Sequence[int]]) -> None:
    _w_count(out, len(partitions), True)
    for topic_id, parts in partitions.items():
        raw = bytes.fromhex(topic_id)
        if len(raw) != 16:
            raise ValueError(f"topic id must be 32 hex digits, not {topic_id!r}")
        out += raw
        _w_int32_array(out, parts, True)
        _w_no_tags(out)


def encode_consumer_group_assignment_value(
    *,
    member_epoch: int,
    partitions: Mapping[str, Sequence[int]],
    previous_member_epoch: int = -1,
    state: int = 0,
    pending_revocation: Mapping[str, Sequence[int]] | None = None,
) -> bytes:
    """A ConsumerGroupCurrentMemberAssignmentValue v0; topics are keyed by topic id (32 hex digits)."""
    out = bytearray(_I16.pack(0))
    out += _I32.pack(member_epoch)
    out += _I32.pack(previous_member_epoch)
    out += _I8.pack(state)
    _w_topic_partitions(out, partitions)
    _w_topic_partitions(out, pending_revocation or {})
    _w_no_tags(out)
    return bytes(out)
