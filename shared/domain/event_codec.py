"""One JSON codec for the events' frozen dataclasses (status_event.py, lag_threshold_event.py): the dataclass is the
one description of an event's fields; this turns it into the JSON on the wire and back.

* Encoding: compact JSON with sorted keys (the bytes the evaluator always published). A field the schema does not
  require is left out when it holds its "left out" value: `None` for a field that is never null (`velocity`),
  `ABSENT` for one that may be null (`max_lag_seconds`: `None` is written as null).
* Decoding checks every field against its type (JSON numbers, strings, booleans, enums, literals, nested objects,
  arrays) and raises `EventDecodeError` naming the field. `partial=True` (the notifier's boundary, which always took
  records carrying only the fields it reads) fills a missing field with its type's empty value and ignores fields
  it does not know (a newer producer's); otherwise a missing required field or an unknown one is an error, as in
  the schemas (`additionalProperties: false`).
"""

from __future__ import annotations

import json
import types
from collections.abc import Mapping
from dataclasses import MISSING, Field, fields, is_dataclass
from enum import Enum
from typing import Any, Literal, Self, TypeVar, Union, get_args, get_origin, get_type_hints

T = TypeVar("T")


class Absent(Enum):
    """The value of a nullable field the schema does not require, when the event leaves it out."""

    ABSENT = "absent"

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = Absent.ABSENT


class EventDecodeError(ValueError):
    """A record that is not the event it should be; the message names the field and what is wrong with it."""


class JsonEvent:
    """The codec as methods of an event dataclass (its base: no fields, empty slots, so the event keeps its slots)."""

    __slots__ = ()

    def encode(self) -> bytes:
        """The bytes on the wire."""
        return encode(self)

    def as_dict(self) -> dict[str, Any]:
        """The JSON object on the wire, for what renders documents (templates, channels, the outbox)."""
        return to_document(self)

    @classmethod
    def decode(cls, raw: bytes | str, *, partial: bool = False) -> Self:
        """The event in a record; EventDecodeError (a ValueError) naming the field when it is not one."""
        return decode(cls, raw, partial=partial)


def present(value: T | Absent) -> T | None:
    """A nullable field's value, None when the event leaves it out."""
    return None if isinstance(value, Absent) else value


def to_document(event: Any) -> dict[str, Any]:
    """The event as a JSON object (keys sorted, as on the wire); nested dataclasses as objects, tuples as arrays."""
    doc: dict[str, Any] = {}
    for f in _sorted_fields(type(event)):
        value = getattr(event, f.name)
        if value is ABSENT or (value is None and f.default is None):
            continue
        doc[f.name] = _to_json(value)
    return doc


def encode(event: Any) -> bytes:
    """The event's bytes on the wire: compact JSON, sorted keys (`event` may also be its JSON object already)."""
    doc = event if isinstance(event, Mapping) else to_document(event)
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def decode(cls: type[T], raw: bytes | str | bytearray, *, partial: bool = False) -> T:
    """The event in a record; EventDecodeError when the record is not one."""
    try:
        doc = json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise EventDecodeError(f"not JSON: {exc}") from None
    return from_document(cls, doc, partial=partial)


def from_document(cls: type[T], doc: Any, *, partial: bool = False, path: str = "") -> T:
    """The dataclass `cls` from a decoded JSON object (see the module's docstring for `partial`)."""
    if not isinstance(doc, dict):
        raise EventDecodeError(f"{path or 'the event'}: expected a JSON object, got {_json_type(doc)}")
    hints = _hints(cls)
    if not partial:
        unknown = sorted(set(doc) - set(hints))
        if unknown:
            raise EventDecodeError(f"{path or 'the event'}: unknown fields {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for f in _sorted_fields(cls):
        where = f"{path}.{f.name}" if path else f.name
        if f.name in doc:
            values[f.name] = _from_json(hints[f.name], doc[f.name], partial, where)
        elif f.default is MISSING:
            if not partial:
                raise EventDecodeError(f"{where}: missing")
            values[f.name] = _empty(hints[f.name], where)
    return cls(**values)


def _to_json(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return to_document(value)
    if isinstance(value, tuple | list):
        return [_to_json(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    return value


def _from_json(tp: Any, value: Any, partial: bool, where: str) -> Any:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return _from_union(tp, value, partial, where)
    if origin is Literal:
        if any(value == arg and type(value) is type(arg) for arg in get_args(tp)):
            return value
        raise EventDecodeError(f"{where}: {value!r} is not one of {', '.join(map(repr, get_args(tp)))}")
    if origin is tuple:
        if not isinstance(value, list):
            raise EventDecodeError(f"{where}: expected an array, got {_json_type(value)}")
        item = get_args(tp)[0]
        return tuple(_from_json(item, v, partial, f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(tp, type) and is_dataclass(tp):
        return from_document(tp, value, partial=partial, path=where)
    if isinstance(tp, type) and issubclass(tp, Enum):
        try:
            return tp(value)
        except ValueError:
            raise EventDecodeError(f"{where}: {value!r} is not one of {', '.join(str(m.value) for m in tp)}") from None
    return _scalar(tp, value, where)


def _from_union(tp: Any, value: Any, partial: bool, where: str) -> Any:
    """`X | None` (and `| Absent`, never in JSON); the events have no other unions."""
    arms = [arm for arm in get_args(tp) if arm not in (Absent, type(None))]
    nullable = type(None) in get_args(tp)
    if value is None and nullable:
        return None
    (arm,) = arms
    if arm in SCALARS:
        return _scalar(arm, value, where, " or null" if nullable else "")
    return _from_json(arm, value, partial, where)


SCALARS: dict[Any, tuple[tuple[type, ...], str]] = {
    str: ((str,), "a string"),
    bool: ((bool,), "a boolean"),
    int: ((int,), "an integer"),
    float: ((int, float), "a number"),  # 300 stays 300: the bytes re-encode unchanged
}


def _scalar(tp: Any, value: Any, where: str, or_null: str = "") -> Any:
    accepted, name = SCALARS[tp]
    if isinstance(value, accepted) and (tp is bool or not isinstance(value, bool)):
        return value
    raise EventDecodeError(f"{where}: expected {name}{or_null}, got {_json_type(value)}")


def _empty(tp: Any, where: str) -> Any:
    """The value a partial decode gives a field the record leaves out."""
    args = get_args(tp)
    if get_origin(tp) in (Union, types.UnionType):
        return None if type(None) in args else _empty(args[0], where)
    if get_origin(tp) is Literal:
        return args[0]
    if get_origin(tp) is tuple:
        return ()
    if tp in (str, bool, int, float):
        return tp()
    if isinstance(tp, type) and issubclass(tp, Enum):
        return next(iter(tp))  # its first member: the default older events meant (Reason.LAG)
    raise EventDecodeError(f"{where}: missing")


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"the number {value!r}"
    return names.get(type(value), type(value).__name__)


_FIELDS: dict[type, tuple[Field[Any], ...]] = {}
_HINTS: dict[type, dict[str, Any]] = {}


def _sorted_fields(cls: type) -> tuple[Field[Any], ...]:
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = tuple(sorted(fields(cls), key=lambda f: f.name))
    return found


def _hints(cls: type) -> dict[str, Any]:
    found = _HINTS.get(cls)
    if found is None:
        found = _HINTS[cls] = get_type_hints(cls)
    return found
