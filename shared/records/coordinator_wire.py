"""How the Kafka coordinators' records are laid out on the wire, read by the layouts of offsets_layouts.py: the
primitive readers, and a struct reader planned once per layout and version. The ``__consumer_offsets`` decoders
(offsets_codec.py, group_records.py) and the ``__share_group_state`` decoder (share_state_codec.py) read through it.

Behaviour taken from Kafka's coordinator deserializer: a value version it does not know is an error, tagged fields
whose tag a layout does not name are skipped, and bytes left over after the last field are ignored (Kafka reads the
fields it knows and never checks what remains). Invalid UTF-8 is an error (Java would substitute U+FFFD): Kafka's
writer only emits valid UTF-8, so such bytes are corruption and must not invent a new group or topic name.

The underscore names are the records package's own: its decoders share them, nothing outside should.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from lagwatch.shared.records import offsets_layouts as layouts
from lagwatch.shared.records.offsets_layouts import Field, Layout, Nested

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
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
    """Skips a tagged-fields section (for a struct whose layout names no tag)."""
    return _read_tags(buf, pos, field, {}, [])


TaggedPlan = dict[int, tuple[int, str, Reader]]  # tag -> (index among the struct's values, field name, reader)


def _read_tags(buf: bytes, pos: int, field: str, known: TaggedPlan, values: list[Any]) -> int:
    """Reads a tagged-fields section: a tag in `known` into its place in `values`, any other skipped (as Kafka does
    with a tag it does not know)."""
    count, pos = _uvarint(buf, pos, field)
    for _ in range(count):
        tag, pos = _uvarint(buf, pos, field)
        size, pos = _uvarint(buf, pos, field)
        end = pos + size
        if end > len(buf):
            raise _truncated(field, size, buf, pos)
        if tag in known:
            index, name, read = known[tag]
            path = field.removesuffix("tagged_fields") + name
            values[index], at = read(buf[:end], pos, path)
            if at != end:
                raise CodecError(path, f"tagged field of {size} bytes holds {at - pos}")
        pos = end
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

    def fixed(st: struct.Struct, convert: Callable[[bytes], Any] | None = None) -> Reader:
        """An array of fixed-size items: integers unpacked at once, or (with `convert`) raw items converted each."""
        size = st.size

        def read(buf: bytes, pos: int, field: str) -> tuple[list[Any], int]:
            n, pos = array_length(buf, pos, field)
            end = pos + size * n
            if end > len(buf):
                raise _truncated(field, size * n, buf, pos)
            if convert is not None:
                return [convert(buf[at : at + size]) for at in range(pos, end, size)], end
            return list(struct.unpack_from(f">{n}{st.format[-1]}", buf, pos)), end

        return read

    def strings(buf: bytes, pos: int, field: str) -> tuple[list[str], int]:
        n, pos = array_length(buf, pos, field)
        items = []
        for i in range(n):
            item, pos = string(buf, pos, f"{field}[{i}]")
            items.append(item)
        return items, pos

    readers: dict[str, Reader] = {
        "int8": partial(_int, _I8),
        "int16": _int16,
        "uint16": partial(_int, _U16),
        "int32": _int32,
        "int64": partial(_int, _I64),
        "uuid": _uuid,
        "string": string,
        "string?": _sized(string_length, _text, "string", nullable=True),
        "bytes": _sized(length, _blob, "bytes"),
        "bytes?": _sized(length, _blob, "bytes", nullable=True),
        "[]int32": int32s,
        "[]string": strings,
        "[]int16": fixed(_I16),
        "[]uuid": fixed(struct.Struct("16s"), bytes.hex),
    }
    return _Wire(flexible, array_length, readers)


_CLASSIC = _wire(False, _str16, _int16, _int32)
_COMPACT = _wire(True, _cstr, _compact_length, _compact_length)


StructReader = Callable[[bytes, int, str], tuple[list[Any], int]]


def _field_reader(kind: str | tuple[Field, ...] | Nested, version: int, wire: _Wire) -> Reader:
    if isinstance(kind, str):
        return wire.readers[kind]
    if isinstance(kind, Nested):
        return _nested_reader(_struct_reader(kind.fields, version, wire))
    return _array_reader(_struct_reader(kind, version, wire), wire)


def _struct_reader(fields: tuple[Field, ...], version: int, wire: _Wire) -> StructReader:
    """A reader of `fields` as `version` lays them out, planned once: their values in order (None for a field the
    version does not carry, or a tagged field the record leaves out), then a flexible struct's tagged fields. Its
    `path` prefixes the field names in errors."""
    plan: list[tuple[str, Reader | None]] = []
    tagged: TaggedPlan = {}
    for index, (name, kind, versions, tag) in enumerate(fields):
        if version not in versions or tag is not None:
            plan.append((name, None))
            if version in versions and tag is not None and wire.flexible:
                tagged[tag] = (index, name, _field_reader(kind, version, wire))
        else:
            plan.append((name, _field_reader(kind, version, wire)))
    flexible = wire.flexible

    def read(buf: bytes, pos: int, path: str) -> tuple[list[Any], int]:
        values: list[Any] = []
        for name, read_field in plan:
            if read_field is None:
                values.append(None)
            else:
                value, pos = read_field(buf, pos, path + name)
                values.append(value)
        if flexible:
            pos = _read_tags(buf, pos, path + "tagged_fields", tagged, values)
        return values, pos

    return read


def _nested_reader(item: StructReader) -> Reader:
    def read(buf: bytes, pos: int, field: str) -> tuple[list[Any] | None, int]:
        marker, pos = _int(_I8, buf, pos, field)
        if marker < 0:
            return None, pos
        return item(buf, pos, f"{field}.")

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


def _typed_record(key: Any, value: Any) -> tuple[bytes, bytes | None, int]:
    """A record's key and value as ``bytes`` (the readers slice and decode bytes; a bytearray or memoryview is
    copied once) and its record type, the key's leading int16."""
    if type(key) is not bytes:
        key = bytes(key)
    if value is not None and type(value) is not bytes:
        value = bytes(value)
    try:
        (record_type,) = _I16.unpack_from(key, 0)
    except struct.error:
        raise _truncated("key.version", 2, key, 0) from None
    return key, value, record_type


def _key_reader(fields: tuple[Field, ...]) -> Callable[[bytes], list[Any]]:
    read = _struct_reader(fields, 0, _CLASSIC)
    return lambda key: read(key, 2, "key.")[0]


def _unknown_version(layout: Layout, version: int) -> CodecError:
    known = f"{layout.versions[0]}-{layout.versions[-1]}"
    return CodecError("value.version", f"unknown {layout.name} version {version} (known: {known})")


def _version_readers(layout: Layout) -> list[StructReader]:
    """A reader per version of `layout`, in version order."""
    return [_struct_reader(layout.fields, v, _COMPACT if v in layout.flexible else _CLASSIC) for v in layout.versions]


ValueReader = Callable[[bytes], tuple[int, list[Any]]]


def _value_reader(layout: Layout) -> ValueReader:
    """A reader of `layout`'s values: the version and its fields; a version Kafka does not define is an error, as in
    Kafka."""
    readers = _version_readers(layout)
    first = layout.versions[0]

    def read(value: bytes) -> tuple[int, list[Any]]:
        version, pos = _int(_I16, value, 0, "value.version")
        if version not in layout.versions:
            raise _unknown_version(layout, version)
        return version, readers[version - first](value, pos, "value.")[0]

    return read


StructTypes = dict[tuple[Field, ...], Any]  # a struct's fields -> the NamedTuple its values decode to


def _typed(fields: tuple[Field, ...], values: list[Any], structs: StructTypes) -> list[Any]:
    """`values` as read by `fields`' reader, each array of structs as a tuple of its NamedTuple (`structs`) and each
    nested struct as one (None stays None)."""
    typed = list(values)
    for i, (_, kind, _, _) in enumerate(fields):
        value = values[i]
        if value is None or isinstance(kind, str):
            continue
        if isinstance(kind, Nested):
            typed[i] = structs[kind.fields](*_typed(kind.fields, value, structs))
        else:
            make = structs[kind]
            typed[i] = tuple(make(*_typed(kind, item, structs)) for item in value)
    return typed


def _record_decoder(
    record_class: Callable[..., Any], key: tuple[Field, ...], layout: Layout, structs: StructTypes
) -> Callable[[int, bytes, bytes | None], Any]:
    """A decoder of one record type into `record_class`, built as record_class(record type, key fields, value
    fields, tombstone): a tombstone's value fields are None."""
    read_key = _key_reader(key)
    read_value = _value_reader(layout)
    absent = [None] * len(layout.fields)

    def decode(record_type: int, key: bytes, value: bytes | None) -> Any:
        keys = read_key(key)
        if not value:
            return record_class(record_type, *keys, *absent, True)
        _, values = read_value(value)
        return record_class(record_type, *keys, *_typed(layout.fields, values, structs), False)

    return decode
