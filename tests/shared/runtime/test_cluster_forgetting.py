"""Forgetting a cluster (shared/runtime/cluster_forgetting.py), against the real Redis: every key of the cluster goes —
windows, the evaluator's state, its indexes and schedules, its topics' log ends — and nothing of another cluster,
not even one whose name starts alike; the forgetting is recorded for the notifiers."""

import time

from lagwatch.services.evaluator.schedule_store import ScheduleStore
from lagwatch.shared.events.status_event import Incident
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Commit, Status, WindowConfig
from lagwatch.shared.runtime import cluster_forgetting
from lagwatch.shared.windows.store import WindowStore

T0 = (int(time.time()) // 60) * 60_000


async def write_cluster(redis, cluster: str, groups: int = 3) -> None:
    """What the ingest and the evaluator write of a cluster, through their own stores."""
    store = WindowStore(redis, WindowConfig(intervals=3))
    await store.writes.add_broker_offsets(cluster, "orders", [100, 100], sampled_at=T0)
    names = [f"group-{i}" for i in range(groups)]
    commits = [
        Commit(g, "orders", p, 50 + r, T0 + r, r * 100 + i, T0)
        for r in range(2)
        for i, g in enumerate(names)
        for p in (0, 1)
    ]
    await store.writes.add_commits(cluster, commits, now_ms=T0)
    statuses = StatusStore(redis, 60_000)
    for group in names:
        await statuses.transition(
            cluster, group, expected_seq=0, status=Status.WARN, keeps=Incident(None, None), event=b"e", now_ms=T0
        )
    await ScheduleStore(redis, cluster).set({g: T0 + 60_000 for g in names}, lambda g: 0)
    await redis.hset(keys.ingest_stats(cluster), "records", 6)


async def cluster_keys(redis, cluster: str) -> list[bytes]:
    """Every key named after the cluster, whatever its kind (`lw:<kind>:{<cluster>...`)."""
    return sorted([key async for key in redis.scan_iter(match=f"lw:*{{{cluster}[}}/]*")])


async def test_forgetting_deletes_every_key_of_the_cluster_and_nothing_else(redis):
    await write_cluster(redis, "old")
    await write_cluster(redis, "old2")  # a name starting alike: its keys must stay
    kept = await cluster_keys(redis, "old2")
    before = await cluster_keys(redis, "old")
    assert any(b":g:{old/" in k for k in before) and any(b":t:{old/" in k for k in before)

    surveyed = await cluster_forgetting.survey(redis, "old")
    assert (surveyed.groups, surveyed.topics, surveyed.keys) == (3, 1, len(before))
    assert await cluster_keys(redis, "old") == before  # a survey changes nothing

    forgotten = await cluster_forgetting.forget(redis, "old", now_ms=T0 + 5)
    assert forgotten == surveyed
    assert await cluster_keys(redis, "old") == []
    assert await cluster_keys(redis, "old2") == kept
    assert await redis.smembers(keys.CLUSTERS) == {b"old2"}
    assert await cluster_forgetting.forgotten(redis) == ({"old": T0 + 5}, {})


async def test_forgetting_again_finds_nothing_and_records_the_new_time(redis):
    await write_cluster(redis, "old")
    await cluster_forgetting.forget(redis, "old", now_ms=T0)
    again = await cluster_forgetting.forget(redis, "old", now_ms=T0 + 1)
    assert again.keys == 0
    await cluster_forgetting.record_closed(redis, "old", T0)
    assert await cluster_forgetting.forgotten(redis) == ({"old": T0 + 1}, {"old": T0})


async def test_an_ingest_still_polling_is_seen_by_its_lease(redis):
    assert await cluster_forgetting.ingest_running(redis, "old") is None
    await redis.set(keys.poller_lease("old"), "worker-1", px=10_000)
    assert await cluster_forgetting.ingest_running(redis, "old") == "worker-1"


async def test_a_forgetting_written_by_hand_that_is_not_a_number_is_ignored(redis):
    await redis.hset(keys.FORGOTTEN_CLUSTERS, mapping={"old": "yesterday", "older": "1700000000000"})
    assert await cluster_forgetting.forgotten(redis) == ({"older": 1_700_000_000_000}, {})
