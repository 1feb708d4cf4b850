"""Burrow's template names (`burrow_names`: `.Cluster`, `.Group`, `.ID`, `.Start`, `.Extras`, `.Result`) and helpers
(`HELPERS`, each a global function and a filter), for templates ported from Burrow's notifier line by line:
`{{.Result.TotalLag}}` becomes `{{ Result.TotalLag }}`. What differs from Go's: docs/webhooks.md.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

INT64 = 1 << 64
GO_ESCAPED = {ord(c): f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"}  # json.Marshal's HTML-safe escapes
COUNTED = ("warn", "stop", "stall", "rewind")  # partitioncounts' keys besides "unknown"; OK is not counted


# --- Burrow's names ---------------------------------------------------------------------------------------------


def burrow_names(event: Mapping[str, Any], incident: Mapping[str, Any], extras: Mapping[str, str]) -> dict[str, Any]:
    """`Cluster`, `Group`, `ID` (the incident's id: the same for its open and its close, as Burrow's), `Start`
    (when the incident began, epoch ms), `Extras` and `Result` (Burrow's ConsumerGroupStatus, field names and all)."""
    return {
        "Cluster": event.get("cluster"),
        "Group": event.get("group"),
        "ID": incident.get("id") or "",  # Burrow: "" outside an incident
        "Start": incident.get("started_at"),
        "Extras": dict(extras),
        "Result": burrow_result(event),
    }


class GoStruct(dict[str, Any]):
    """One of Burrow's Go structs: read by its Go field names (`Result.TotalLag`), written by `jsonencoder` with
    their JSON names, in declaration order, as json.Marshal writes a struct."""

    JSON_NAMES: typing.ClassVar[dict[str, str]] = {
        "ClientID": "client_id",
        "CurrentLag": "current_lag",
        "TotalPartitions": "partition_count",
        "TotalLag": "totallag",
    }

    def go_json(self) -> dict[str, Any]:
        return {self.JSON_NAMES.get(k, k.lower()): v for k, v in self.items()}


def burrow_result(event: Mapping[str, Any]) -> GoStruct:
    maxlag = event.get("maxlag")
    return GoStruct({
        "Cluster": event.get("cluster"),
        "Group": event.get("group"),
        "Status": event.get("status"),
        "Complete": event.get("complete"),
        "Partitions": [burrow_partition(p) for p in event.get("partitions") or []],
        "TotalPartitions": event.get("partition_count"),
        "Maxlag": burrow_partition(maxlag) if maxlag else None,
        "TotalLag": event.get("totallag"),
    })  # fmt: skip


def burrow_partition(p: Mapping[str, Any]) -> GoStruct:
    out = GoStruct({
        "Topic": p.get("topic"),
        "Partition": p.get("partition"),
        "Owner": p.get("owner") or "",
        "ClientID": p.get("client_id") or "",
        "Status": p.get("status"),
    })  # fmt: skip
    for name, key in (("Start", "start_offset"), ("End", "end_offset")):
        if key in p:
            out[name] = GoStruct({"Offset": p[key]})
    out["CurrentLag"] = p.get("current_lag")
    return out


# --- Burrow's helpers -------------------------------------------------------------------------------------------


def _go_value(value: Any) -> Any:
    """What json.Marshal sees: structs in declaration order under their JSON names, maps with sorted keys, and
    whole floats as integers (Go writes 1, not 1.0)."""
    if isinstance(value, GoStruct):
        return {k: _go_value(v) for k, v in value.go_json().items()}
    if isinstance(value, Mapping):
        return {str(k): _go_value(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, list | tuple):
        return [_go_value(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    return value


def jsonencoder(value: Any) -> str:
    """JSON as Go's json.Marshal writes it: compact, and <, >, &, U+2028, U+2029 escaped."""
    return json.dumps(_go_value(value), separators=(",", ":"), ensure_ascii=False).translate(GO_ESCAPED)


def _field(p: Mapping[str, Any], name: str) -> Any:
    """A partition's field in either spelling: the event's (`status`) or Burrow's (`Status`)."""
    return p[name] if name in p else p.get(name.title().replace("_", ""))


def topicsbystatus(partitions: Iterable[Mapping[str, Any]] | None) -> dict[str, list[str]]:
    """{partition status: [topic, ...]}, each topic once per status (sorted here; Go's map order is random)."""
    found: dict[str, set[str]] = {}
    for p in partitions or []:
        found.setdefault(str(_field(p, "status")), set()).add(str(_field(p, "topic")))
    return {status: sorted(topics) for status, topics in sorted(found.items())}


def partitioncounts(partitions: Iterable[Mapping[str, Any]] | None) -> dict[str, int]:
    """{"warn", "stop", "stall", "rewind", "unknown"}: partitions per status; OK ones are not counted, any other
    status counts as unknown."""
    counts = dict.fromkeys((*COUNTED, "unknown"), 0)
    for p in partitions or []:
        status = str(_field(p, "status")).lower()
        if status != "ok":
            counts[status if status in COUNTED else "unknown"] += 1
    return counts


def maxlag(partition: Mapping[str, Any] | None) -> int:
    """A partition's current lag; 0 for none (Burrow's `maxlag .Result.Maxlag` of a group without partitions)."""
    if not partition:
        return 0
    return int(_field(partition, "current_lag") or 0)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _int64(value: int) -> int:
    """Go's int arithmetic wraps at 64 bits (and it keeps results small)."""
    value %= INT64
    return value - INT64 if value >= INT64 >> 1 else value


def add(a: int, b: int) -> int:
    return _int64(_int(a) + _int(b))


def minus(a: int, b: int) -> int:
    return _int64(_int(a) - _int(b))


def multiply(a: int, b: int) -> int:
    return _int64(_int64(_int(a)) * _int64(_int(b)))


def divide(a: int, b: int) -> int:
    """Go's integer division: truncated toward zero; dividing by zero fails the template (Go panics)."""
    a, b = _int64(_int(a)), _int64(_int(b))
    if b == 0:
        raise ZeroDivisionError("divide by zero")
    quotient = abs(a) // abs(b)
    return _int64(quotient if (a < 0) == (b < 0) else -quotient)


def formattimestamp(timestamp_ms: int | float | None, layout: str) -> str:
    """Epoch milliseconds in a Go time layout ("2006-01-02T15:04:05Z07:00", "Jan 02, 2006 15:04:05 UTC"), in UTC."""
    if timestamp_ms is None:
        return ""
    ms = int(timestamp_ms)
    moment = datetime.fromtimestamp(ms // 1000, tz=UTC)
    return go_format(moment, (ms % 1000) * 1_000_000, layout)


HELPERS = {
    f.__name__: f
    for f in (jsonencoder, topicsbystatus, partitioncounts, add, minus, multiply, divide, maxlag, formattimestamp)
}


# --- Go's time layouts ------------------------------------------------------------------------------------------

# Go's layout elements, longest first where one starts another (time/format.go's nextStdChunk decides the same way)
_ZONES = ("Z070000", "Z07:00:00", "Z0700", "Z07:00", "Z07", "-070000", "-07:00:00", "-0700", "-07:00", "-07")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")  # fmt: skip
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _element(layout: str, i: int) -> tuple[str, int] | None:
    """The layout element starting at `i` and its length, or None for a literal character."""
    rest = layout[i:]
    for long, short in (("January", "Jan"), ("Monday", "Mon")):
        if rest.startswith(long):
            return long, len(long)
        if rest.startswith(short) and not rest[3:4].islower():  # "Janet" is no month
            return short, 3
    if rest.startswith("_2006"):  # Go reads a literal "_", then the year
        return None
    if rest.startswith("MST"):
        return "MST", 3
    for zone in _ZONES:
        if rest.startswith(zone):
            return zone, len(zone)
    for token in ("2006", "002", "__2", "_2", "01", "02", "03", "04", "05", "06", "15", "PM", "pm"):
        if rest.startswith(token):
            return token, len(token)
    if rest[0] in "12345":
        return rest[0], 1
    if rest[0] in ".," and len(rest) > 1 and rest[1] in "09":
        j = 1
        while j < len(rest) and rest[j] == rest[1]:
            j += 1
        if not (j < len(rest) and rest[j].isdigit()):
            return rest[:j], j
    return None


def go_format(moment: datetime, nanos: int, layout: str) -> str:
    """`moment` (UTC) formatted as Go's Time.Format(layout) does; `nanos` are the fraction of its second."""
    out: list[str] = []
    i = 0
    while i < len(layout):
        found = _element(layout, i)
        if found is None:
            out.append(layout[i])
            i += 1
            continue
        token, length = found
        out.append(_value(moment, nanos, token))
        i += length
    return "".join(out)


def _value(t: datetime, nanos: int, token: str) -> str:
    hour12 = t.hour % 12 or 12
    yday = t.timetuple().tm_yday
    simple = {
        "2006": f"{t.year:04d}", "06": f"{t.year % 100:02d}",
        "January": _MONTHS[t.month - 1], "Jan": _MONTHS[t.month - 1][:3], "01": f"{t.month:02d}", "1": str(t.month),
        "Monday": _DAYS[t.weekday()], "Mon": _DAYS[t.weekday()][:3],
        "02": f"{t.day:02d}", "_2": f"{t.day:>2}", "2": str(t.day), "002": f"{yday:03d}", "__2": f"{yday:>3}",
        "15": f"{t.hour:02d}", "03": f"{hour12:02d}", "3": str(hour12),
        "04": f"{t.minute:02d}", "4": str(t.minute), "05": f"{t.second:02d}", "5": str(t.second),
        "PM": "PM" if t.hour >= 12 else "AM", "pm": "pm" if t.hour >= 12 else "am",
        "MST": "UTC",
    }  # fmt: skip
    if token in simple:
        return simple[token]
    if token in _ZONES:  # UTC: "Z" for the ISO 8601 forms, a zero offset for the numeric ones
        return "Z" if token.startswith("Z") else token.replace("07", "00").replace("-", "+", 1)
    digits = f"{nanos:09d}"[: len(token) - 1]  # fractional seconds: ".000" fixed, ".999" without trailing zeros
    if token[1] == "9":
        digits = digits.rstrip("0")
        return f"{token[0]}{digits}" if digits else ""
    return f"{token[0]}{digits}"
