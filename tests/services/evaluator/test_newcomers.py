"""New groups wait behind known ones (services/evaluator/newcomers.py): a flood of new names written at once does
not hold up a known group's REWIND, and past `evaluator.max-groups` new groups are counted and skipped."""

import asyncio
import sys
import time

from prometheus_client import REGISTRY
from redis.asyncio import Redis

from lagwatch.devkit.offsets_topic_writer import OffsetCommitSpec
from lagwatch.services.evaluator.newcomers import NewcomerQueue, triage, within_cap
from lagwatch.shared.protocol.types import Status
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config
from tests.services.evaluator.test_evaluator import STATUS_TOPIC
from tests.system.test_status_end_to_end import Scenario, ingest_and_evaluator

FLOOD = 5000  # the status events of many more would pass what the Kafka mock keeps of a partition


def test_triage_puts_the_worst_known_groups_first_and_keeps_the_new_in_order():
    groups = ["n1", "ok", "err", "n2", "warn"]
    statuses = [None, Status.OK, Status.ERR, None, Status.WARN]
    assert triage(groups, statuses) == (["err", "warn", "ok"], ["n1", "n2"])


def test_the_queue_holds_each_group_once_oldest_first():
    queue = NewcomerQueue()
    assert queue.add(["a", "b", "c"]) == 3
    assert queue.add(["b", "d"]) == 1
    assert queue.take(2) == ["a", "b"]
    assert queue.take(10) == ["c", "d"]
    assert len(queue) == 0


def test_the_queue_emptied_holds_no_memory_of_its_size():
    queue = NewcomerQueue()
    queue.add(f"new-{i}" for i in range(2000))
    while queue.take(500):
        pass
    assert len(queue) == 0 and sys.getsizeof(queue._waiting) == sys.getsizeof({})


def test_the_cap_lets_in_what_fits_and_no_more():
    assert within_cap(["a", "b", "c"], known_count=8, cap=10) == (["a", "b"], ["c"])
    assert within_cap(["a"], known_count=12, cap=10) == ([], ["a"])
    assert within_cap(["a", "b"], known_count=10**6, cap=0) == (["a", "b"], [])  # 0: no cap


def _metric(name: str) -> float:
    return REGISTRY.get_sample_value(name, {"cluster": CLUSTER}) or 0.0


async def test_a_flood_of_new_groups_does_not_hold_up_a_known_groups_rewind(kafka, redis_server):
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic("lagwatch.changes", 4)
    config = make_config(kafka.bootstrap, redis_server.url, STORAGE__INTERVALS="3")
    queued_before = _metric("lagwatch_evaluator_new_groups_total")
    async with ingest_and_evaluator(kafka, config) as (writer, topic):
        store = WindowStore(Redis.from_url(redis_server.url), config.window())
        known = Scenario(kafka, writer, store, "known")
        await known.produce(20)
        await known.commit(10, 15)
        assert await topic.until("g-known", 1) == [("NOTFOUND", "OK")]
        flood = Scenario(kafka, writer, store, "flood")
        await flood.produce(1)
        now = int(time.time() * 1000)
        await writer.commits([OffsetCommitSpec(f"flood-{i}", flood.topic, 0, 0, timestamp=now) for i in range(FLOOD)])
        await writer.commits([OffsetCommitSpec("g-known", known.topic, 0, 5, timestamp=now + 1)])  # back: REWIND
        assert await topic.until("g-known", 2, timeout=60) == [("NOTFOUND", "OK"), ("OK", "ERR")]
        rewind_at = next(e["evaluated_at"] for e in topic.events if e["group"] == "g-known" and e["status"] == "ERR")

        async def flood_evaluated():
            await topic.read()
            return sum(e["group"].startswith("flood-") for e in topic.events) == FLOOD

        await eventually(flood_evaluated, timeout=120)
    flood_at = sorted(e["evaluated_at"] for e in topic.events if e["group"].startswith("flood-"))
    before = sum(at < rewind_at for at in flood_at)
    assert before < FLOOD // 2, f"{before} of {FLOOD} new groups were evaluated before the REWIND"
    assert _metric("lagwatch_evaluator_new_groups_total") - queued_before >= FLOOD // 2
    assert _metric("lagwatch_evaluator_new_groups_waiting") == 0


async def test_new_groups_past_the_cap_are_counted_and_skipped_and_known_ones_kept(kafka, redis_server):
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic("lagwatch.changes", 4)
    config = make_config(kafka.bootstrap, redis_server.url, EVALUATOR__MAX_GROUPS="3")
    skipped_before = _metric("lagwatch_evaluator_groups_over_cap_total")
    async with ingest_and_evaluator(kafka, config) as (writer, topic):
        store = WindowStore(Redis.from_url(redis_server.url), config.window())
        first = [Scenario(kafka, writer, store, f"first-{i}") for i in range(3)]
        for s in first:
            await s.produce(10)
        await asyncio.gather(*(s.commit(10) for s in first))
        for s in first:
            assert await topic.until(s.group, 1) == [("NOTFOUND", "OK")]
        late = [Scenario(kafka, writer, store, f"late-{i}") for i in range(2)]
        for s in late:
            await s.produce(10)
        await asyncio.gather(*(s.commit(10) for s in late))
        await eventually(lambda: _over(skipped_before, 2), timeout=20)
        for s in late:  # their windows deleted: a flood of junk names does not stay in Redis
            assert await eventually(lambda s=s: _gone(store, s.group))
        await first[0].commit(5)  # a known group is still evaluated: REWIND
        assert await topic.until(first[0].group, 2) == [("NOTFOUND", "OK"), ("OK", "ERR")]
        await topic.read()
    assert not [e for e in topic.events if e["group"].startswith("g-late")]


async def _over(before: float, n: int) -> bool:
    return _metric("lagwatch_evaluator_groups_over_cap_total") - before >= n


async def _gone(store: WindowStore, group: str) -> bool:
    return await store.reads.get_group(CLUSTER, group) is None
