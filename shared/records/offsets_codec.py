"""Decoder of the records the Kafka group coordinator writes into ``__consumer_offsets``, by the layouts of
offsets_layouts.py.

Behaviour taken from Kafka's coordinator deserializer: a value version it does not know is an error, a ``None`` value
is a tombstone (lagwatch treats an empty value the same), unknown tagged fields are skipped, and bytes left over after
the last field are ignored (Kafka reads the fields it knows and never checks what remains). One deliberate difference:
invalid UTF-8 is an error here, where Java would substitute U+FFFD; Kafka's writer only emits valid UTF-8, so such
bytes are corruption and must not invent a new group or topic name.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

from lagwatch.shared.records import offsets_layouts as layouts
from lagwatch.shared.records.offsets_layouts import Field, Layout

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

Reader = Callable[[bytes, int, str], tuple[Any, int]]  # (buffer, position, field path) -> (value, next position)
Length = Callable[[bytes, int, str], tuple[int, int]]


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
    """One member of a classic-protocol group, from a GroupMetadataValue: GROUP_MEMBER's fields, in its order."""

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
# Every length is bounds-checked, so a short buffer raises CodecError naming the field instead of returning short
# data. Readers work on ``bytes`` only (the public entry points convert other buffers once).


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
    if n > layouts.MAX_STRING_LENGTH:
        raise CodecError(field, f"string length {n} exceeds {layouts.MAX_STRING_LENGTH}")
    end = pos + n
    if end > len(buf):
        raise _truncated(field, n, buf, pos)
    try:
        return buf[pos:end].decode(), end
    except UnicodeDecodeError:
        raise CodecError(field, "invalid UTF-8") from None


def _str16(buf: bytes, pos: int, field: str) -> tuple[str, int]:
    # The most read type (offset-commit metadata, every member's ids and host), hence inlined rather than _sized.
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


def _cstr(buf: bytes, pos: int, field: str) -> tuple[str, int]:
    # A v4 commit's metadata, read for every such commit: spelled out rather than _sized, a call fewer.
    n, pos = _uvarint(buf, pos, field)
    if n == 0:
        raise _bad_length(field, -1, "string")
    return _text(buf, pos, n - 1, field)


def _blob(buf: bytes, pos: int, n: int, field: str) -> tuple[bytes, int]:
    end = pos + n
    if end > len(buf):
        raise _truncated(field, n, buf, pos)
    return buf[pos:end], end


def _checked_count(buf: bytes, pos: int, n: int, field: str) -> tuple[int, int]:
    # Kafka refuses a count larger than the bytes left: no element is smaller than one byte.
    if n > len(buf) - pos:
        raise CodecError(field, f"truncated or bad count: {n} elements cannot fit in the {len(buf) - pos} bytes left")
    return n, pos


def _compact_length(buf: bytes, pos: int, field: str) -> tuple[int, int]:
    n, pos = _uvarint(buf, pos, field)
    return n - 1, pos  # 0 (-1 here) is null


def _sized(
    length: Length,
    take: Callable[[bytes, int, int, str], tuple[Any, int]],
    what: str,
    nullable: bool = False,
) -> Reader:
    """A length-prefixed reader: `length` reads the length (-1 = null), `take` that many bytes or elements."""

    def read(buf: bytes, pos: int, field: str) -> tuple[Any, int]:
        n, pos = length(buf, pos, field)
        if n < 0:
            if n == -1 and nullable:
                return None, pos
            raise _bad_length(field, n, what)
        return take(buf, pos, n, field)

    return read


_int16, _int32 = partial(_int, _I16), partial(_int, _I32)


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


def _uuid(buf: bytes, pos: int, field: str) -> tuple[str, int]:
    raw, pos = _blob(buf, pos, 16, field)
    return raw.hex(), pos


class _Wire(NamedTuple):
    """How one encoding family reads each type: classic (fixed-width lengths) or flexible (compact, tagged fields)."""

    flexible: bool
    array_length: Length
    readers: dict[str, Reader]


def _wire(flexible: bool, string: Reader, string_length: Length, length: Length) -> _Wire:
    array_length = _sized(length, _checked_count, "array")

    def int32s(buf: bytes, pos: int, field: str) -> tuple[list[int], int]:
        n, pos = array_length(buf, pos, field)
        if pos + 4 * n > len(buf):
            raise _truncated(field, 4 * n, buf, pos)
        return list(struct.unpack_from(f">{n}i", buf, pos)), pos + 4 * n

    def strings(buf: bytes, pos: int, field: str) -> tuple[list[str], int]:
        n, pos = array_length(buf, pos, field)
        items = []
        for i in range(n):
            item, pos = string(buf, pos, f"{field}[{i}]")
            items.append(item)
        return items, pos

    readers: dict[str, Reader] = {
        "int8": partial(_int, _I8),
        "int32": _int32,
        "int64": partial(_int, _I64),
        "uuid": _uuid,
        "string": string,
        "string?": _sized(string_length, _text, "string", nullable=True),
        "bytes": _sized(length, _blob, "bytes"),
        "bytes?": _sized(length, _blob, "bytes", nullable=True),
        "[]int32": int32s,
        "[]string": strings,
    }
    return _Wire(flexible, array_length, readers)


_CLASSIC = _wire(False, _str16, _int16, _int32)
_COMPACT = _wire(True, _cstr, _compact_length, _compact_length)


StructReader = Callable[[bytes, int, str], tuple[list[Any], int]]


def _struct_reader(fields: tuple[Field, ...], version: int, wire: _Wire) -> StructReader:
    """A reader of `fields` as `version` lays them out, planned once: their values in order (None for a field the
    version does not carry), then a flexible struct's tagged fields. Its `path` prefixes the field names in errors."""
    plan: list[tuple[str, Reader | None]] = []
    for name, kind, versions in fields:
        if version not in versions:
            plan.append((name, None))
        elif isinstance(kind, str):
            plan.append((name, wire.readers[kind]))
        else:
            plan.append((name, _array_reader(_struct_reader(kind, version, wire), wire)))
    tagged = wire.flexible

    def read(buf: bytes, pos: int, path: str) -> tuple[list[Any], int]:
        values: list[Any] = []
        for name, read_field in plan:
            if read_field is None:
                values.append(None)
            else:
                value, pos = read_field(buf, pos, path + name)
                values.append(value)
        if tagged:
            pos = _skip_tags(buf, pos, path + "tagged_fields")
        return values, pos

    return read


def _array_reader(item: StructReader, wire: _Wire) -> Reader:
    def read(buf: bytes, pos: int, field: str) -> tuple[list[list[Any]], int]:
        count, pos = wire.array_length(buf, pos, field)
        items = []
        for i in range(count):
            values, pos = item(buf, pos, f"{field}[{i}].")
            items.append(values)
        return items, pos

    return read


def _key_reader(fields: tuple[Field, ...]) -> Callable[[bytes], list[Any]]:
    read = _struct_reader(fields, 0, _CLASSIC)
    return lambda key: read(key, 2, "key.")[0]


# the commit key's reader is the reference for `decode_offset_commit_key`'s sliced path
_read_offset_commit_key, _read_group_key, _read_member_key = map(
    _key_reader, (layouts.OFFSET_COMMIT_KEY, layouts.GROUP_METADATA_KEY, layouts.MEMBER_KEY)
)
_VALUE_READERS = {  # per layout, a reader per version
    layout.name: [
        _struct_reader(layout.fields, v, _COMPACT if v in layout.flexible else _CLASSIC) for v in layout.versions
    ]
    for layout in (
        layouts.OFFSET_COMMIT_VALUE,
        layouts.GROUP_METADATA_VALUE,
        layouts.CONSUMER_GROUP_MEMBER_VALUE,
        layouts.CONSUMER_GROUP_ASSIGNMENT_VALUE,
        layouts.CONSUMER_PROTOCOL_ASSIGNMENT,
    )
}


# Fields are only ever appended: like Kafka, a version newer than the newest known is read with the newest layout.
_NEWEST_ASSIGNMENT = _VALUE_READERS[layouts.CONSUMER_PROTOCOL_ASSIGNMENT.name][-1]


def _unknown_version(layout: Layout, version: int) -> CodecError:
    known = f"{layout.versions[0]}-{layout.versions[-1]}"
    return CodecError("value.version", f"unknown {layout.name} version {version} (known: {known})")


def _read_value(layout: Layout, value: bytes) -> tuple[int, list[Any]]:
    """A value's version and its fields; a version Kafka does not define is an error, as in Kafka."""
    version, pos = _int(_I16, value, 0, "value.version")
    if version not in layout.versions:
        raise _unknown_version(layout, version)
    return version, _VALUE_READERS[layout.name][version](value, pos, "value.")[0]


# ------------------------------------------------------------------------------------- record decoders


def decode_offset_commit_key(key: bytes) -> tuple[str, str, int]:
    """An offset commit's key (record type 0 or 1, not checked here): group, topic, partition. A well-formed key is
    sliced directly (the ingest decodes every distinct key at start-up); anything else is read field by field, which
    raises the CodecError naming the field at fault."""
    try:
        topic_at = 4 + ((key[2] << 8) | key[3])
        partition_at = topic_at + 2 + ((key[topic_at] << 8) | key[topic_at + 1])
        if key[2] < 0x80 and key[topic_at] < 0x80 and len(key) >= partition_at + 4:  # lengths not negative
            group, topic = key[4:topic_at].decode(), key[topic_at + 2 : partition_at].decode()
            return group, topic, int.from_bytes(key[partition_at : partition_at + 4], "big", signed=True)
    except (IndexError, UnicodeDecodeError):
        pass
    group, topic, partition = _read_offset_commit_key(key)
    return group, topic, partition


def _decode_offset_commit(record_type: int, key: bytes, value: bytes | None) -> OffsetCommit:
    group, topic, partition = decode_offset_commit_key(key)
    if not value:
        return OffsetCommit(record_type, None, group, topic, partition, None, None, None, None, None, True)
    version, offset, epoch, metadata, committed, expires = decode_offset_commit_value(value)
    return OffsetCommit(
        record_type, version, group, topic, partition, offset, epoch, metadata, committed, expires, False
    )


_COMMIT_VERSIONS = layouts.OFFSET_COMMIT_VALUE.versions
_V_HEAD = struct.Struct(">hq")  # OffsetCommitValue: version, offset
_I16_AT = _I16.unpack_from
_I64_AT = _I64.unpack_from
_V_HEAD_AT = _V_HEAD.unpack_from


def commit_offset_and_timestamp(value: bytes) -> tuple[int, int]:
    """(offset, commit_timestamp) of an OffsetCommitValue, for every record the ingest reads: versions 0-3 in place,
    the metadata skipped by its length; anything else, or a short value, through `decode_offset_commit_value`."""
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
    """An OffsetCommitValue: (version, offset, leader_epoch, metadata, commit_timestamp, expire_timestamp).

    The ingest's hot path, so OFFSET_COMMIT_VALUE is read unrolled (a test holds it to the layout): a struct.error is
    mapped to the field named in ``field``. Raises CodecError naming the field (without a record type)."""
    if type(value) is not bytes:
        value = bytes(value)
    field = "value.version"
    try:
        (version,) = _I16.unpack_from(value, 0)
        if version not in _COMMIT_VERSIONS:
            raise _unknown_version(layouts.OFFSET_COMMIT_VALUE, version)
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


def _decode_group_metadata(record_type: int, key: bytes, value: bytes | None) -> GroupMetadata:
    (group,) = _read_group_key(key)
    if not value:
        return GroupMetadata(record_type, None, group, None, None, None, None, None, (), True)
    version, (protocol_type, generation, protocol, leader, started, members) = _read_value(
        layouts.GROUP_METADATA_VALUE, value
    )
    members = tuple(GroupMember(*member) for member in members)
    return GroupMetadata(
        record_type, version, group, protocol_type, generation, protocol, leader, started, members, False
    )


def _decode_consumer_group_member(record_type: int, key: bytes, value: bytes | None) -> ConsumerGroupMember:
    group, member_id = _read_member_key(key)
    if not value:
        return ConsumerGroupMember(record_type, group, member_id, None, None, None, True)
    # Every field is read, to validate the record as Kafka would; these are the ones lagwatch uses.
    _, (instance_id, _rack_id, client_id, client_host, *_) = _read_value(layouts.CONSUMER_GROUP_MEMBER_VALUE, value)
    return ConsumerGroupMember(record_type, group, member_id, client_id, client_host, instance_id, False)


def _decode_consumer_group_assignment(
    record_type: int, key: bytes, value: bytes | None, topic_names: Mapping[str, str] | None
) -> ConsumerGroupAssignment:
    group, member_id = _read_member_key(key)
    if not value:
        return ConsumerGroupAssignment(record_type, group, member_id, None, {}, True)
    _, (member_epoch, _previous, _state, assigned, _revoking) = _read_value(
        layouts.CONSUMER_GROUP_ASSIGNMENT_VALUE, value
    )
    return ConsumerGroupAssignment(record_type, group, member_id, member_epoch, _merged(assigned, topic_names), False)


def _merged(assigned: list[list[Any]], names: Mapping[str, str] | None = None) -> dict[str, list[int]]:
    """Topic -> partitions, from (topic, partitions) pairs: a topic listed twice merged, ids named where `names` can."""
    result: dict[str, list[int]] = {}
    for topic, partitions in assigned:
        result.setdefault(names.get(topic, topic) if names else topic, []).extend(partitions)
    return result


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
        if record_type == layouts.GROUP_METADATA_TYPE:
            return _decode_group_metadata(record_type, key, value)
        if record_type == layouts.CONSUMER_GROUP_MEMBER_TYPE:
            return _decode_consumer_group_member(record_type, key, value)
        if record_type == layouts.CONSUMER_GROUP_ASSIGNMENT_TYPE:
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
        (assigned, _user_data), _ = _NEWEST_ASSIGNMENT(data, pos, "")
    except CodecError as exc:
        raise CodecError("assignment", f"{exc.field}: {exc.reason}") from None
    return _merged(assigned)
