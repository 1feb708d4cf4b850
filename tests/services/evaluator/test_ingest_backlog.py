"""New groups wait while an ingest worker says its commits are behind, then until the notices published meanwhile are
handled, at most `evaluator.new-groups-wait` (services/evaluator/ingest_backlog.py)."""

import asyncio

from prometheus_client import REGISTRY

from lagwatch.services.evaluator.ingest_backlog import IngestBacklog
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from tests.kafka_helpers import CLUSTER


class ChangesRead:
    """How far notices are handled, as the changes agent would say (the changes topic itself: test_evaluator)."""

    def __init__(self, end: int) -> None:
        self.end, self.handled, self.asked = end, 0, 0

    async def ends(self):
        self.asked += 1
        return {0: self.end}

    async def handled_through(self, ends):
        return self.handled >= ends[0]


def _waiting() -> float:
    return REGISTRY.get_sample_value("lagwatch_evaluator_new_groups_waiting_for_ingest", {"cluster": CLUSTER}) or 0.0


async def test_new_groups_wait_while_an_ingest_worker_says_it_is_behind_and_no_longer(redis):
    backlog = IngestBacklog(redis, CLUSTER, wait_s=60)
    words = keys.ingest_behind(CLUSTER)
    assert not await backlog.holds()  # no worker said anything
    await redis.hset(words, mapping={"w-1": str(now_ms() + 30_000), "w-2": str(now_ms() - 1)})
    assert await backlog.holds()
    assert _waiting() == 1
    await redis.hdel(words, "w-1")  # read through; w-2's word lapsed (a worker that died while behind)
    assert not await backlog.holds()
    assert _waiting() == 0


async def test_then_they_wait_for_the_notices_the_read_published(redis):
    changes = ChangesRead(end=40)
    backlog = IngestBacklog(redis, CLUSTER, wait_s=60, notices=changes)
    assert not await backlog.holds()  # the ingest was never behind: no notice to wait for
    await redis.hset(keys.ingest_behind(CLUSTER), "w-1", str(now_ms() + 30_000))
    assert await backlog.holds()
    await redis.delete(keys.ingest_behind(CLUSTER))
    changes.handled = 39
    assert await backlog.holds()  # the last notice of the read is not handled yet
    changes.end = 50  # notices published after the read do not hold new groups
    changes.handled = 40
    assert not await backlog.holds()
    assert changes.asked == 1


async def test_new_groups_wait_for_the_ingest_no_longer_than_the_setting(redis):
    await redis.hset(keys.ingest_behind(CLUSTER), "w-1", str(now_ms() + 60_000))
    assert not await IngestBacklog(redis, CLUSTER, wait_s=0).holds()  # 0: they never wait
    backlog = IngestBacklog(redis, CLUSTER, wait_s=0.2)
    assert await backlog.holds()
    await asyncio.sleep(0.3)
    assert not await backlog.holds()  # the wait is used up for these groups
    backlog.done()  # none waits any more: the next new ones may wait again
    assert await backlog.holds()
