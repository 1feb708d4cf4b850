"""The layouts of the share-group (KIP-932) and streams-group (KIP-1071) records the Kafka group coordinator writes into
``__consumer_offsets``, in the terms of offsets_layouts.py: the decoder (group_records.py) reads by these tables and
the dev kit's encoders write by them.

Each layout follows the Apache Kafka schema file of the same name in
``group-coordinator/src/main/resources/common/message/``: the value ``<Name>Value.json`` (the Layout's name) and the
key ``<Name>Key.json``, whose ``apiKey`` is the record type below:

- 9 ShareGroupPartitionMetadata (Kafka 4.0 only), 10 ShareGroupMemberMetadata, 11 ShareGroupMetadata,
  12 ShareGroupTargetAssignmentMetadata, 13 ShareGroupTargetAssignmentMember, 14 ShareGroupCurrentMemberAssignment,
  15 ShareGroupStatePartitionMetadata;
- 17 StreamsGroupMetadata, 18 StreamsGroupPartitionMetadata (before Kafka 4.1), 19 StreamsGroupMemberMetadata,
  20 StreamsGroupTargetAssignmentMetadata, 21 StreamsGroupTargetAssignmentMember,
  22 StreamsGroupCurrentMemberAssignment, 23 StreamsGroupTopology, 24 StreamsGroupTargetAssignmentResolvedTopicIds.

Every value is version 0 and flexible, and every key (never flexible) is the record type and then the group id (and
the member id for a member's records). Since Kafka 4.1 these values have grown by tagged fields only (a record of an
older Kafka lacks them: None here), so one layout reads the records of Kafka 4.1 and later alike. Kafka 4.0's
early-access share groups wrote ShareGroupMetadataValue without the metadata hash and
ShareGroupStatePartitionMetadataValue without the initializing topics (Kafka 4.1 changed both in place): such records
do not decode here (CodecError). A field's name is the attribute of the decoded record that holds it, and an array of
structs decodes to a tuple of the NamedTuple that `STRUCTS` names for its fields.
"""

from __future__ import annotations

from typing import NamedTuple

from lagwatch.shared.records.offsets_layouts import GROUP_METADATA_KEY, MEMBER_KEY, Field, Layout, Nested, since

# Record types (the key's leading int16).
SHARE_GROUP_PARTITION_METADATA_TYPE = 9  # no longer written from Kafka 4.1 (a metadata hash replaced it)
SHARE_GROUP_MEMBER_TYPE = 10
SHARE_GROUP_METADATA_TYPE = 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_TYPE = 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_TYPE = 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_TYPE = 14
SHARE_GROUP_STATE_PARTITION_METADATA_TYPE = 15
STREAMS_GROUP_METADATA_TYPE = 17
STREAMS_GROUP_PARTITION_METADATA_TYPE = 18  # no longer written from Kafka 4.1 (a metadata hash replaced it)
STREAMS_GROUP_MEMBER_TYPE = 19
STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_TYPE = 20
STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_TYPE = 21
STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_TYPE = 22
STREAMS_GROUP_TOPOLOGY_TYPE = 23
STREAMS_GROUP_RESOLVED_TOPIC_IDS_TYPE = 24


def _value(name: str, *fields: Field) -> Layout:
    return Layout(name, range(1), since(0), fields)


# ------------------------------------------------------------------------------------------- structs


class TopicPartitions(NamedTuple):
    """Partitions of one topic, by topic id (32 hex digits)."""

    topic_id: str
    partitions: list[int]


class PartitionRacks(NamedTuple):
    partition: int
    racks: list[str]


class TopicMetadata(NamedTuple):
    topic_id: str
    topic_name: str
    partition_count: int
    partition_racks: tuple[PartitionRacks, ...]


class ShareStateTopic(NamedTuple):
    """A topic whose share-partitions have (or are getting) state in ``__share_group_state``."""

    topic_id: str
    topic_name: str
    partitions: list[int]


class TopicRef(NamedTuple):
    topic_id: str
    topic_name: str


class TaskIds(NamedTuple):
    """A streams member's tasks of one subtopology: the partitions of its input topics."""

    subtopology_id: str
    partitions: list[int]


class StreamsEndpoint(NamedTuple):
    """Where a streams instance answers interactive queries."""

    host: str
    port: int


class KeyValue(NamedTuple):
    key: str
    value: str


class StreamsTopic(NamedTuple):
    """A changelog or repartition topic of a topology (partitions 0: not fixed; always 0 for changelogs)."""

    name: str
    partitions: int
    replication_factor: int
    configs: tuple[KeyValue, ...]


class CopartitionGroup(NamedTuple):
    """Indexes into the subtopology's source topics, regexes and repartition source topics."""

    source_topics: list[int]
    source_topic_regex: list[int]
    repartition_source_topics: list[int]


class Subtopology(NamedTuple):
    subtopology_id: str
    source_topics: list[str]
    source_topic_regex: list[str]
    state_changelog_topics: tuple[StreamsTopic, ...]
    repartition_sink_topics: list[str]
    repartition_source_topics: tuple[StreamsTopic, ...]
    copartition_groups: tuple[CopartitionGroup, ...]


class ResolvedTopicIds(NamedTuple):
    subtopology_id: str
    topic_ids: list[str]


def _fields(struct: type[NamedTuple], *types: str | tuple[Field, ...] | Nested) -> tuple[Field, ...]:
    return tuple(Field(name, kind) for name, kind in zip(struct._fields, types, strict=True))


TOPIC_PARTITIONS = _fields(TopicPartitions, "uuid", "[]int32")
PARTITION_RACKS = _fields(PartitionRacks, "int32", "[]string")
TOPIC_METADATA = _fields(TopicMetadata, "uuid", "string", "int32", PARTITION_RACKS)
SHARE_STATE_TOPIC = _fields(ShareStateTopic, "uuid", "string", "[]int32")
TOPIC_REF = _fields(TopicRef, "uuid", "string")
TASK_IDS = _fields(TaskIds, "string", "[]int32")
STREAMS_ENDPOINT = _fields(StreamsEndpoint, "string", "uint16")
KEY_VALUE = _fields(KeyValue, "string", "string")
STREAMS_TOPIC = _fields(StreamsTopic, "string", "int32", "int16", KEY_VALUE)
COPARTITION_GROUP = _fields(CopartitionGroup, "[]int16", "[]int16", "[]int16")
SUBTOPOLOGY = _fields(
    Subtopology, "string", "[]string", "[]string", STREAMS_TOPIC, "[]string", STREAMS_TOPIC, COPARTITION_GROUP
)
RESOLVED_TOPIC_IDS = _fields(ResolvedTopicIds, "string", "[]uuid")

STRUCTS: dict[tuple[Field, ...], type[NamedTuple]] = {
    TOPIC_PARTITIONS: TopicPartitions,
    PARTITION_RACKS: PartitionRacks,
    TOPIC_METADATA: TopicMetadata,
    SHARE_STATE_TOPIC: ShareStateTopic,
    TOPIC_REF: TopicRef,
    TASK_IDS: TaskIds,
    STREAMS_ENDPOINT: StreamsEndpoint,
    KEY_VALUE: KeyValue,
    STREAMS_TOPIC: StreamsTopic,
    COPARTITION_GROUP: CopartitionGroup,
    SUBTOPOLOGY: Subtopology,
    RESOLVED_TOPIC_IDS: ResolvedTopicIds,
}

# ------------------------------------------------------------------------------------------- values

# The group epoch and the hash of the subscribed topics' metadata: both in line (the hash is no tagged field here,
# unlike in ConsumerGroupMetadataValue), in ShareGroupMetadataValue and StreamsGroupMetadataValue alike.
EPOCH_AND_HASH = (Field("epoch", "int32"), Field("metadata_hash", "int64"))
ASSIGNMENT_EPOCH = (Field("assignment_epoch", "int32"),)
MEMBER_EPOCHS = (Field("member_epoch", "int32"), Field("previous_member_epoch", "int32"), Field("state", "int8"))

SHARE_GROUP_PARTITION_METADATA_VALUE = _value("ShareGroupPartitionMetadataValue", Field("topics", TOPIC_METADATA))
SHARE_GROUP_MEMBER_VALUE = _value(
    "ShareGroupMemberMetadataValue",
    Field("rack_id", "string?"),
    Field("client_id", "string"),
    Field("client_host", "string"),
    Field("subscribed_topic_names", "[]string"),
)
SHARE_GROUP_METADATA_VALUE = _value("ShareGroupMetadataValue", *EPOCH_AND_HASH)
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = _value("ShareGroupTargetAssignmentMetadataValue", *ASSIGNMENT_EPOCH)
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = _value(
    "ShareGroupTargetAssignmentMemberValue", Field("topic_partitions", TOPIC_PARTITIONS)
)
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = _value(
    "ShareGroupCurrentMemberAssignmentValue", *MEMBER_EPOCHS, Field("assigned_partitions", TOPIC_PARTITIONS)
)
SHARE_GROUP_STATE_PARTITION_METADATA_VALUE = _value(  # which share-partitions have state in __share_group_state
    "ShareGroupStatePartitionMetadataValue",
    Field("initializing_topics", SHARE_STATE_TOPIC),
    Field("initialized_topics", SHARE_STATE_TOPIC),
    Field("deleting_topics", TOPIC_REF),
)

STREAMS_GROUP_METADATA_VALUE = _value(
    "StreamsGroupMetadataValue",
    *EPOCH_AND_HASH,
    # The topology epoch whose topics were last found valid (Kafka writes none while it is -1).
    Field("validated_topology_epoch", "int32", tag=0),
    # The assignment configuration (e.g. num.standby.replicas) the last assignment ran with, so that a change of it
    # triggers a new one (Kafka writes none while there is none).
    Field("last_assignment_configs", KEY_VALUE, tag=1),
)
STREAMS_GROUP_PARTITION_METADATA_VALUE = _value("StreamsGroupPartitionMetadataValue", Field("topics", TOPIC_METADATA))
STREAMS_GROUP_MEMBER_VALUE = _value(
    "StreamsGroupMemberMetadataValue",
    Field("instance_id", "string?"),
    Field("rack_id", "string?"),
    Field("client_id", "string"),
    Field("client_host", "string"),
    Field("rebalance_timeout", "int32"),
    Field("topology_epoch", "int32"),
    Field("process_id", "string"),
    Field("user_endpoint", Nested(STREAMS_ENDPOINT)),
    Field("client_tags", KEY_VALUE),
)
STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = _value("StreamsGroupTargetAssignmentMetadataValue", *ASSIGNMENT_EPOCH)
TASKS = (Field("active_tasks", TASK_IDS), Field("standby_tasks", TASK_IDS), Field("warmup_tasks", TASK_IDS))
STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = _value("StreamsGroupTargetAssignmentMemberValue", *TASKS)
STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = _value(
    "StreamsGroupCurrentMemberAssignmentValue",
    *MEMBER_EPOCHS,
    *TASKS,
    *(Field(f"{field.name}_pending_revocation", TASK_IDS) for field in TASKS),
)
STREAMS_GROUP_TOPOLOGY_VALUE = _value(
    "StreamsGroupTopologyValue", Field("epoch", "int32"), Field("subtopologies", SUBTOPOLOGY)
)
STREAMS_GROUP_RESOLVED_TOPIC_IDS_VALUE = _value(
    "StreamsGroupTargetAssignmentResolvedTopicIdsValue",
    *ASSIGNMENT_EPOCH,
    Field("resolved_topic_ids", RESOLVED_TOPIC_IDS),
)


class GroupRecordLayout(NamedTuple):
    key: tuple[Field, ...]
    value: Layout


_GROUP, _MEMBER = GROUP_METADATA_KEY, MEMBER_KEY  # the key of a group's records, of a member's
LAYOUTS: dict[int, GroupRecordLayout] = {
    record_type: GroupRecordLayout(key, value)
    for record_type, key, value in (
        (SHARE_GROUP_PARTITION_METADATA_TYPE, _GROUP, SHARE_GROUP_PARTITION_METADATA_VALUE),
        (SHARE_GROUP_MEMBER_TYPE, _MEMBER, SHARE_GROUP_MEMBER_VALUE),
        (SHARE_GROUP_METADATA_TYPE, _GROUP, SHARE_GROUP_METADATA_VALUE),
        (SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_TYPE, _GROUP, SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE),
        (SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_TYPE, _MEMBER, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE),
        (SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_TYPE, _MEMBER, SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE),
        (SHARE_GROUP_STATE_PARTITION_METADATA_TYPE, _GROUP, SHARE_GROUP_STATE_PARTITION_METADATA_VALUE),
        (STREAMS_GROUP_METADATA_TYPE, _GROUP, STREAMS_GROUP_METADATA_VALUE),
        (STREAMS_GROUP_PARTITION_METADATA_TYPE, _GROUP, STREAMS_GROUP_PARTITION_METADATA_VALUE),
        (STREAMS_GROUP_MEMBER_TYPE, _MEMBER, STREAMS_GROUP_MEMBER_VALUE),
        (STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_TYPE, _GROUP, STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE),
        (STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_TYPE, _MEMBER, STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE),
        (STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_TYPE, _MEMBER, STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE),
        (STREAMS_GROUP_TOPOLOGY_TYPE, _GROUP, STREAMS_GROUP_TOPOLOGY_VALUE),
        (STREAMS_GROUP_RESOLVED_TOPIC_IDS_TYPE, _GROUP, STREAMS_GROUP_RESOLVED_TOPIC_IDS_VALUE),
    )
}
