"""Decoder of the records the Kafka group coordinator writes into ``__consumer_offsets``, by the layouts of
offsets_layouts.py.

A ``None`` value is a tombstone (lagwatch treats an empty value the same); the rest of the behaviour taken from
Kafka's coordinator deserializer (unknown versions, tagged fields, trailing bytes, UTF-8) is coordinator_wire.py's.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lagwatch.shared.records import group_records
from lagwatch.shared.records import offsets_layouts as layouts
from lagwatch.shared.records.coordinator_wire import (
    _I16,
    _I32,
    _I64,
    CodecError,  # the decoders' one error, caught by their callers from this module
    _cstr,
    _int,
    _key_reader,
    _skip_tags,
    _str16,
    _typed_record,
    _unknown_version,
    _value_reader,
    _version_readers,
)
from lagwatch.shared.records.group_records import GroupStateRecord
from lagwatch.shared.records.offsets_layouts import Layout

__all__ = [
    "CodecError",
    "ConsumerGroupAssignment",
    "ConsumerGroupMember",
    "GroupMember",
    "GroupMetadata",
    "OffsetCommit",
    "OtherRecord",
    "Record",
    "commit_offset_and_timestamp",
    "decode_assignment",
    "decode_offset_commit_key",
    "decode_offset_commit_value",
    "decode_record",
]

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
    """Any other record type (3, 4, 6, 7, 16 and 25 up): consumer-group state we do not need, or types Kafka adds
    later."""

    record_type: int
    tombstone: bool


Record = OffsetCommit | GroupMetadata | ConsumerGroupMember | ConsumerGroupAssignment | GroupStateRecord | OtherRecord


# the commit key's reader is the reference for `decode_offset_commit_key`'s sliced path
_read_offset_commit_key, _read_group_key, _read_member_key = map(
    _key_reader, (layouts.OFFSET_COMMIT_KEY, layouts.GROUP_METADATA_KEY, layouts.MEMBER_KEY)
)
_VALUE_READERS = {
    layout.name: _value_reader(layout)
    for layout in (
        layouts.OFFSET_COMMIT_VALUE,
        layouts.GROUP_METADATA_VALUE,
        layouts.CONSUMER_GROUP_MEMBER_VALUE,
        layouts.CONSUMER_GROUP_ASSIGNMENT_VALUE,
    )
}


def _read_value(layout: Layout, value: bytes) -> tuple[int, list[Any]]:
    """A value's version and its fields; a version Kafka does not define is an error, as in Kafka."""
    return _VALUE_READERS[layout.name](value)


# Fields are only ever appended: like Kafka, a version newer than the newest known is read with the newest layout.
_NEWEST_ASSIGNMENT = _version_readers(layouts.CONSUMER_PROTOCOL_ASSIGNMENT)[-1]


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
    Share- and streams-group records (types 9-15, 17-24) decode to group_records' types. Raises CodecError (naming
    the field) for anything undecodable; the other types from 3 on are returned as OtherRecord without looking
    further.
    """
    key, value, record_type = _typed_record(key, value)
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
        if group_records.decodes(record_type):
            return group_records.decode_group_record(record_type, key, value)
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
