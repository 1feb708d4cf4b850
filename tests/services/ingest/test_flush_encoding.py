"""The compiled flush (flush_encoding.pyx) writes exactly what the Python one writes.

The reference is `WindowCache.take_writes`, then `group_windows.write_commands`, each command packed by hiredis.
From the same window cache, the compiled encoder must give the same bytes, the same command count and probes, and
leave the cache in the same state (flushed: nothing dirty, expiries moved). The caches are random: groups and ring
names in any script, changed and removed rings, tombstoned (replaced) groups, groups with and without a `last`.
On a real Redis the two flushes store the same windows (tests/services/ingest/test_commit_pass.py).
"""

import copy

import hiredis
from hypothesis import given, settings
from hypothesis import strategies as st

from lagwatch.services.ingest import processor as processor_module
from lagwatch.services.ingest.flush_encoding import encode_flush
from lagwatch.services.ingest.window_cache import PackedWrites, WindowCache
from lagwatch.shared.protocol.types import WindowConfig
from lagwatch.shared.windows.group_windows import GroupWindows, write_commands

CLUSTER = "prod-é"
NAMES = st.text(min_size=1, max_size=12)
RING_NAMES = st.sampled_from(["orders:0", "orders:1", "pay:7", "bestellungen-ü:3"]) | NAMES


@st.composite
def cached_group(draw, group):
    rings = draw(st.dictionaries(RING_NAMES, st.binary(max_size=96), max_size=5))
    last = draw(st.none() | st.integers(0, 2**53 - 1))
    cached = GroupWindows(
        group,
        rings,
        last,
        had_last=draw(st.booleans()),
        expires_at=draw(st.integers(0, 2**53)),
        changed=draw(st.none() | st.sets(st.sampled_from(sorted(rings)))) if rings else None,
        removed=draw(st.none() | st.sets(RING_NAMES, max_size=3)),
        replace=draw(st.booleans()),
    )
    return cached


@st.composite
def window_cache(draw):
    cache = WindowCache(None, CLUSTER, WindowConfig(expire_group_ms=draw(st.integers(1, 10**9))))  # type: ignore[arg-type]
    for group in draw(st.lists(NAMES, unique=True, max_size=8)):
        cache.groups[group] = draw(cached_group(group))
        if draw(st.integers(0, 4)):
            cache.dirty[group] = cache.groups[group]
    return cache


def reference(cache: WindowCache) -> PackedWrites:
    commands, probes = write_commands(CLUSTER, cache.take_writes())
    return PackedWrites(b"".join(map(hiredis.pack_command, commands)), len(commands), tuple(probes))


def state(cache: WindowCache) -> tuple:
    groups = {
        g: (c.rings, c.last, c.had_last, c.expires_at, c.changed, c.removed, c.replace) for g, c in cache.groups.items()
    }
    return groups, cache.dirty


@settings(max_examples=300, deadline=None)
@given(cache=window_cache())
def test_the_compiled_flush_writes_what_the_python_flush_writes(cache):
    # a copy of each group, sharing its rings and sets (neither flush changes them): they iterate in the same order
    twin = copy.copy(cache)
    twin.groups = {g: copy.copy(c) for g, c in cache.groups.items()}
    twin.dirty = {g: twin.groups[g] for g in cache.dirty}
    assert encode_flush(cache, CLUSTER) == reference(twin)
    assert state(cache) == state(twin)
    assert cache.dirty == {}


def test_a_flush_with_nothing_changed_is_empty():
    cache = WindowCache(None, CLUSTER, WindowConfig())  # type: ignore[arg-type]
    cache.groups["quiet"] = cache.dirty["quiet"] = GroupWindows("quiet", {"t:0": b"x"}, 5)
    assert encode_flush(cache, CLUSTER) == PackedWrites(b"", 0, ())


def test_the_compiled_flush_is_built_where_the_tests_run():
    """`pip install -e .` compiles it (setup.py); without it the ingest packs its flush in Python."""
    assert processor_module.encode_flush is not None
    assert processor_module.encode_flush.__module__ == "lagwatch.services.ingest.flush_encoding"
