"""One JSON codec for the events (status_event.py, lag_threshold_event.py), on msgspec: an event and each of its parts
is a frozen `msgspec.Struct` (`EventFields`), the one description of its fields; msgspec checks a record against it.

* Encoding: compact JSON with sorted keys, the standard library's bytes (`encode`, the reference). msgspec's own
  writer spells some floats (`1e16`, `0.00001`), DEL and every non-ASCII character differently; an event's
  `encode` method takes msgspec's bytes when they hold none of those (`encode_fast`, several times cheaper: a cold
  start encodes an event per group) and the reference's otherwise. A field the schema does not require is left out
  at its default: `None` for a field that is never null (`velocity`), `UNSET` for one that may be null
  (`max_lag_seconds`). So a field the schema requires has no default.
* Decoding raises `EventDecodeError` naming the field. `partial=True` (the notifier's boundary, which always took
  records carrying only the fields it reads) fills a missing field with its type's empty value and ignores unknown
  ones (a newer producer's); `read_partial` also wants the event's `KEY_FIELDS` (what tells the events apart).
  Otherwise a missing required field or an unknown one is an error, as in the schemas.
* A JSON number in a field of floats stays as written (`Number`: 300 stays 300), so a record re-encodes unchanged.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any, ClassVar, Self, TypeAlias, TypeVar, get_args

import msgspec
import msgspec.inspect as mi
from msgspec import UnsetType

from lagwatch.shared.statuses.json_spelling import spelled_alike

T = TypeVar("T")
E = TypeVar("E", bound="EventFields")
J = TypeVar("J", bound="JsonEvent")
Number: TypeAlias = int | float  # a JSON number as written (msgspec would make 300 in a `float` field 300.0)


class EventDecodeError(ValueError):
    """A record that is not the event it should be; the message names the field and what is wrong with it."""


class EventFields(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """The base of an event and of its parts: immutable, strict, and leaving out the fields at their defaults."""

    @classmethod
    def of(cls, value: Any) -> Self:
        """The part that is `value`'s JSON (`value.to_json()`: a velocity, a retention risk, an explanation), made
        from its fields as they are: `to_json` gives each field its type, so the check `from_document` makes (the
        reference) would only cost an event a few microseconds a part."""
        return cls(**value.to_json())


class JsonEvent(EventFields, frozen=True):
    """The codec as methods of an event."""

    KEY_FIELDS: ClassVar[frozenset[str]]  # what a partial record must carry to be this event (`read_partial`)

    def encode(self) -> bytes:
        """The bytes on the wire."""
        return encode_fast(self)

    def as_dict(self) -> dict[str, Any]:
        """The JSON object on the wire, where a document is the point (a template's context, a dead letter): keys
        sorted, arrays as lists (which `to_builtins` would leave as tuples)."""
        doc: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(self, order="sorted"))
        return doc

    @classmethod
    def decode(cls, raw: bytes | str, *, partial: bool = False) -> Self:
        """The event in a record; EventDecodeError (a ValueError) naming the field when it is not one."""
        return decode(cls, raw, partial=partial)


def load_schema(name: str) -> dict[str, Any]:
    """An event's JSON Schema, `schemas/<name>` (package data)."""
    loaded: dict[str, Any] = json.loads((resources.files("lagwatch.shared.events.schemas") / name).read_text())
    return loaded


def present(value: T | UnsetType) -> T | None:
    """A nullable field's value, None when the event leaves it out."""
    return None if isinstance(value, UnsetType) else value


def encode(event: EventFields | Mapping[str, Any]) -> bytes:
    """The event's bytes on the wire: compact JSON, sorted keys (`event` may also be its JSON object already)."""
    doc = event if isinstance(event, Mapping) else msgspec.to_builtins(event, order="sorted")
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def encode_fast(event: EventFields) -> bytes:
    """`encode`'s bytes for an event, written by msgspec where they are spelled alike (`spelled_alike`)."""
    raw = msgspec.json.encode(event, order="sorted")
    return raw if spelled_alike(raw) else encode(event)


def decode(
    cls: type[E], raw: bytes | str | bytearray, *, partial: bool = False, needs: frozenset[str] = frozenset()
) -> E:
    """The event in a record; EventDecodeError when the record is not one. A partial record must be a JSON object
    carrying the fields `needs`."""
    try:
        return msgspec.json.decode(raw, type=cls)  # a whole record: the fast path
    except msgspec.ValidationError as exc:
        if not partial:
            raise _decode_error(exc) from None
    except msgspec.DecodeError as exc:
        raise EventDecodeError(f"not JSON: {exc}") from None
    doc = msgspec.json.decode(raw)
    missing = sorted(needs - doc.keys()) if isinstance(doc, dict) else ["the event"]
    if needs and missing:
        raise EventDecodeError(f"{missing[0]}: missing")
    return _from_partial(cls, doc)


def read_partial(cls: type[J], raw: bytes | str) -> J:
    """The event in a record a reader of partial records takes (the notifier): any record `cls` decodes, else a JSON
    object carrying its `KEY_FIELDS`, decoded partially; EventDecodeError when it is neither."""
    return decode(cls, raw, partial=True, needs=cls.KEY_FIELDS)


def from_document(cls: type[E], doc: Any, *, partial: bool = False) -> E:
    """The event `cls` from a decoded JSON object (see the module's docstring for `partial`)."""
    try:
        return msgspec.convert(doc, cls)
    except msgspec.ValidationError as exc:
        if not partial:
            raise _decode_error(exc) from None
    return _from_partial(cls, doc)


def _from_partial(cls: type[E], doc: Any) -> E:
    """A record the strict decode refused, made whole first: a whole record decodes the same either way, and the
    strict decode (msgspec's alone) is the fast one."""
    try:
        return msgspec.convert(_filled(_type_info(cls), doc), cls)
    except msgspec.ValidationError as exc:
        raise _decode_error(exc) from None


def _filled(tp: mi.Type, value: Any) -> Any:
    """A partial record made whole: in each object the fields of `tp` it lacks get their type's empty value, the
    ones it does not know are dropped. Anything else is left for msgspec to refuse."""
    if isinstance(tp, mi.UnionType):
        objects = [arm for arm in tp.types if isinstance(arm, mi.StructType)]
        return _filled(objects[0], value) if objects and isinstance(value, dict) else value
    if isinstance(tp, mi.VarTupleType) and isinstance(value, list):
        return [_filled(tp.item_type, item) for item in value]
    if not (isinstance(tp, mi.StructType) and isinstance(value, dict)):
        return value
    whole: dict[str, Any] = {}
    for f, empty in zip(tp.fields, _empties(tp.cls), strict=True):
        if f.encode_name in value:
            whole[f.encode_name] = _filled(f.type, value[f.encode_name])
        elif empty is not _NO_EMPTY:
            whole[f.encode_name] = empty  # (a required object has none: msgspec names it missing)
    return whole


_NO_EMPTY = object()
_EMPTY_SCALARS: dict[type[mi.Type], Any] = {mi.StrType: "", mi.BoolType: False, mi.IntType: 0, mi.FloatType: 0.0}


@functools.cache
def _type_info(cls: type) -> mi.Type:
    return mi.type_info(cls)


@functools.cache
def _empties(cls: type[EventFields]) -> tuple[Any, ...]:
    """What a partial decode gives each field of `cls` a record leaves out (`_NO_EMPTY`: nothing, it has a default
    or is a required object)."""
    info = _type_info(cls)
    assert isinstance(info, mi.StructType)
    return tuple(
        _empty(f.type, declared.type) if f.required else _NO_EMPTY
        for f, declared in zip(info.fields, msgspec.structs.fields(cls), strict=True)
    )


def _empty(tp: mi.Type, declared: Any) -> Any:
    """A required field's empty value (`declared`: its annotation, which keeps a Literal's values in order)."""
    if isinstance(tp, mi.UnionType):
        arms = tp.types
        return None if any(isinstance(a, mi.NoneType) for a in arms) else _empty(arms[-1], None)  # int | float: 0.0
    if isinstance(tp, mi.LiteralType):
        return get_args(declared)[0]  # the first one declared
    if isinstance(tp, mi.EnumType):
        return next(iter(tp.cls)).value  # its first member: the default older events meant (Reason.LAG)
    if isinstance(tp, mi.VarTupleType):
        return []
    return _EMPTY_SCALARS.get(type(tp), _NO_EMPTY)


_WHERE = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_FIELD = re.compile(r"^Object (?P<what>missing required|contains unknown) field `(?P<field>[^`]*)`$")


def _decode_error(exc: msgspec.ValidationError) -> EventDecodeError:
    """msgspec's message ("Expected `int`, got `str` - at `$.partitions[0].partition`") as "<field>: <what>"."""
    found = _WHERE.match(str(exc))
    assert found is not None  # (the pattern matches any text)
    what, path = found["what"], (found["path"] or "").removeprefix(".")
    field = _FIELD.match(what)
    if field:
        path = f"{path}.{field['field']}" if path else field["field"]
        what = "missing" if field["what"] == "missing required" else "unknown field"
    return EventDecodeError(f"{path or 'the event'}: {what[:1].lower()}{what[1:]}")
