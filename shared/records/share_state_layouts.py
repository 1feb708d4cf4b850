"""The layout of each record the Kafka share coordinator writes into ``__share_group_state``, in the terms of
offsets_layouts.py: the decoder (share_state_codec.py) reads by these tables and the dev kit's encoders write by them.

Schemas: Apache Kafka's ``share-coordinator/src/main/resources/common/message/`` ``ShareSnapshotKey.json`` and
``ShareSnapshotValue.json`` (record type 0), ``ShareUpdateKey.json`` and ``ShareUpdateValue.json`` (record type 1).
A share-partition (group, topic id, partition) has a snapshot of its whole state now and then, and updates since:
the delivery state of record ranges at and past its start offset (SPSO). Keys are not flexible; both values are
version 0 and flexible. Kafka 4.2 added the delivery complete count (KIP-1226) as tagged field 0, written only when
known (its default, -1, is left out): a Kafka 4.1 record reads the same and leaves it None.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, NamedTuple

from lagwatch.shared.records.offsets_layouts import Field, Layout, since

SHARE_GROUP_STATE_TOPIC = "__share_group_state"

# Record types (the key's leading int16).
SHARE_SNAPSHOT_TYPE = 0
SHARE_UPDATE_TYPE = 1

UNCHANGED = -1  # an update's start offset (or leader epoch) that it does not change


class DeliveryState(IntEnum):
    """A state batch's delivery state (records acquired by a consumer are not persisted, so never seen here)."""

    AVAILABLE = 0
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class StateBatch(NamedTuple):
    """Records first_offset..last_offset (inclusive) in one delivery state, delivered delivery_count times."""

    first_offset: int
    last_offset: int
    delivery_state: int  # a DeliveryState; an int so that a state Kafka adds later still decodes
    delivery_count: int


SHARE_PARTITION_KEY = (Field("group", "string"), Field("topic_id", "uuid"), Field("partition", "int32"))

STATE_BATCH = (
    Field("first_offset", "int64"),
    Field("last_offset", "int64"),
    Field("delivery_state", "int8"),
    Field("delivery_count", "int16"),
)
STRUCTS: dict[tuple[Field, ...], Any] = {STATE_BATCH: StateBatch}

# Acknowledged and archived records at or past the start offset (what a lag can subtract); Kafka 4.2 on, None when
# the record leaves it out (Kafka 4.1, or a count Kafka does not know: -1).
DELIVERY_COMPLETE_COUNT = Field("delivery_complete_count", "int32", since(0), tag=0)

SHARE_SNAPSHOT_VALUE = Layout(
    "ShareSnapshotValue",
    range(1),
    since(0),
    (
        Field("snapshot_epoch", "int32"),
        Field("state_epoch", "int32"),
        Field("leader_epoch", "int32"),
        Field("start_offset", "int64"),
        Field("create_timestamp", "int64"),
        Field("write_timestamp", "int64"),
        Field("state_batches", STATE_BATCH),
        DELIVERY_COMPLETE_COUNT,
    ),
)

SHARE_UPDATE_VALUE = Layout(
    "ShareUpdateValue",
    range(1),
    since(0),
    (
        Field("snapshot_epoch", "int32"),
        Field("leader_epoch", "int32"),
        Field("start_offset", "int64"),  # UNCHANGED when the update does not move the start offset
        Field("state_batches", STATE_BATCH),
        DELIVERY_COMPLETE_COUNT,
    ),
)
