"""The pieces every evaluation run feeds (services/evaluator/runs.py): the log-end index of what each group reads,
and the alarm that cuts the schedule loop's sleep short when an evaluation schedules something sooner."""

import asyncio
import time

from lagwatch.services.evaluator.next_change import PartitionWatch, packed_watches
from lagwatch.services.evaluator.runs import Alarm, WatchIndex

SEEN = PartitionWatch(newest=100, lag=0, recently_caught_up=True, lower_bound_lag=False)
BEHIND = PartitionWatch(newest=2**40, lag=5_000, recently_caught_up=False, lower_bound_lag=True)  # past 32 bits


def test_the_index_finds_the_groups_reading_a_topic_and_forgets_what_an_evaluation_no_longer_saw():
    index = WatchIndex()
    billing = packed_watches({("orders", 0): SEEN, ("refunds", 1): SEEN})
    index.remember({"billing": billing, "audit": packed_watches({("orders", 1): BEHIND})})
    assert sorted(index.watched(["orders"])) == [("audit", ("orders", 1), BEHIND), ("billing", ("orders", 0), SEEN)]
    assert index.partitions(["orders", "payments"]) == {("orders", 0), ("orders", 1)}
    index.remember({"billing": None})  # NOTFOUND: nothing left to watch
    assert list(index.watched(["refunds"])) == [] and "refunds" not in index.readers
    assert index.drop(lambda group: group == "audit") == ["audit"]
    assert index.readers == {} and index.topics == {}


async def test_the_alarm_wakes_a_sleep_only_for_an_instant_before_its_end():
    alarm = Alarm()
    sleeping = asyncio.create_task(alarm.sleep(5.0))
    await asyncio.sleep(0.05)
    alarm.ring_before([None, int((time.time() + 10) * 1000)])  # after the sleep ends: no need to wake
    await asyncio.sleep(0.05)
    assert not sleeping.done()
    alarm.ring_before([int((time.time() + 1) * 1000)])
    await asyncio.wait_for(sleeping, 1.0)
