"""The layout of each record the Kafka group coordinator writes into ``__consumer_offsets``, stated once: the decoder
(offsets_codec.py) reads by these tables and the dev kit's encoders (lagwatch/devkit/offsets_encoders.py) write by
them, so the two cannot disagree on a field or the versions that carry it.

Schemas: Apache Kafka's ``group-coordinator/src/main/resources/common/message/*.json`` and the clients'
``ConsumerProtocolAssignment.json``. A key is an int16 record type (the historical "key version"), then its fields;
keys are never flexible. A value is an int16 version, then the fields that version carries. Share- and
streams-group records (types 9-15, 17-24) are laid out in group_layouts.py, the ``__share_group_state`` records in
share_state_layouts.py; the other consumer-group records (types 3, 4, 6, 7, 16) are not read.

Primitive types, all integers big-endian: non-flexible string = int16 length + UTF-8 (-1 = null), bytes = int32
length (-1 = null), array = int32 count. Flexible versions use unsigned varints (length + 1, 0 = null) and end every
struct with tagged fields (count, then tag, size and data per field). A type ending in ``?`` is nullable, a uuid is 16
bytes (32 hex digits to lagwatch), a field whose type is a tuple of fields is an array of such structs, and one whose
type is a `Nested` is a single struct (nullable: a leading int8, -1 for null and 1 before the struct). A field with a
`tag` is carried in its struct's tagged fields (None when absent) rather than in line.
"""

from __future__ import annotations

from typing import NamedTuple

# Record types (the key's leading int16).
OFFSET_COMMIT_TYPES = (0, 1)
GROUP_METADATA_TYPE = 2
CONSUMER_GROUP_MEMBER_TYPE = 5
CONSUMER_GROUP_ASSIGNMENT_TYPE = 8

MAX_STRING_LENGTH = 0x7FFF  # Kafka rejects longer strings even where the length prefix could hold more


def since(version: int) -> range:
    """The versions from `version` on (versions are int16)."""
    return range(version, 0x8000)


class Nested(NamedTuple):
    """A field holding one struct (not an array of them); Kafka writes it nullable here."""

    fields: tuple[Field, ...]


class Field(NamedTuple):
    name: str
    # int8, int16, uint16, int32, int64, string, string?, bytes, bytes?, uuid, []string, []int16, []int32, []uuid
    type: str | tuple[Field, ...] | Nested
    versions: range = since(0)  # the versions of the enclosing record that carry the field
    tag: int | None = None  # a tagged field's tag (flexible versions only)


class Layout(NamedTuple):
    """A record value: its schema's name, the versions Kafka defines, the flexible ones, and its fields."""

    name: str
    versions: range
    flexible: range
    fields: tuple[Field, ...]


OFFSET_COMMIT_KEY = (Field("group", "string"), Field("topic", "string"), Field("partition", "int32"))
GROUP_METADATA_KEY = (Field("group", "string"),)
MEMBER_KEY = (Field("group", "string"), Field("member_id", "string"))  # types 5 and 8

OFFSET_COMMIT_VALUE = Layout(
    "OffsetCommitValue",
    range(5),
    since(4),
    (
        Field("offset", "int64"),
        Field("leader_epoch", "int32", since(3)),
        Field("metadata", "string"),
        Field("commit_timestamp", "int64"),
        Field("expire_timestamp", "int64", range(1, 2)),
    ),
)

GROUP_MEMBER = (  # a classic group's member, in a GroupMetadataValue of the same version
    Field("member_id", "string"),
    Field("group_instance_id", "string?", since(3)),
    Field("client_id", "string"),
    Field("client_host", "string"),
    Field("rebalance_timeout", "int32", since(1)),
    Field("session_timeout", "int32"),
    Field("subscription", "bytes"),
    Field("assignment", "bytes"),  # a ConsumerProtocolAssignment when the protocol type is "consumer"
)

GROUP_METADATA_VALUE = Layout(
    "GroupMetadataValue",
    range(5),
    since(4),
    (
        Field("protocol_type", "string"),
        Field("generation", "int32"),
        Field("protocol", "string?"),
        Field("leader", "string?"),
        Field("current_state_timestamp", "int64", since(2)),
        Field("members", GROUP_MEMBER),
    ),
)

CONSUMER_GROUP_MEMBER_VALUE = Layout(  # KIP-848: who a new-protocol member is
    "ConsumerGroupMemberMetadataValue",
    range(1),
    since(0),
    (
        Field("instance_id", "string?"),
        Field("rack_id", "string?"),
        Field("client_id", "string"),
        Field("client_host", "string"),
        Field("subscribed_topic_names", "[]string"),
        Field("subscribed_topic_regex", "string?"),
        Field("rebalance_timeout", "int32"),
        Field("server_assignor", "string?"),
    ),  # tag 0 = the classic member's metadata, not read
)

TOPIC_ID_PARTITIONS = (Field("topic_id", "uuid"), Field("partitions", "[]int32"))  # tag 0 = assignment epochs

CONSUMER_GROUP_ASSIGNMENT_VALUE = Layout(  # KIP-848: what a new-protocol member owns
    "ConsumerGroupCurrentMemberAssignmentValue",
    range(1),
    since(0),
    (
        Field("member_epoch", "int32"),
        Field("previous_member_epoch", "int32"),
        Field("state", "int8"),
        Field("assigned_partitions", TOPIC_ID_PARTITIONS),
        Field("partitions_pending_revocation", TOPIC_ID_PARTITIONS),
    ),
)

TOPIC_PARTITIONS = (Field("topic", "string"), Field("partitions", "[]int32"))

# A classic member's assignment bytes (a version newer than these is read with the newest layout, as Kafka does).
CONSUMER_PROTOCOL_ASSIGNMENT = Layout(
    "ConsumerProtocolAssignment",
    range(4),
    range(0),
    (Field("assigned_partitions", TOPIC_PARTITIONS), Field("user_data", "bytes?")),
)
