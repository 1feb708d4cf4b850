"""Binary layout of the rings stored in Redis: commit rings (written by the ingest and `WindowWrites.add_commits`),
broker rings (written by the Lua of `scripts.py`).

A commit ring is the concatenation of its entries, oldest first, each 48 bytes little-endian:
`offset, timestamp, observed_at, lag, order, first_order` as signed 64-bit integers, with -1 for a null lag.
A broker ring is the concatenation of `offset, sampled_at` pairs (16 bytes each), oldest first.
Fixed width: the ingest's compiled pass reads and writes an entry in place, the Lua scripts with `struct.unpack`.
"""

from __future__ import annotations

import struct

from lagwatch.shared.protocol.types import OffsetEntry

COMMIT_ENTRY = struct.Struct("<qqqqqq")
OFFSET = struct.Struct("<q")  # an entry's first field
BROKER_ENTRY = struct.Struct("<qq")
NULL = -1


def pack_commit_ring(entries: list[OffsetEntry]) -> bytes:
    return b"".join(
        COMMIT_ENTRY.pack(
            e.offset,
            e.timestamp,
            NULL if e.observed_at is None else e.observed_at,
            NULL if e.lag is None else e.lag,
            e.order,
            e.first_order,
        )
        for e in entries
    )


def unpack_commit_ring(data: bytes) -> list[OffsetEntry]:
    entries = list(map(_make_entry, COMMIT_ENTRY.iter_unpack(data)))
    if _NULL_BYTES in data:  # some field may be -1 (a null lag or observed_at): only then look at each entry
        entries = [_with_nulls(e) for e in entries]
    return entries


_make_entry = OffsetEntry._make


def commit_entry_at(data: bytes, index: int) -> OffsetEntry:
    """One entry of a packed ring (negative indexes count from the newest), without unpacking the others."""
    if index < 0:
        index += len(data) // COMMIT_ENTRY.size
    return _with_nulls(_make_entry(COMMIT_ENTRY.unpack_from(data, index * COMMIT_ENTRY.size)))


def newest_offset(data: bytes) -> int:
    """The newest entry's committed offset alone (a non-empty ring): a scan over every ring reads only this."""
    return int(OFFSET.unpack_from(data, len(data) - COMMIT_ENTRY.size)[0])


_NULL_BYTES = NULL.to_bytes(8, "little", signed=True)


def _with_nulls(e: OffsetEntry) -> OffsetEntry:
    if NULL not in (e.lag, e.observed_at):
        return e
    lag = None if e.lag == NULL else e.lag
    return e._replace(lag=lag, observed_at=None if e.observed_at == NULL else e.observed_at)


def unpack_broker_ring(data: bytes) -> list[tuple[int, int]]:
    """(offset, sampled_at) pairs, oldest first."""
    return list(BROKER_ENTRY.iter_unpack(data))
