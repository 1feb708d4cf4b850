"""The ingest's window cache loading groups from a real Redis server."""

import time

from lagwatch.services.ingest.records import KeyCache
from lagwatch.services.ingest.window_cache import WindowCache
from lagwatch.shared.protocol.group_filter import GroupFilter
from lagwatch.shared.protocol.types import Commit, WindowConfig
from lagwatch.shared.windows.store import WindowStore

CLUSTER = "local"
NOW = int(time.time() * 1000)


async def test_loaded_groups_hold_one_copy_of_each_partition_field(redis):
    """A worker holds every group of its share in memory: a field name repeated per group's ring would cost memory in
    proportion to the partitions held, so the loaded rings and the decoded commit keys name a field with one string."""
    store = WindowStore(redis, WindowConfig())
    await store.writes.add_broker_offsets(CLUSTER, "orders", [1000, 1000], sampled_at=NOW)
    groups = [f"group-{i}" for i in range(3)]
    commits = [Commit(g, "orders", p, 10, NOW, order, NOW) for order, g in enumerate(groups) for p in (0, 1)]
    await store.writes.add_commits(CLUSTER, commits, NOW)
    cache = WindowCache(redis, CLUSTER, WindowConfig())

    await cache.load(dict.fromkeys(groups, 0))

    for p in (0, 1):
        decoded = KeyCache(GroupFilter()).named("another-group", "orders", p).field
        fields = [next(f for f in cache.groups[g].rings if f == decoded) for g in groups]
        assert all(f is decoded for f in fields)
