"""A new group's first commits are not judged (docs/rules.md §3, young windows): through the ingest and the
evaluator, a new group whose first commits carry a jittering lag opens no incident, and one that stops after its
third commit still reads ERR when its window's span has passed."""

import asyncio

from redis.asyncio import Redis

from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, make_config
from tests.services.evaluator.test_evaluator import STATUS_TOPIC
from tests.system.test_status_end_to_end import Scenario, ingest_and_evaluator

JITTER = [12, 15, 13, 14, 12, 15, 13, 14]  # a consumer a dozen records behind, its lag wobbling
STOP_DEADLINE_MS = 2500  # the STOP is published this soon after its instant (the schedule, the judging clock)


async def commit_behind(s: Scenario, lag: int) -> None:
    """The log end moves on, then the group commits `lag` records behind it, stamped now."""
    await s.produce(20)
    await s.commit(s.log_end - lag)


async def test_a_new_group_with_jittering_lag_opens_no_incident_and_one_that_stops_reads_err(kafka, redis_server):
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic("lagwatch.changes", 4)
    config = make_config(kafka.bootstrap, redis_server.url)  # the default ring of 10 and rules
    async with ingest_and_evaluator(kafka, config) as (writer, topic):
        store = WindowStore(Redis.from_url(redis_server.url), config.window())
        newcomer, quitter = Scenario(kafka, writer, store, "newcomer"), Scenario(kafka, writer, store, "quitter")

        async def jitter():
            for lag in JITTER:
                await commit_behind(newcomer, lag)

        async def three_then_stop():
            for lag in (12, 15, 13):
                await commit_behind(quitter, lag)
            for _ in range(8):  # its producer goes on: the log end leaves the stopped consumer behind
                await quitter.produce(5)

        await asyncio.gather(jitter(), three_then_stop())
        window = (await store.reads.get_group(CLUSTER, "g-quitter")).partitions[0].entries
        assert await topic.until("g-quitter", 2, timeout=30) == [("NOTFOUND", "OK"), ("OK", "ERR")]
        await asyncio.sleep(2)  # a few more evaluations of the newcomer
        await topic.read()
    assert topic.transitions("g-newcomer") == [("NOTFOUND", "OK")]
    stopped = next(e for e in topic.events if e["group"] == "g-quitter" and e["status"] == "ERR")
    assert [p["status"] for p in stopped["partitions"]] == ["STOP"]
    assert len(window) == 3
    stop_instant = 2 * window[-1].timestamp - window[0].timestamp + 1  # now - last > last - first
    assert stop_instant <= stopped["evaluated_at"] <= stop_instant + STOP_DEADLINE_MS


async def test_a_consumer_that_stops_as_its_topic_goes_quiet_reads_stop_once_the_old_log_ends_are_gone(
    kafka, redis_server
):
    """The STOP rule's exception (a kept log end at or below the newest commit: a quiet topic) holds while the
    samples taken before the last produce are in the ring. Polls that find the log end unmoved push them out without
    any notice: the evaluator schedules that instant itself (next_change.exception_lapse_at), not the next sweep."""
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic("lagwatch.changes", 4)
    config = make_config(kafka.bootstrap, redis_server.url)  # offset-refresh 0.3 s, a ring of 10 samples
    assert config.evaluator.sweep_interval >= 300  # no sweep within the test
    async with ingest_and_evaluator(kafka, config) as (writer, topic):
        store = WindowStore(Redis.from_url(redis_server.url), config.window())
        quitter = Scenario(kafka, writer, store, "quiet-quitter")
        for lag in (12, 15, 13):  # then both the consumer and its producer stop
            await commit_behind(quitter, lag)
        assert await topic.until("g-quiet-quitter", 2, timeout=20) == [("NOTFOUND", "OK"), ("OK", "ERR")]
    stopped = next(e for e in topic.events if e["group"] == "g-quiet-quitter" and e["status"] == "ERR")
    assert [p["status"] for p in stopped["partitions"]] == ["STOP"]
