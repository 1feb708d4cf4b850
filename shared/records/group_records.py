"""Share-group (KIP-932) and streams-group (KIP-1071) records of ``__consumer_offsets`` (record types 9-15 and
17-24), decoded by the layouts of group_layouts.py into a typed record per type.

Every record holds its record type, its key (the group, and a member's id), the value's fields in the layout's order
(all None in a tombstone: the coordinator writes one when the group, member or assignment is gone) and `tombstone`.
Topics are named by topic id (32 hex digits) except where the record itself carries names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lagwatch.shared.records import group_layouts as layouts
from lagwatch.shared.records.coordinator_wire import _record_decoder
from lagwatch.shared.records.group_layouts import (
    KeyValue,
    ResolvedTopicIds,
    ShareStateTopic,
    StreamsEndpoint,
    Subtopology,
    TaskIds,
    TopicMetadata,
    TopicPartitions,
    TopicRef,
)

# ----------------------------------------------------------- shapes both kinds of group share (field order: layout's)


@dataclass(frozen=True, slots=True)
class _AssignmentEpoch:
    record_type: int
    group: str
    assignment_epoch: int | None
    tombstone: bool


@dataclass(frozen=True, slots=True)
class _TopicsMetadata:
    record_type: int
    group: str
    topics: tuple[TopicMetadata, ...] | None
    tombstone: bool


@dataclass(frozen=True, slots=True)
class _MemberEpochs:  # the head of a member's current assignment; the subclass adds what it holds, and `tombstone`
    record_type: int
    group: str
    member_id: str
    member_epoch: int | None
    previous_member_epoch: int | None
    state: int | None


# ------------------------------------------------------------------------------------------ share groups


@dataclass(frozen=True, slots=True)
class ShareGroupPartitionMetadata(_TopicsMetadata):
    """The subscribed topics' partition counts (written by Kafka 4.0 only)."""


@dataclass(frozen=True, slots=True)
class ShareGroupMember:
    record_type: int
    group: str
    member_id: str
    rack_id: str | None
    client_id: str | None
    client_host: str | None
    subscribed_topic_names: list[str] | None
    tombstone: bool


@dataclass(frozen=True, slots=True)
class ShareGroupMetadata:
    record_type: int
    group: str
    epoch: int | None
    metadata_hash: int | None  # a hash of the subscribed topics' metadata
    tombstone: bool


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadata(_AssignmentEpoch):
    pass


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMember:
    """What the assignor gives a member; several members may be given the same share-partition."""

    record_type: int
    group: str
    member_id: str
    topic_partitions: tuple[TopicPartitions, ...] | None
    tombstone: bool


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignment(_MemberEpochs):
    assigned_partitions: tuple[TopicPartitions, ...] | None
    tombstone: bool


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadata:
    """Which share-partitions have state in ``__share_group_state``: being initialized, initialized, being deleted."""

    record_type: int
    group: str
    initializing_topics: tuple[ShareStateTopic, ...] | None
    initialized_topics: tuple[ShareStateTopic, ...] | None
    deleting_topics: tuple[TopicRef, ...] | None
    tombstone: bool


# ---------------------------------------------------------------------------------------- streams groups


@dataclass(frozen=True, slots=True)
class StreamsGroupMetadata:
    """A streams group's epoch and topics' metadata hash; the two tagged fields (Kafka 4.2 on) are None where the
    record leaves them out (Kafka 4.1.0's records, or at their defaults: no validated topology epoch, no configuration
    recorded)."""

    record_type: int
    group: str
    epoch: int | None
    metadata_hash: int | None
    validated_topology_epoch: int | None
    last_assignment_configs: tuple[KeyValue, ...] | None
    tombstone: bool


@dataclass(frozen=True, slots=True)
class StreamsGroupPartitionMetadata(_TopicsMetadata):
    """The topology's topics' partition counts (written only before Kafka 4.1: a metadata hash replaced it)."""


@dataclass(frozen=True, slots=True)
class StreamsGroupMember:
    """A Kafka Streams client: `process_id` names the instance (shared by its threads' members), `user_endpoint`
    its interactive-query endpoint."""

    record_type: int
    group: str
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str | None
    client_host: str | None
    rebalance_timeout: int | None
    topology_epoch: int | None
    process_id: str | None
    user_endpoint: StreamsEndpoint | None
    client_tags: tuple[KeyValue, ...] | None
    tombstone: bool


@dataclass(frozen=True, slots=True)
class StreamsGroupTargetAssignmentMetadata(_AssignmentEpoch):
    pass


@dataclass(frozen=True, slots=True)
class StreamsGroupTargetAssignmentMember:
    record_type: int
    group: str
    member_id: str
    active_tasks: tuple[TaskIds, ...] | None
    standby_tasks: tuple[TaskIds, ...] | None
    warmup_tasks: tuple[TaskIds, ...] | None
    tombstone: bool


@dataclass(frozen=True, slots=True)
class StreamsGroupCurrentMemberAssignment(_MemberEpochs):
    active_tasks: tuple[TaskIds, ...] | None
    standby_tasks: tuple[TaskIds, ...] | None
    warmup_tasks: tuple[TaskIds, ...] | None
    active_tasks_pending_revocation: tuple[TaskIds, ...] | None
    standby_tasks_pending_revocation: tuple[TaskIds, ...] | None
    warmup_tasks_pending_revocation: tuple[TaskIds, ...] | None
    tombstone: bool


@dataclass(frozen=True, slots=True)
class StreamsGroupTopology:
    """The application's subtopologies: the source topics a lag is measured on, and the changelog topics."""

    record_type: int
    group: str
    epoch: int | None
    subtopologies: tuple[Subtopology, ...] | None
    tombstone: bool


@dataclass(frozen=True, slots=True)
class StreamsGroupResolvedTopicIds:
    """The topic ids each subtopology's source topics resolved to, for one assignment epoch."""

    record_type: int
    group: str
    assignment_epoch: int | None
    resolved_topic_ids: tuple[ResolvedTopicIds, ...] | None
    tombstone: bool


GroupStateRecord = (
    ShareGroupPartitionMetadata
    | ShareGroupMember
    | ShareGroupMetadata
    | ShareGroupTargetAssignmentMetadata
    | ShareGroupTargetAssignmentMember
    | ShareGroupCurrentMemberAssignment
    | ShareGroupStatePartitionMetadata
    | StreamsGroupMetadata
    | StreamsGroupPartitionMetadata
    | StreamsGroupMember
    | StreamsGroupTargetAssignmentMetadata
    | StreamsGroupTargetAssignmentMember
    | StreamsGroupCurrentMemberAssignment
    | StreamsGroupTopology
    | StreamsGroupResolvedTopicIds
)

RECORD_CLASSES: dict[int, type[Any]] = {
    layouts.SHARE_GROUP_PARTITION_METADATA_TYPE: ShareGroupPartitionMetadata,
    layouts.SHARE_GROUP_MEMBER_TYPE: ShareGroupMember,
    layouts.SHARE_GROUP_METADATA_TYPE: ShareGroupMetadata,
    layouts.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_TYPE: ShareGroupTargetAssignmentMetadata,
    layouts.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_TYPE: ShareGroupTargetAssignmentMember,
    layouts.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_TYPE: ShareGroupCurrentMemberAssignment,
    layouts.SHARE_GROUP_STATE_PARTITION_METADATA_TYPE: ShareGroupStatePartitionMetadata,
    layouts.STREAMS_GROUP_METADATA_TYPE: StreamsGroupMetadata,
    layouts.STREAMS_GROUP_PARTITION_METADATA_TYPE: StreamsGroupPartitionMetadata,
    layouts.STREAMS_GROUP_MEMBER_TYPE: StreamsGroupMember,
    layouts.STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_TYPE: StreamsGroupTargetAssignmentMetadata,
    layouts.STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_TYPE: StreamsGroupTargetAssignmentMember,
    layouts.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_TYPE: StreamsGroupCurrentMemberAssignment,
    layouts.STREAMS_GROUP_TOPOLOGY_TYPE: StreamsGroupTopology,
    layouts.STREAMS_GROUP_RESOLVED_TOPIC_IDS_TYPE: StreamsGroupResolvedTopicIds,
}

_DECODERS: dict[int, Callable[[int, bytes, bytes | None], Any]] = {
    record_type: _record_decoder(RECORD_CLASSES[record_type], layout.key, layout.value, layouts.STRUCTS)
    for record_type, layout in layouts.LAYOUTS.items()
}


def decodes(record_type: int) -> bool:
    """Whether `record_type` is a share- or streams-group record this module decodes."""
    return record_type in _DECODERS


def decode_group_record(record_type: int, key: bytes, value: bytes | None) -> GroupStateRecord:
    """A share- or streams-group record (`decodes(record_type)` must hold); a None or empty value is a tombstone.
    Raises CodecError (without the record type: decode_record adds it) naming the field at fault."""
    record: GroupStateRecord = _DECODERS[record_type](record_type, key, value)
    return record
