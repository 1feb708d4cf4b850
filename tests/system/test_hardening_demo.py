"""Issue 18 row 6: the demo runs well past `max.poll.interval.ms` without stopping.

A stuck demo consumer used to stop polling; Kafka's liveness rule (a member that does not poll within
`max.poll.interval.ms` leaves its group) then dropped it, its next commit failed, and the supervisor stopped the
whole demo after about five minutes. Here the interval is 2 s and the demo workload (every scenario, as `make run`
plays them) runs four times that long past the stalled consumer's last turn. (Checked against the old workload with
aiokafka's default interval set to 2 s: its stalled consumer was dropped and the workload stopped on a
CommitFailedError.)
"""

import asyncio

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from lagwatch.devkit.demo_scenarios import scenarios
from lagwatch.devkit.demo_workload import demo_topics, run_workload
from tests.kafka_helpers import eventually

MAX_POLL_INTERVAL_MS = 2000
TICK_S = 0.3


async def committed(admin, group, topic):
    offsets = await admin.list_consumer_group_offsets(group, partitions=[TopicPartition(topic, 0)])
    found = offsets.get(TopicPartition(topic, 0))
    return None if found is None else found.offset


async def test_every_demo_consumer_keeps_its_group_past_max_poll_interval_and_the_stalled_one_its_offset(kafka):
    played = scenarios(intervals=1)  # every demo scenario; the stalled and idle ones are those that stop reading
    for topic, partitions in demo_topics(played).items():
        kafka.create_topic(topic, partitions)
    turns = []
    workload = asyncio.create_task(
        run_workload(
            kafka.bootstrap,
            played,
            tick_s=TICK_S,
            announce=lambda scenario, phase: turns.append((scenario.name, phase.note)),
            max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
        )
    )
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    await admin.start()
    try:
        stalled = next(s for s in played if s.name == "stalled")
        stuck_note = stalled.phases[-1].note
        await eventually(lambda: _true(("stalled", stuck_note) in turns), timeout=60)
        await asyncio.sleep(2 * TICK_S)  # its first stuck commits are in
        held = await committed(admin, stalled.group, stalled.topic)
        assert held is not None and held > 0
        await asyncio.sleep(4 * MAX_POLL_INTERVAL_MS / 1000)
        # every consumer still plays (a commit by a member its group dropped fails and stops the workload), and
        # the stalled one is still stuck on the same message
        assert not workload.done(), workload.exception()
        assert await committed(admin, stalled.group, stalled.topic) == held
    finally:
        workload.cancel()
        await asyncio.gather(workload, return_exceptions=True)
        await admin.close()


async def _true(value):
    return value
