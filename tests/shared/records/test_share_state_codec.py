"""The ``__share_group_state`` records (ShareSnapshot, ShareUpdate): what they look like on the wire, in Kafka 4.1's
layout and with 4.2's tagged delivery complete count, and what they decode to.

Expected bytes are spelled out by hand from Kafka's JSON schemas (wire_bytes.py, never the dev kit's encoders); the
property tests hold the dev kit's encoder and the decoder to each other and damaged bytes to CodecError.
"""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagwatch.devkit.group_state_encoders import encode_share_state_record
from lagwatch.shared.records import share_state_layouts as layouts
from lagwatch.shared.records.coordinator_wire import CodecError
from lagwatch.shared.records.share_state_codec import ShareSnapshot, ShareUpdate, decode_share_state_record
from lagwatch.shared.records.share_state_layouts import UNCHANGED, DeliveryState, StateBatch
from tests.shared.records.layout_strategies import corrupted, decoded_or_codec_error, records
from tests.shared.records.wire_bytes import NO_TAGS, carray, i8, i16, i32, i64, s, tags

TOPIC_ID = "7f3e0c1a9b2d4e5f8a6b1c2d3e4f5a6b"


def key(record_type: int, group: str = "sg", partition: int = 3) -> bytes:
    return i16(record_type) + s(group) + bytes.fromhex(TOPIC_ID) + i32(partition)


def batch(first: int, last: int, state: int, count: int) -> bytes:
    return i64(first) + i64(last) + i8(state) + i16(count) + NO_TAGS


SNAPSHOT_HEAD = i16(0) + i32(2) + i32(1) + i32(7) + i64(100) + i64(1_700_000_000_000) + i64(1_700_000_000_500)
BATCHES = carray(batch(100, 109, 0, 1), batch(110, 119, 2, 1), batch(120, 120, 4, 5))
DECODED_BATCHES = (
    StateBatch(100, 109, DeliveryState.AVAILABLE, 1),
    StateBatch(110, 119, DeliveryState.ACKNOWLEDGED, 1),
    StateBatch(120, 120, DeliveryState.ARCHIVED, 5),
)


def snapshot(complete: int | None) -> ShareSnapshot:
    times = (1_700_000_000_000, 1_700_000_000_500)
    return ShareSnapshot(0, "sg", TOPIC_ID, 3, 2, 1, 7, 100, *times, DECODED_BATCHES, complete, False)


def test_snapshot_of_kafka_4_1_known_bytes() -> None:
    """No tagged field: the delivery complete count is None."""
    assert decode_share_state_record(key(0), SNAPSHOT_HEAD + BATCHES + NO_TAGS) == snapshot(None)


def test_snapshot_of_kafka_4_2_known_bytes() -> None:
    """The delivery complete count (11 acknowledged or archived records) in tag 0."""
    value = SNAPSHOT_HEAD + BATCHES + tags((0, i32(11)))
    assert decode_share_state_record(key(0), value) == snapshot(11)


def test_update_known_bytes_with_an_unchanged_start_offset() -> None:
    value = i16(0) + i32(2) + i32(UNCHANGED) + i64(UNCHANGED) + carray(batch(121, 125, 2, 1)) + tags((0, i32(16)))
    expected = ShareUpdate(1, "sg", TOPIC_ID, 3, 2, -1, -1, (StateBatch(121, 125, 2, 1),), 16, False)
    assert decode_share_state_record(key(1), value) == expected


@pytest.mark.parametrize("empty", [None, b""])
def test_tombstones(empty: bytes | None) -> None:
    absent = [None] * 8
    assert decode_share_state_record(key(0), empty) == ShareSnapshot(0, "sg", TOPIC_ID, 3, *absent, True)
    assert decode_share_state_record(key(1), empty) == ShareUpdate(1, "sg", TOPIC_ID, 3, *absent[:5], True)


def test_unknown_tags_beside_the_complete_count_are_skipped() -> None:
    value = SNAPSHOT_HEAD + BATCHES + tags((0, i32(11)), (1, b"\x09"), (40, b""))
    assert decode_share_state_record(key(0), value) == snapshot(11)


@pytest.mark.parametrize(
    ("record_key", "value", "field", "reason"),
    [
        (i16(2) + s("sg"), None, "key.version", "unknown share state record type 2"),
        (i16(0), None, "key.group", "truncated"),
        (key(0)[:-2], None, "key.partition", "truncated"),
        (key(0), i16(1) + b"\x00" * 60, "value.version", "unknown ShareSnapshotValue version 1"),
        (key(0), SNAPSHOT_HEAD + BATCHES + tags((0, i32(11) + b"\x00")), "value.delivery_complete_count", "holds 4"),
        (key(0), SNAPSHOT_HEAD + BATCHES + tags((0, b"\x00\x01")), "value.delivery_complete_count", "truncated"),
        (
            key(1),
            i16(0) + i32(2) + i32(1) + i64(5) + carray(batch(1, 2, 0, 1)[:-3]),
            "value.state_batches[0].delivery_count",
            "truncated",
        ),
    ],
)
def test_malformed_bytes_name_the_field(record_key: bytes, value: bytes | None, field: str, reason: str) -> None:
    with pytest.raises(CodecError) as err:
        decode_share_state_record(record_key, value)
    assert (err.value.field, err.value.record_type) == (field, int.from_bytes(record_key[:2], "big"))
    assert reason in str(err.value)
    assert pickle.loads(pickle.dumps(err.value)).record_type == err.value.record_type


def test_the_share_state_partition_is_the_one_kafka_hashes_to() -> None:
    """Kafka's coordinator key "group:topic id:partition", the id as Java's Uuid prints it (URL-safe base64)."""
    from lagwatch.devkit.share_state_topic_writer import share_state_partition_for
    from lagwatch.shared.windows.clock_offset import offsets_partition_of

    topic_id = "000102030405060708090a0b0c0d0e0f"
    assert share_state_partition_for("sg", topic_id, 3) == offsets_partition_of("sg:AAECAwQFBgcICQoLDA0ODw:3", 50)


def any_share_state_record() -> st.SearchStrategy:
    def of(record_class: type, record_type: int, layout: layouts.Layout) -> st.SearchStrategy:
        return records(record_class, record_type, layouts.SHARE_PARTITION_KEY, layout, layouts.STRUCTS)

    return of(ShareSnapshot, 0, layouts.SHARE_SNAPSHOT_VALUE) | of(ShareUpdate, 1, layouts.SHARE_UPDATE_VALUE)


@given(any_share_state_record())
def test_round_trip_through_the_dev_kit_encoder(record: ShareSnapshot | ShareUpdate) -> None:
    """Both layouts: a record without a delivery complete count is written as Kafka 4.1 writes it."""
    record_key, value = encode_share_state_record(record)
    assert decode_share_state_record(record_key, value) == record
    if value is not None:  # the count takes tag, size and 4 bytes in the tagged fields, else nothing
        _, without_count = encode_share_state_record(dataclasses.replace(record, delivery_complete_count=None))
        assert len(value) - len(without_count or b"") == (0 if record.delivery_complete_count is None else 6)


@given(any_share_state_record())
def test_every_truncation_raises_codec_error_naming_a_field(record: ShareSnapshot | ShareUpdate) -> None:
    record_key, value = encode_share_state_record(record)
    for end in range(len(record_key)):
        with pytest.raises(CodecError):
            decode_share_state_record(record_key[:end], value)
    for end in range(1, len(value or b"")):
        with pytest.raises(CodecError) as err:
            decode_share_state_record(record_key, value[:end])  # type: ignore[index]
        assert err.value.field.startswith("value.")


def decodes_or_codec_error(record_key: bytes, value: bytes | None) -> None:
    record = decoded_or_codec_error(decode_share_state_record, record_key, value)
    assert record is None or isinstance(record, ShareSnapshot | ShareUpdate)


@given(st.binary(max_size=40), st.none() | st.binary(max_size=200))
def test_random_bytes_never_raise_anything_but_codec_error(record_key: bytes, value: bytes | None) -> None:
    decodes_or_codec_error(record_key, value)


@given(any_share_state_record(), st.data())
def test_corrupted_records_never_raise_anything_but_codec_error(
    record: ShareSnapshot | ShareUpdate, data: st.DataObject
) -> None:
    record_key, value = encode_share_state_record(record)
    decodes_or_codec_error(record_key, corrupted(data, value or b"\x00\x00"))


@pytest.mark.parametrize(
    ("record_class", "layout"),
    [(ShareSnapshot, layouts.SHARE_SNAPSHOT_VALUE), (ShareUpdate, layouts.SHARE_UPDATE_VALUE)],
)
def test_the_records_hold_their_layouts_fields_in_order(record_class: type, layout: layouts.Layout) -> None:
    names = [field.name for field in (*layouts.SHARE_PARTITION_KEY, *layout.fields)]
    assert [field.name for field in dataclasses.fields(record_class)] == ["record_type", *names, "tombstone"]
