"""Hypothesis strategies of typed records drawn from their layouts: every field's value in the form the decoder
returns (arrays of structs as tuples of their NamedTuple, a tagged field None or a value), keys included."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from lagwatch.shared.records.offsets_layouts import Field, Layout, Nested

int32s = st.integers(-(2**31), 2**31 - 1)
texts = st.text(max_size=8)
_PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "uint16": st.integers(0, 2**16 - 1),
    "int32": int32s,
    "int64": st.integers(-(2**63), 2**63 - 1),
    "string": texts,
    "string?": st.none() | texts,
    "uuid": st.binary(min_size=16, max_size=16).map(bytes.hex),
}
for _name in ("int16", "int32", "string", "uuid"):
    _PRIMITIVES[f"[]{_name}"] = st.lists(_PRIMITIVES[_name], max_size=3)


def field_values(kind: str | tuple[Field, ...] | Nested, structs: dict[tuple[Field, ...], Any]) -> st.SearchStrategy:
    if isinstance(kind, str):
        return _PRIMITIVES[kind]
    if isinstance(kind, Nested):
        return st.none() | struct_values(kind.fields, structs)
    return st.lists(struct_values(kind, structs), max_size=2).map(tuple)


def struct_values(fields: tuple[Field, ...], structs: dict[tuple[Field, ...], Any]) -> st.SearchStrategy:
    return st.tuples(*(field_values(kind, structs) for _, kind, _, _ in fields)).map(lambda v: structs[fields](*v))


def records(
    record_class: Any, record_type: int, key: tuple[Field, ...], layout: Layout, structs: dict[tuple[Field, ...], Any]
) -> st.SearchStrategy:
    """Records of `record_class` (record type, key fields, value fields, tombstone), one in eight a tombstone."""
    keys = st.tuples(*(field_values(kind, structs) for _, kind, _, _ in key))
    values = st.tuples(
        *(
            st.none() | field_values(kind, structs) if tag is not None else field_values(kind, structs)
            for _, kind, _, tag in layout.fields
        )
    )
    tombstones = keys.map(lambda k: record_class(record_type, *k, *[None] * len(layout.fields), True))
    live = st.tuples(keys, values).map(lambda kv: record_class(record_type, *kv[0], *kv[1], False))
    return st.one_of(live, live, live, live, live, live, live, tombstones)


def corrupted(data: st.DataObject, value: bytes) -> bytes:
    """`value` with one to four bytes overwritten at drawn places."""
    damaged = bytearray(value)
    for _ in range(data.draw(st.integers(1, 4))):
        damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    return bytes(damaged)


def decoded_or_codec_error(decode: Any, key: bytes, value: bytes | None) -> object | None:
    """The one contract for untrusted bytes: `decode` returns a record, or raises CodecError naming a field (None)."""
    from lagwatch.shared.records.coordinator_wire import CodecError

    try:
        return decode(key, value)
    except CodecError as exc:
        assert exc.field
        return None
