"""The judging clock (shared/windows/read_through.py): the rules judge no later than the ingest has read, so a stretch
in which the ingest could not read the offsets topic does not make caught-up consumers look stopped."""

import time

import aiohttp

from lagwatch.shared.protocol.types import Commit
from lagwatch.shared.windows.read_through import READ_THROUGH_GRACE_MS, judging_clock
from lagwatch.shared.windows.read_through_store import ReadThroughStore
from lagwatch.shared.windows.store import WindowStore
from tests.evaluated import evaluate
from tests.kafka_helpers import CLUSTER, make_config
from tests.services.api.test_api import serving

SECOND = 1000


def test_the_wall_clock_while_the_ingest_keeps_up_and_held_past_what_it_read():
    assert judging_clock(10_000, []) == 10_000  # no ingest ever said how far it read
    assert judging_clock(10_000, [9_500, 9_800]) == 10_000  # within the grace of both
    assert judging_clock(10_000, [9_800, 5_000]) == 5_000 + READ_THROUGH_GRACE_MS  # the oldest partition holds it


async def stopped_group(redis, config, now):
    """A group whose last commit (with lag) is older than its window spans, by the wall clock: STOP."""
    store = WindowStore(redis, config.window())
    await store.writes.add_broker_offsets(CLUSTER, "orders", [200], sampled_at=now - 10 * SECOND)
    commits = [Commit("billing", "orders", 0, 100 + i, now - (12 - i) * SECOND, i + 1, now) for i in range(3)]
    await store.writes.add_commits(CLUSTER, commits, now_ms=now)


async def test_a_group_is_not_judged_stopped_past_the_instant_the_ingest_read_through(redis_server, redis):
    config = make_config("127.0.0.1:1", redis_server.url, STORAGE__INTERVALS="3")
    now = int(time.time() * 1000)
    await stopped_group(redis, config, now)
    last_commit = now - 10 * SECOND
    # the ingest read every offsets partition through just after the last commit, then nothing more (Kafka away)
    await ReadThroughStore(redis, CLUSTER).record_partitions(range(50), last_commit + 500)
    report = await evaluate(redis, config, CLUSTER, ["billing"])
    assert report.transitions == 1 and report.held_ms >= 8 * SECOND
    results = await redis.hget(f"lw:c:{{{CLUSTER}}}:statuses", "billing")
    assert results == b"OK"  # judged at last_commit + 1.5 s: the window (2 s) has not run out
    # due again soon (not in a tight loop, not never): the clock resumes as soon as the ingest reads on
    (at,) = report.next_at.values()
    assert now < at <= int(time.time() * 1000) + SECOND

    # the ingest has read on (nothing new from this group): now it is STOP
    await ReadThroughStore(redis, CLUSTER).record_partitions(range(50), int(time.time() * 1000))
    report = await evaluate(redis, config, CLUSTER, ["billing"])
    assert report.held_ms == 0
    assert await redis.hget(f"lw:c:{{{CLUSTER}}}:statuses", "billing") == b"ERR"


async def test_without_a_read_through_record_the_wall_clock_judges(redis_server, redis):
    config = make_config("127.0.0.1:1", redis_server.url, STORAGE__INTERVALS="3")
    now = int(time.time() * 1000)
    await stopped_group(redis, config, now)
    report = await evaluate(redis, config, CLUSTER, ["billing"])
    assert report.held_ms == 0
    assert await redis.hget(f"lw:c:{{{CLUSTER}}}:statuses", "billing") == b"ERR"


async def test_entries_of_another_mode_or_worker_count_are_dropped_by_the_first_write(redis_server, redis):
    store = ReadThroughStore(redis, CLUSTER)
    await store.record_admin((0, 2), 1_000)
    await store.record_admin((1, 2), 2_000)
    await ReadThroughStore(redis, CLUSTER).record_admin((0, 1), 5_000)  # restarted with one worker
    assert await store.instants() == [5_000]
    await ReadThroughStore(redis, CLUSTER).record_partitions([0, 1], 7_000)  # then in topic mode
    assert sorted(await store.instants()) == [7_000, 7_000]


async def test_the_api_judges_at_the_evaluators_clock(redis_server, redis):
    """The status route and the dashboard's group page compute a status on request: held as the evaluator is."""
    config = make_config("127.0.0.1:1", redis_server.url, STORAGE__INTERVALS="3")
    now = int(time.time() * 1000)
    await stopped_group(redis, config, now)
    paths = [f"/v3/kafka/{CLUSTER}/consumer/billing/status", f"/dashboard/api/group/{CLUSTER}/billing"]

    async def statuses(api):
        async with aiohttp.ClientSession() as http:
            found = []
            for path in paths:
                async with http.get(api.url + path) as response:
                    found.append((await response.json())["status"]["status"])
            return found

    async with serving(config) as api:
        await ReadThroughStore(redis, CLUSTER).record_partitions(range(50), now - 10 * SECOND + 500)
        assert await statuses(api) == ["OK", "OK"]  # judged 1.5 s after the last commit
        await ReadThroughStore(redis, CLUSTER).record_partitions(range(50), int(time.time() * 1000))
        assert await statuses(api) == ["ERR", "ERR"]


async def test_an_entry_lagwatch_did_not_write_is_left_out(redis_server, redis):
    await redis.hset(f"lw:c:{{{CLUSTER}}}:read-through", mapping={"0": "garbage", "1": "5000"})
    assert await ReadThroughStore(redis, CLUSTER).instants() == [5000]
