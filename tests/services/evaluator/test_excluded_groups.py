"""A group the allow/deny regexes exclude once they changed is gone, with everything lagwatch kept for it: windows,
status index, ready result, schedule. Its stored windows would otherwise drift to STOP over the next `expire-group`
(7 days) and alert. Burrow forgets everything at a restart; lagwatch keeps state, so it deletes what the new lists
exclude: the ingest at its start, the evaluator whenever it evaluates such a group (at its start, then every sweep),
whichever of them has the new lists. Kafka mock -> ingest -> Redis -> evaluator -> status topic."""

import asyncio

from lagwatch.devkit.offsets_topic_writer import OffsetsTopicWriter
from lagwatch.services.evaluator.schedule_store import ScheduleStore
from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.statuses.results_store import ResultsStore
from lagwatch.shared.windows.changes import partition_of
from lagwatch.shared.windows.ingest_totals import read_totals
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, produce, running
from tests.services.evaluator.test_evaluator import STATUS_TOPIC, StatusTopic

CHANGES_PARTITIONS = 4
EXCLUDED, KEPT = "console-consumer-7", "billing"


async def what_lagwatch_keeps(redis, group):
    """Everything about the group that could make the evaluator alert on it, or the api show it."""
    store = WindowStore(redis)
    schedule = await ScheduleStore(redis, CLUSTER).instants(partition_of(CLUSTER, group, CHANGES_PARTITIONS))
    return {
        "windows": await store.reads.get_group(CLUSTER, group) is not None,
        "listed": group in await store.reads.list_groups(CLUSTER),
        "status": group in await StatusStore(redis, 1).known_groups(CLUSTER),
        "result": group in await ResultsStore(redis).groups(CLUSTER),
        "scheduled": group in schedule,
    }


async def _keeps_all(redis, group):
    return all((await what_lagwatch_keeps(redis, group)).values())


async def test_groups_a_changed_denylist_excludes_are_purged_when_the_evaluator_starts_and_no_alert_follows(
    kafka, redis_server, redis
):
    kafka.create_topic("orders", 1)
    kafka.create_topic("lagwatch.changes", CHANGES_PARTITIONS)
    kafka.create_topic(STATUS_TOPIC, 3)
    await produce(kafka.bootstrap, "orders", {0: 10})
    before = make_config(kafka.bootstrap, redis_server.url)
    after = make_config(kafka.bootstrap, redis_server.url, STORAGE__GROUP_DENYLIST="^console-consumer-")
    async with OffsetsTopicWriter(kafka.bootstrap) as writer, StatusTopic(kafka.bootstrap) as events:
        async with running(IngestWorker(before, CLUSTER)), running(EvaluatorService(before, CLUSTER, http_port=0)):
            for group in (EXCLUDED, KEPT):
                await writer.commit(group, "orders", 0, 10)
                assert await events.until(group, 1) == [("NOTFOUND", "OK")]
            await eventually(lambda: _keeps_all(redis, EXCLUDED))
            await eventually(lambda: _keeps_all(redis, KEPT))

        # the operator denies console consumers and restarts lagwatch
        async with running(IngestWorker(after, CLUSTER)), running(EvaluatorService(after, CLUSTER, http_port=0)):
            assert await events.until(EXCLUDED, 2) == [("NOTFOUND", "OK"), ("OK", "NOTFOUND")]
            kept = await what_lagwatch_keeps(redis, EXCLUDED)
            assert kept == dict.fromkeys(kept, False), kept
            await writer.commit(EXCLUDED, "orders", 0, 10)  # its commits go on; they are filtered on the way in
            await writer.commit(KEPT, "orders", 0, 10)
            await eventually(lambda: _filtered(redis, 1))
            await asyncio.sleep(1.5)  # sweeps and schedule rounds come and go: nothing brings it back
            await events.read()
            assert events.transitions(EXCLUDED) == [("NOTFOUND", "OK"), ("OK", "NOTFOUND")]
            assert not any((await what_lagwatch_keeps(redis, EXCLUDED)).values())
            assert events.transitions(KEPT) == [("NOTFOUND", "OK")]
            assert await _keeps_all(redis, KEPT)


async def _filtered(redis, n):
    return (await read_totals(redis, CLUSTER)).get("filtered", 0) >= n


async def test_an_ingest_restarted_with_new_lists_purges_what_they_exclude_and_the_old_evaluator_follows(
    kafka, redis_server, redis
):
    """Only the ingest got the new denylist (Burrow users know the lists as the consumer module's): it deletes the
    excluded group's windows at its start and says so on the changes topic; the evaluator, still on the old lists,
    records NOTFOUND at once, and nothing of the group is left to alert on."""
    kafka.create_topic("orders", 1)
    kafka.create_topic("lagwatch.changes", CHANGES_PARTITIONS)
    kafka.create_topic(STATUS_TOPIC, 3)
    await produce(kafka.bootstrap, "orders", {0: 10})
    before = make_config(kafka.bootstrap, redis_server.url)  # the evaluator keeps its five-minute sweep
    after = make_config(kafka.bootstrap, redis_server.url, STORAGE__GROUP_DENYLIST="^console-consumer-")
    async with (
        OffsetsTopicWriter(kafka.bootstrap) as writer,
        StatusTopic(kafka.bootstrap) as events,
        running(EvaluatorService(before, CLUSTER, http_port=0)),
    ):
        async with running(IngestWorker(before, CLUSTER)):
            for group in (EXCLUDED, KEPT):
                await writer.commit(group, "orders", 0, 10)
                assert await events.until(group, 1) == [("NOTFOUND", "OK")]
            await eventually(lambda: _keeps_all(redis, EXCLUDED))
        async with running(IngestWorker(after, CLUSTER)):
            assert await events.until(EXCLUDED, 2, timeout=10) == [("NOTFOUND", "OK"), ("OK", "NOTFOUND")]
            kept = await what_lagwatch_keeps(redis, EXCLUDED)
            assert kept == dict.fromkeys(kept, False), kept
            assert await _keeps_all(redis, KEPT)
            assert events.transitions(KEPT) == [("NOTFOUND", "OK")]
