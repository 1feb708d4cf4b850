"""Encoders of the share- and streams-group records of ``__consumer_offsets`` (group_layouts.py) and of the
``__share_group_state`` records (share_state_layouts.py), byte for byte as Kafka writes them: each takes the typed
record the decoder returns and writes its fields by the same layout, so what is written decodes back to it.
"""

from __future__ import annotations

from typing import Any

from lagwatch.devkit.offsets_encoders import encode_key, encode_value
from lagwatch.shared.records import group_layouts, share_state_layouts
from lagwatch.shared.records.group_records import GroupStateRecord
from lagwatch.shared.records.offsets_layouts import Field, Layout
from lagwatch.shared.records.share_state_codec import ShareStateRecord

_SHARE_STATE_VALUES = {
    share_state_layouts.SHARE_SNAPSHOT_TYPE: share_state_layouts.SHARE_SNAPSHOT_VALUE,
    share_state_layouts.SHARE_UPDATE_TYPE: share_state_layouts.SHARE_UPDATE_VALUE,
}


def _encode(record: Any, key: tuple[Field, ...], layout: Layout) -> tuple[bytes, bytes | None]:
    """(key, value) of a typed record: its attributes named as `key`'s and `layout`'s fields; None for a tombstone."""
    key_bytes = encode_key(record.record_type, key, *(getattr(record, field.name) for field in key))
    if record.tombstone:
        return key_bytes, None
    return key_bytes, encode_value(layout, 0, *(getattr(record, field.name) for field in layout.fields))


def encode_group_record(record: GroupStateRecord) -> tuple[bytes, bytes | None]:
    """The key and value (None for a tombstone) of a share- or streams-group record of ``__consumer_offsets``."""
    layout = group_layouts.LAYOUTS[record.record_type]
    return _encode(record, layout.key, layout.value)


def encode_share_state_record(record: ShareStateRecord) -> tuple[bytes, bytes | None]:
    """The key and value (None for a tombstone) of a ShareSnapshot or ShareUpdate of ``__share_group_state``; a
    delivery complete count of None is left out, as Kafka 4.1 writes the record."""
    layout = _SHARE_STATE_VALUES[record.record_type]
    return _encode(record, share_state_layouts.SHARE_PARTITION_KEY, layout)
