"""`window.add_commit` on a packed commit ring (the layout of `packing.py`): what the ingest keeps in memory.

The ingest owns its groups' windows and writes them to Redis as they are, so it keeps each ring in the stored
layout: the common case, a new newest entry, is one `unpack_from` of the last entry and one `pack`, and a flush
writes the bytes without encoding anything. Older commits (replays, reprocessing) go through the pure window.
Same semantics as `window.add_commit` and the ADD_COMMITS script; tests hold the three to agreement.
"""

from __future__ import annotations

from lagwatch.shared.protocol.types import Commit, WindowConfig
from lagwatch.shared.windows.packing import COMMIT_ENTRY, pack_commit_ring, unpack_commit_ring
from lagwatch.shared.windows.window import AddOutcome, add_commit

ENTRY_SIZE = COMMIT_ENTRY.size
_pack = COMMIT_ENTRY.pack
_last_entry = COMMIT_ENTRY.unpack_from

APPENDED, MERGED = AddOutcome.APPENDED, AddOutcome.MERGED
EXPIRED, NO_BROKER_OFFSET = AddOutcome.EXPIRED, AddOutcome.NO_BROKER_OFFSET


def add_to_ring(
    ring: bytes,
    offset: int,
    timestamp: int,
    order: int,
    observed_at: int,
    latest_broker_offset: int | None,
    now_ms: int,
    config: WindowConfig,
) -> tuple[AddOutcome, bytes | None]:
    """Apply one commit to a packed ring: (outcome, the new ring, or None when the ring is unchanged). The commit
    comes as scalars: the ingest applies a million a second and builds no object per commit for it."""
    if timestamp < now_ms - config.expire_group_ms:
        return EXPIRED, None
    if latest_broker_offset is None:
        return NO_BROKER_OFFSET, None
    size = len(ring)
    lag = latest_broker_offset - offset if latest_broker_offset > offset else 0
    if not size:
        return APPENDED, _pack(offset, timestamp, observed_at, lag, order, order)
    _, last_ts, _, _, last_order, last_first = _last_entry(ring, size - ENTRY_SIZE)
    if order <= last_order:
        commit = Commit("", "", 0, offset, timestamp, order, observed_at)  # the group is not the window's concern
        return _add_older(ring, commit, latest_broker_offset, now_ms, config)
    if timestamp - last_ts < config.min_distance_ms:  # signed: window._merges_into_previous
        return MERGED, ring[: size - ENTRY_SIZE] + _pack(offset, last_ts, observed_at, lag, order, last_first)
    keep = (config.intervals - 1) * ENTRY_SIZE  # the newest intervals - 1 entries stay beside the new one
    if size > keep:
        ring = ring[size - keep :]
    return APPENDED, ring + _pack(offset, timestamp, observed_at, lag, order, order)


def _add_older(
    ring: bytes, commit: Commit, latest_broker_offset: int, now_ms: int, config: WindowConfig
) -> tuple[AddOutcome, bytes | None]:
    """A commit at or before the newest entry: rare, so the pure window decides on the unpacked ring."""
    entries = unpack_commit_ring(ring)
    outcome = add_commit(entries, commit, latest_broker_offset, now_ms, config)
    return outcome, (pack_commit_ring(entries) if outcome.stored else None)
