"""The window store on a real Redis server: the window's semantics, batched, atomic and expiring."""

import asyncio
import random
import time

import pytest
from redis.asyncio import Redis
from redis.crc import key_slot

from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Commit, WindowConfig
from lagwatch.shared.statuses.verdicts import stored_group_status
from lagwatch.shared.windows.store import WindowStore
from lagwatch.shared.windows.window import AddOutcome, PartitionWindow
from lagwatch.shared.windows.window_writes import GroupMetadataUpdate
from tests.window_sequences import switching_sources

T0 = (int(time.time()) // 60) * 60_000  # real time: group keys expire by Redis' own clock
SECOND = 1000
CLUSTER = "local"


def commit(order, offset, *, group="g", topic="t", partition=0, ts=None):
    ts = T0 + order * SECOND if ts is None else ts
    return Commit(group, topic, partition, offset, ts, order, T0 + order * SECOND)


async def store_with_broker(redis, config=None, *, topic="t", offsets=(1000,)):
    store = WindowStore(redis, config or WindowConfig())
    await store.writes.add_broker_offsets(CLUSTER, topic, list(offsets), sampled_at=T0)
    return store


async def entries(store, group="g", topic="t", partition=0):
    stored = await store.reads.get_group(CLUSTER, group)
    return next(p.entries for p in stored.partitions if (p.topic, p.partition) == (topic, partition))


async def test_a_batch_is_stored_with_lag_at_append(redis):
    store = await store_with_broker(redis, offsets=[100, 200])
    outcomes = await store.writes.add_commits(
        CLUSTER, [commit(1, 40), commit(2, 150, partition=1), commit(3, 60)], now_ms=T0
    )
    assert outcomes == [AddOutcome.APPENDED] * 3
    group = await store.reads.get_group(CLUSTER, "g")
    assert [(p.partition, [(e.offset, e.lag) for e in p.entries]) for p in group.partitions] == [
        (0, [(40, 60), (60, 40)]),
        (1, [(150, 50)]),
    ]
    assert [p.current_lag for p in group.partitions] == [40, 50]
    assert group.last_commit_ms == T0 + 3 * SECOND


async def test_every_insertion_case_matches_the_spec(redis):
    store = await store_with_broker(redis, WindowConfig(intervals=3))
    batch = [commit(10, 1), commit(30, 3), commit(20, 2), commit(20, 9), commit(40, 4), commit(5, 0)]
    assert await store.writes.add_commits(CLUSTER, batch, now_ms=T0) == [
        AddOutcome.APPENDED,
        AddOutcome.APPENDED,
        AddOutcome.INSERTED,
        AddOutcome.DUPLICATE,
        AddOutcome.APPENDED,
        AddOutcome.TOO_OLD,
    ]
    assert [(e.order, e.lag) for e in await entries(store)] == [(20, None), (30, 997), (40, 996)]


async def test_min_distance_merge_keeps_the_old_timestamp(redis):
    store = await store_with_broker(redis, WindowConfig(min_distance_ms=10 * SECOND))
    await store.writes.add_commits(CLUSTER, [commit(1, 10, ts=T0), commit(2, 20, ts=T0 + 5 * SECOND)], now_ms=T0)
    [entry] = await entries(store)
    assert (entry.offset, entry.timestamp, entry.order, entry.lag) == (20, T0, 2, 980)


async def test_commits_without_a_broker_offset_or_too_old_are_dropped_and_do_not_create_the_group(redis):
    store = WindowStore(redis, WindowConfig(expire_group_ms=60 * SECOND))
    assert await store.writes.add_commits(CLUSTER, [commit(1, 10)], now_ms=T0) == [AddOutcome.NO_BROKER_OFFSET]
    await store.writes.add_broker_offsets(CLUSTER, "t", [50], sampled_at=T0)
    old = commit(1, 10, ts=T0 - 61 * SECOND)
    assert await store.writes.add_commits(CLUSTER, [old], now_ms=T0) == [AddOutcome.EXPIRED]
    assert await store.reads.get_group(CLUSTER, "g") is None
    assert await store.reads.list_groups(CLUSTER) == []


async def test_the_store_and_the_pure_window_agree_on_random_sequences(redis):
    rng = random.Random(7)
    for run in range(25):
        config = WindowConfig(intervals=rng.choice([1, 3, 5, 10]), min_distance_ms=rng.choice([0, 0, 3 * SECOND]))
        store = WindowStore(redis, config)
        window = PartitionWindow(config)
        group, topic = f"g{run}", f"t{run}"
        for step in range(60):
            if rng.random() < 0.2:
                offset = rng.randint(0, 500)
                window.add_broker_offset(offset)
                await store.writes.add_broker_offsets(CLUSTER, topic, [offset], sampled_at=T0 + step)
                continue
            order = rng.randint(0, 80)
            ts = T0 + order * SECOND + rng.randint(-2000, 2000)
            c = commit(order, rng.randint(0, 500), group=group, topic=topic, ts=ts)
            expected = window.add_commit(c, now_ms=T0)
            assert await store.writes.add_commits(CLUSTER, [c], now_ms=T0) == [expected], (run, step)
        stored = await store.reads.get_group(CLUSTER, group)
        assert (stored.partitions[0].entries if stored else []) == window.entries, run
        if stored:
            assert stored.partitions[0].broker_offsets == window.broker_offsets


async def test_the_store_and_the_pure_window_agree_when_the_commits_switch_source(redis):
    """From the admin poller's orders to the offsets topic's positions and back (window._continued_from_admin)."""
    rng = random.Random(17)
    for run in range(25):
        config = WindowConfig(intervals=rng.choice([1, 3, 5, 10]), min_distance_ms=rng.choice([0, 0, 3 * SECOND]))
        store = await store_with_broker(redis, config, topic=f"s{run}")
        window = PartitionWindow(config)
        window.add_broker_offset(1000)
        for step, (order, ts, offset) in enumerate(switching_sources(rng, T0, 60)):
            c = Commit(f"s{run}", f"s{run}", 0, offset, ts, order, T0 + step)
            expected = window.add_commit(c, now_ms=T0)
            assert await store.writes.add_commits(CLUSTER, [c], now_ms=T0) == [expected], (run, step)
        stored = await store.reads.get_group(CLUSTER, f"s{run}")
        assert (stored.partitions[0].entries if stored else []) == window.entries, run


async def test_batched_and_one_by_one_give_the_same_windows(redis):
    rng = random.Random(3)
    commits = [commit(o, rng.randint(0, 900), group=f"g{o % 7}", partition=o % 3) for o in rng.sample(range(500), 200)]
    store = await store_with_broker(redis, WindowConfig(intervals=5), offsets=[1000, 1000, 1000])
    batched = await store.writes.add_commits(CLUSTER, commits, now_ms=T0)
    windows = {g: (await store.reads.get_group(CLUSTER, g)).partitions for g in await store.reads.list_groups(CLUSTER)}
    await redis.flushdb()
    store = await store_with_broker(redis, WindowConfig(intervals=5), offsets=[1000, 1000, 1000])
    one_by_one = [(await store.writes.add_commits(CLUSTER, [c], now_ms=T0))[0] for c in commits]
    assert batched == one_by_one
    assert {g: (await store.reads.get_group(CLUSTER, g)).partitions for g in windows} == windows


async def test_two_writers_on_one_partition_lose_nothing(redis_server, redis):
    """Interleaved batches from two connections: every commit lands (no lost read-modify-write)."""
    config = WindowConfig(intervals=400)
    await store_with_broker(redis, config)
    writers = [Redis.from_url(redis_server.url) for _ in range(2)]
    stores = [WindowStore(w, config) for w in writers]

    async def write(store, orders):
        for i in range(0, len(orders), 5):
            await store.writes.add_commits(CLUSTER, [commit(o, o) for o in orders[i : i + 5]], now_ms=T0)
            await asyncio.sleep(0)

    await asyncio.gather(write(stores[0], list(range(0, 400, 2))), write(stores[1], list(range(1, 400, 2))))
    assert sorted(e.order for e in await entries(stores[0])) == list(range(400))
    for w in writers:
        await w.aclose()


async def test_a_groups_keys_share_one_hash_slot(redis):
    for group in ["g", "orders-v2", "weird}group{name", "ümlaut"]:
        assert len({key_slot(k.encode()) for k in keys.group_keys("prod", group)}) == 1


async def test_group_keys_expire_expire_group_after_the_newest_commit(redis):
    now = T0 + 100 * SECOND
    store = await store_with_broker(redis, WindowConfig(expire_group_ms=3600 * SECOND))
    await store.writes.add_commits(CLUSTER, [commit(5, 1, ts=now - 10 * SECOND)], now_ms=now)
    expires_at = await redis.pexpiretime(keys.group_windows(CLUSTER, "g"))
    assert expires_at == now - 10 * SECOND + 3600 * SECOND


async def test_expire_groups_forgets_groups_with_no_recent_commit(redis):
    store = await store_with_broker(redis, WindowConfig(expire_group_ms=60 * SECOND))
    real_now = 1_900_000_000_000  # far future: Redis' own expiry must not race the sweep here
    await store.writes.add_commits(CLUSTER, [commit(1, 1, group="old", ts=real_now - 50 * SECOND)], now_ms=real_now)
    await store.writes.add_commits(CLUSTER, [commit(2, 2, group="new", ts=real_now - 5 * SECOND)], now_ms=real_now)
    assert await store.deletions.expire_groups(CLUSTER, now_ms=real_now + 20 * SECOND) == ["old"]
    assert await store.reads.list_groups(CLUSTER) == ["new"]
    assert await store.reads.get_group(CLUSTER, "old") is None


async def test_delete_group(redis):
    store = await store_with_broker(redis)
    await store.writes.add_commits(CLUSTER, [commit(1, 1, group="a"), commit(2, 2, group="b")], now_ms=T0)
    assert await store.deletions.delete_group(CLUSTER, "a") is True
    assert await store.deletions.delete_group(CLUSTER, "a") is False
    assert await store.reads.list_groups(CLUSTER) == ["b"]
    assert await store.reads.get_group(CLUSTER, "a") is None


async def test_delete_topic_removes_it_from_every_group_and_the_topic_list(redis):
    store = await store_with_broker(redis, offsets=[10, 10])
    await store.writes.add_broker_offsets(CLUSTER, "t2", [10], sampled_at=T0)
    # not a real topic name, but a prefix trap
    await store.writes.add_broker_offsets(CLUSTER, "t:x", [10], sampled_at=T0)
    await store.writes.add_commits(
        CLUSTER,
        [
            commit(1, 1, group="a"),
            commit(2, 1, group="a", partition=1),
            commit(3, 1, group="a", topic="t2"),
            commit(4, 1, group="b", topic="t2"),
        ],
        now_ms=T0,
    )
    owners = {("t", 0): ("10.0.0.1", "c1"), ("t2", 0): ("10.0.0.2", "c2")}
    await store.writes.set_groups_metadata(
        CLUSTER, [GroupMetadataUpdate("a", generation=1, started_at=T0, owners=owners)], T0
    )
    assert await store.deletions.delete_topic(CLUSTER, "t") == 2
    a = await store.reads.get_group(CLUSTER, "a")
    assert [(p.topic, p.partition, p.owner, p.client_id) for p in a.partitions] == [("t2", 0, "10.0.0.2", "c2")]
    assert [p.topic for p in (await store.reads.get_group(CLUSTER, "b")).partitions] == ["t2"]
    assert await store.reads.list_topics(CLUSTER) == {"t2": 1, "t:x": 1}
    assert await store.reads.topic_offsets(CLUSTER, "t") is None
    assert not await redis.exists(keys.offset_history(CLUSTER, "t"))  # a re-created "t" starts afresh
    assert (await store.reads.offset_histories(CLUSTER, [("t2", 0)]))[("t2", 0)]


async def test_listing_clusters_groups_topics_and_topic_offsets(redis):
    store = WindowStore(redis)
    await store.writes.add_broker_offsets("east", "orders", [5, 7, 9], sampled_at=T0)
    await store.writes.add_broker_offsets("east", "orders", [6, 8, 10], sampled_at=T0 + 10 * SECOND)
    await store.writes.add_broker_offsets("west", "audit", [1], sampled_at=T0)
    await store.writes.add_commits("east", [commit(1, 4, group="billing", topic="orders")], now_ms=T0)
    assert await store.reads.list_clusters() == ["east", "west"]
    assert await store.reads.list_groups("east") == ["billing"]
    assert await store.reads.list_topics("east") == {"orders": 3}
    assert await store.reads.topic_offsets("east", "orders") == [6, 8, 10]
    billing = await store.reads.get_group("east", "billing")
    assert billing.partitions[0].broker_offsets == [5, 6]
    assert billing.partitions[0].current_lag == 2


@pytest.mark.parametrize("intervals", [1, 10])
async def test_broker_rings_keep_the_last_intervals_samples(redis, intervals):
    store = WindowStore(redis, WindowConfig(intervals=intervals))
    for i in range(15):
        await store.writes.add_broker_offsets(CLUSTER, "t", [i], sampled_at=T0 + i)
    assert (await store.reads.broker_rings(CLUSTER, [("t", 0)]))[("t", 0)] == list(range(15 - intervals, 15))


async def test_group_metadata_sets_owners_and_counts_rebalances_in_the_last_hour(redis):
    store = await store_with_broker(redis, offsets=[10, 10])
    await store.writes.add_commits(CLUSTER, [commit(1, 1), commit(2, 1, partition=1)], now_ms=T0)
    hour = 3_600_000
    for generation, started in [(1, T0 - 2 * hour), (2, T0 - 600_000), (3, T0 - 60_000), (3, T0 - 30_000)]:
        owners = {("t", 0): (f"/10.0.0.{generation}", f"client-{generation}")}
        await store.writes.set_groups_metadata(
            CLUSTER, [GroupMetadataUpdate("g", generation=generation, started_at=started, owners=owners)], T0
        )
    group = (await store.reads.get_groups(CLUSTER, ["g"], now_ms=T0))[0]
    assert (group.generation, group.rebalances_last_hour) == (3, 2)  # generation 1 is older than an hour; 3 once
    assert [(p.partition, p.owner, p.client_id) for p in group.partitions] == [
        (0, "/10.0.0.3", "client-3"),
        (1, "", ""),
    ]


async def test_group_metadata_alone_does_not_make_a_group_known(redis):
    store = WindowStore(redis)
    await store.writes.set_groups_metadata(
        CLUSTER, [GroupMetadataUpdate("quiet", generation=1, started_at=T0, owners={})], T0
    )
    assert await store.reads.get_group(CLUSTER, "quiet") is None
    assert await redis.pttl(keys.group_meta(CLUSTER, "quiet")) > 0  # and it cleans itself up


async def test_the_store_reloads_its_script_after_redis_forgets_it(redis):
    store = await store_with_broker(redis)
    await store.writes.add_commits(CLUSTER, [commit(1, 1)], now_ms=T0)
    await redis.script_flush()  # as after a Redis restart without persistence of scripts
    assert await store.writes.add_commits(CLUSTER, [commit(2, 2)], now_ms=T0) == [AddOutcome.APPENDED]


async def test_stored_statuses_match_the_rules_on_random_windows(redis):
    """StoredPartition.status skips unpacking caught-up windows; it must agree with the rules everywhere."""
    from lagwatch.shared.protocol.types import RuleConfig
    from lagwatch.shared.statuses.rules import group_status

    rng = random.Random(11)
    for run in range(30):
        intervals = rng.choice([2, 3, 10])
        store = WindowStore(redis, WindowConfig(intervals=intervals))
        topic, group = f"t{run}", f"g{run}"
        for step in range(rng.randint(1, 25)):
            await store.writes.add_broker_offsets(CLUSTER, topic, [rng.randint(0, 300)] * 2, sampled_at=T0 + step)
            c = commit(step + 1, rng.randint(0, 300), group=group, topic=topic, partition=rng.randint(0, 1))
            await store.writes.add_commits(CLUSTER, [c], now_ms=T0)
        stored = await store.reads.get_group(CLUSTER, group)
        if stored is None:
            continue
        for allowed in (0, 50):
            rules = RuleConfig(allowed_lag=allowed)
            now = T0 + rng.randint(0, 60) * SECOND
            expected = group_status(CLUSTER, group, [p.to_rule_input(intervals) for p in stored.partitions], now, rules)
            assert stored_group_status(stored, intervals, now, rules) == expected, run


async def test_the_log_end_history_in_redis_agrees_with_the_pure_one(redis):
    from lagwatch.shared.protocol.types import Sample
    from lagwatch.shared.statuses.time_lag import add_sample

    rng = random.Random(5)
    config = WindowConfig(lag_history_ms=40 * SECOND, lag_history_samples=6)
    store = WindowStore(redis, config)
    expected: list[Sample] = []
    offset, at = 100, T0
    for _ in range(80):
        offset += rng.choice([0, 0, 0, 5, 30, -3])  # flat stretches, growth, and log ends that went back
        at += rng.choice([1000, 2000, 0, -500])  # and a clock that sometimes does not move forward
        add_sample(expected, Sample(offset, at), config.lag_history_ms, config.lag_history_samples)
        await store.writes.add_broker_polls(CLUSTER, {"t": {0: offset}}, sampled_at=at)
        assert (await store.reads.offset_histories(CLUSTER, [("t", 0)]))[("t", 0)] == expected


async def test_one_poll_of_many_topics_is_stored_together(redis):
    store = WindowStore(redis)
    await store.writes.add_broker_polls(
        CLUSTER, {f"t{i}": {0: i, 1: i + 1} for i in range(50)}, sampled_at=T0, partition_counts={"t0": 3}
    )
    topics = await store.reads.list_topics(CLUSTER)
    assert len(topics) == 50 and topics["t0"] == 3 and topics["t7"] == 2
    assert await store.reads.topic_offsets(CLUSTER, "t7") == [7, 8]


async def test_broker_rings_of_a_topic_with_thousands_of_partitions_are_read_whole(redis):
    """The rings are read by a script that asks Redis for a topic's partitions in slices (Lua's unpack has a
    limit near 8000): every partition of a 9000-partition topic comes back, known or not."""
    store = WindowStore(redis)
    await store.writes.add_broker_polls(CLUSTER, {"wide": {p: 10 * p for p in range(0, 9000, 2)}}, T0)
    rings = await store.reads.broker_rings(CLUSTER, [("wide", p) for p in range(9000)])
    assert len(rings) == 9000
    assert all(rings[("wide", p)] == ([10 * p] if p % 2 == 0 else []) for p in range(9000))


async def test_a_window_field_lagwatch_did_not_write_is_skipped_not_fatal_to_the_groups_read_with_it(redis, caplog):
    store = await store_with_broker(redis)
    await store.writes.add_commits(CLUSTER, [commit(1, 1, group="a"), commit(2, 2, group="b")], now_ms=T0)
    windows_key = keys.group_keys(CLUSTER, "a")[0]
    await redis.hset(windows_key, mapping={"t:notanint": b"x" * 48, b"\xff:1": b"x" * 48, "t:3": b"no ring"})
    a, b = await store.reads.get_groups(CLUSTER, ["a", "b"])
    assert [(p.topic, p.partition, [e.offset for e in p.entries]) for p in a.partitions] == [("t", 0, [1])]
    assert [e.offset for e in b.partitions[0].entries] == [2]
    assert "is not a partition's ring" in caplog.text


async def test_deleting_groups_says_whether_any_existed(redis):
    store = await store_with_broker(redis)
    await store.writes.add_commits(CLUSTER, [commit(1, 1, group="a"), commit(2, 2, group="b")], now_ms=T0)
    assert await store.deletions.delete_groups(CLUSTER, ["a", "gone"]) is True
    assert await store.deletions.delete_groups(CLUSTER, ["a", "gone"]) is False
    assert await store.deletions.delete_groups(CLUSTER, []) is False
    assert await store.reads.list_groups(CLUSTER) == ["b"]


async def test_a_group_has_every_partition_of_the_topics_it_commits_on(redis):
    """As Burrow: partitions without a commit are listed (empty ring, no broker ring), with their owner if any."""
    store = await store_with_broker(redis, offsets=[10, 10, 10])
    await store.writes.add_commits(CLUSTER, [commit(1, 4, partition=1)], now_ms=T0)
    owners = {("t", 2): ("10.0.0.9", "c9")}
    await store.writes.set_groups_metadata(
        CLUSTER, [GroupMetadataUpdate("g", generation=1, started_at=T0, owners=owners)], T0
    )
    group = await store.reads.get_group(CLUSTER, "g")
    assert [(p.partition, p.packed != b"", p.broker_offsets, p.owner, p.client_id) for p in group.partitions] == [
        (0, False, [], "", ""),
        (1, True, [10], "", ""),
        (2, False, [], "10.0.0.9", "c9"),
    ]
