"""Decoder of the records the Kafka share coordinator writes into ``__share_group_state`` (ShareSnapshot and
ShareUpdate, one share-partition each), by the layouts of share_state_layouts.py.

A ``None`` or empty value is a tombstone (the coordinator deletes a share-partition's state that way); the rest of
the behaviour (unknown versions, tagged fields, trailing bytes, UTF-8) is coordinator_wire.py's, and anything
undecodable raises the same CodecError as the ``__consumer_offsets`` decoder, for the caller to count and skip.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from lagwatch.shared.records import share_state_layouts as layouts
from lagwatch.shared.records.coordinator_wire import CodecError, _record_decoder, _typed_record
from lagwatch.shared.records.share_state_layouts import StateBatch


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    """A share-partition's whole state: every batch past `start_offset` (the SPSO) not yet available again."""

    record_type: int
    group: str
    topic_id: str  # 32 hex digits
    partition: int
    snapshot_epoch: int | None
    state_epoch: int | None
    leader_epoch: int | None
    start_offset: int | None
    create_timestamp: int | None
    write_timestamp: int | None
    state_batches: tuple[StateBatch, ...] | None
    delivery_complete_count: int | None  # None when left out: before Kafka 4.2, or not known (-1)
    tombstone: bool


@dataclass(frozen=True, slots=True)
class ShareUpdate:
    """A change to the state of the last snapshot (of `snapshot_epoch`): the batches given replace those ranges, and
    `start_offset` moves the SPSO unless it is share_state_layouts.UNCHANGED (-1)."""

    record_type: int
    group: str
    topic_id: str
    partition: int
    snapshot_epoch: int | None
    leader_epoch: int | None
    start_offset: int | None
    state_batches: tuple[StateBatch, ...] | None
    delivery_complete_count: int | None  # None when left out: before Kafka 4.2, or not known (-1)
    tombstone: bool


ShareStateRecord = ShareSnapshot | ShareUpdate

_DECODERS = {
    layouts.SHARE_SNAPSHOT_TYPE: _record_decoder(
        ShareSnapshot, layouts.SHARE_PARTITION_KEY, layouts.SHARE_SNAPSHOT_VALUE, layouts.STRUCTS
    ),
    layouts.SHARE_UPDATE_TYPE: _record_decoder(
        ShareUpdate, layouts.SHARE_PARTITION_KEY, layouts.SHARE_UPDATE_VALUE, layouts.STRUCTS
    ),
}


def decode_share_state_record(key: bytes, value: bytes | None) -> ShareStateRecord:
    """Decodes one ``__share_group_state`` record; a ``None`` or empty value is a tombstone. Raises CodecError,
    with the record type when the key has one, naming the field at fault."""
    key, value, record_type = _typed_record(key, value)
    decode = _DECODERS.get(record_type)
    if decode is None:
        raise CodecError("key.version", f"unknown share state record type {record_type}", record_type)
    try:
        record: ShareStateRecord = decode(record_type, key, value)
    except CodecError as exc:
        exc.record_type = record_type
        raise
    except (struct.error, IndexError, UnicodeDecodeError, OverflowError) as exc:
        # Safety net only: every reader checks its bounds, so reaching this is a codec bug.
        raise CodecError("record", f"undecodable ({exc})", record_type) from exc
    return record
