"""The evaluator's schedule and log-end notices (issue 13): a STOP is found when it happens, not at the next sweep;
the schedule lives in Redis, survives a restart and follows the changes-topic partitions; a log-end poll re-judges
the groups it can change. Every service here runs with the sweep practically off (an hour)."""

import asyncio
import contextlib
import signal
import time

import pytest

from lagwatch.services.evaluator.runs import SWEEP_CHUNK
from lagwatch.services.evaluator.schedule_store import ScheduleStore
from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.services.ingest.broker_offsets import BrokerOffsets
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Commit
from lagwatch.shared.windows.changes import PROBE_REASON, ChangePublisher, partition_of
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, evaluator_process, eventually, make_config, produce, running
from tests.services.evaluator.test_evaluator import StatusTopic

pytestmark = pytest.mark.slow  # its STOPs are scheduled tens of seconds ahead

STATUS_TOPIC, CHANGES_TOPIC = "lagwatch.status", "lagwatch.changes"
NO_SWEEP = {"EVALUATOR__SWEEP_INTERVAL": "3600"}
DEADLINE_MS = 1000 + 500  # the goal (1 s after the instant) and a margin for a loaded test machine


async def stopping_group(store, group, *, stop_at_ms, now_ms, order=1):
    """A group behind on a quiet topic whose STOP rule turns true at `stop_at_ms`: three commits (a window old
    enough to judge) whose span ends a second ago, every log-end sample past its newest commit, its lag shrinking
    (OK until then)."""
    last = now_ms - 1000
    span = stop_at_ms - 1 - last
    await store.writes.add_broker_offsets(CLUSTER, "orders", [1000], sampled_at=now_ms - 500)
    await store.writes.add_commits(
        CLUSTER,
        [
            Commit(group, "orders", 0, 100, last - span, order, last - span),
            Commit(group, "orders", 0, 150, last - span // 2, order + 1, last - span // 2),
            Commit(group, "orders", 0, 200, last, order + 2, last),
        ],
        now_ms=now_ms,
        broker_offsets={("orders", 0): 1000},
    )


def err_event(topic, group):
    return next(e for e in topic.events if e["group"] == group and e["status"] == "ERR")


async def test_a_stop_is_found_within_a_second_of_its_instant_with_the_sweep_off(kafka, redis_server, redis):
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic(CHANGES_TOPIC, 4)
    config = make_config(kafka.bootstrap, redis_server.url, **NO_SWEEP)
    store = WindowStore(redis, config.window())
    now = int(time.time() * 1000)
    stop_at = now + 8000  # after the evaluator has started and judged the group OK
    await stopping_group(store, "billing", stop_at_ms=stop_at, now_ms=now)
    async with StatusTopic(kafka.bootstrap) as topic, running(EvaluatorService(config, CLUSTER, http_port=0)) as ev:
        assert await topic.until("billing", 2, timeout=30) == [("NOTFOUND", "OK"), ("OK", "ERR")]
        assert ev.sweeps_done == 0
    stopped = err_event(topic, "billing")
    assert stopped["partitions"][0]["status"] == "STOP"
    assert stop_at <= stopped["evaluated_at"] <= stop_at + DEADLINE_MS


async def test_the_schedule_survives_a_restart_and_moves_with_the_changes_partitions(
    kafka, redis_server, redis, tmp_path
):
    """A evaluates the groups and schedules their STOPs; A restarts: the schedule is still in Redis. Then B (a
    `lagwatch run evaluator` process) shares the partitions; A leaves before the instants, and B finds the STOPs
    of A's groups on time."""
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic(CHANGES_TOPIC, 4)
    config = make_config(kafka.bootstrap, redis_server.url, **NO_SWEEP)
    store, schedule = WindowStore(redis, config.window()), ScheduleStore(redis, CLUSTER)
    now = int(time.time() * 1000)
    groups = [f"group-{i}" for i in range(12)]
    # far enough ahead that A has left before them (~3.5 s after `now` on this machine, idle; 13 s allowed)
    instants = {g: now + 18_000 + 100 * i for i, g in enumerate(groups)}
    for i, g in enumerate(groups):
        await stopping_group(store, g, stop_at_ms=instants[g], now_ms=now, order=3 * i + 1)

    async def scheduled():
        found = {}
        for partition in range(4):
            found |= await schedule.instants(partition)
        return found

    async with running(EvaluatorService(config, CLUSTER, http_port=0)):
        await eventually(lambda: _has_all(scheduled, groups), timeout=30)
    assert await scheduled() == instants  # survives the stop, at the instants the rules give
    for g in groups:  # each in its changes partition's set
        assert g in await schedule.instants(partition_of(CLUSTER, g, 4))

    other_log = tmp_path / "other-evaluator.log"
    with other_log.open("w") as out:
        other = evaluator_process(kafka.bootstrap, redis_server.url, out, EVALUATOR__SWEEP_INTERVAL="3600")
    try:
        async with StatusTopic(kafka.bootstrap) as topic:
            async with running(EvaluatorService(config, CLUSTER, http_port=0)) as a:

                async def shared():
                    owned = a.owned_partitions()
                    return owned is not None and 0 < len(owned) < 4 and a.taken_over == owned

                await eventually(shared, timeout=30)
                a_groups = [g for g in groups if partition_of(CLUSTER, g, 4) in a.owned_partitions()]
            assert a_groups and time.time() * 1000 < min(instants.values()) - 5000  # A left well before the STOPs
            for g in groups:
                await topic.until(g, 1, timeout=60)
                await eventually(lambda g=g: _stopped(topic, g), timeout=60)
    except AssertionError as failed:  # what the other instance did is the first thing to read
        raise AssertionError(f"{failed}\nother evaluator's log:\n{other_log.read_text()[-20_000:]}") from failed
    finally:
        other.send_signal(signal.SIGTERM)
        other.wait(timeout=30)
    assert other.returncode == 0, other_log.read_text()[-20_000:]
    for g in groups:
        assert instants[g] <= err_event(topic, g)["evaluated_at"] <= instants[g] + DEADLINE_MS, g


async def _has_all(scheduled, groups):
    return set(groups) <= set(await scheduled())


async def _stopped(topic, group):
    await topic.read()
    return any(e["group"] == group and e["status"] == "ERR" for e in topic.events)


async def test_a_log_end_poll_makes_a_caught_up_group_fall_behind_and_a_commit_brings_it_back(
    kafka, redis_server, redis
):
    """Windows of 2 slots: a group that caught up on `orders` long ago is OK (its commit was the log end). The
    topic moves: the first poll's notice re-judges it, still OK (the old sample still says it was caught up); the
    second pushes that sample out: STOP, ERR. A new commit at the log end brings it back to OK."""
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic(CHANGES_TOPIC, 4)
    kafka.create_topic("orders", 1)
    config = make_config(kafka.bootstrap, redis_server.url, STORAGE__INTERVALS="2", **NO_SWEEP)
    store = WindowStore(redis, config.window())
    kafka_kwargs = {"bootstrap_servers": kafka.bootstrap}
    notices = ChangePublisher({"bootstrap.servers": kafka.bootstrap}, CHANGES_TOPIC)
    poller = BrokerOffsets(CLUSTER, store, kafka_kwargs, offset_refresh=0.3, topic_refresh=60)
    poller.changes = notices
    await notices.start()
    await poller.start()
    now = int(time.time() * 1000)
    try:
        await produce(kafka.bootstrap, "orders", {0: 10})
        await poller.tick()  # log end 10
        await store.writes.add_commits(
            CLUSTER,
            [
                Commit("billing", "orders", 0, 10, now - 600_000, 1, now - 600_000),
                Commit("billing", "orders", 0, 10, now - 300_000, 2, now - 300_000),
            ],
            now_ms=now,
        )
        async with StatusTopic(kafka.bootstrap) as topic, running(EvaluatorService(config, CLUSTER, http_port=0)) as ev:
            assert await topic.until("billing", 1, timeout=30) == [("NOTFOUND", "OK")]
            await eventually(lambda: _taken_over(ev), timeout=30)
            for _ in range(2):
                await produce(kafka.bootstrap, "orders", {0: 5})
                await poller.tick()
                await asyncio.sleep(0.5)
            assert await topic.until("billing", 2, timeout=20) == [("NOTFOUND", "OK"), ("OK", "ERR")]
            assert err_event(topic, "billing")["partitions"][0]["status"] == "STOP"
            stats = await redis.hgetall(keys.evaluator_stats(CLUSTER))
            # judged again by the notices, or, once the first showed the old sample's lapse coming, by the schedule
            # (next_change.exception_lapse_at); never by a sweep
            judged = int(stats[b"evaluations:log-end"]) + int(stats.get(b"evaluations:schedule", 0))
            assert int(stats[b"evaluations:log-end"]) >= 1 and judged >= 2 and b"evaluations:sweep" not in stats
            await store.writes.add_commits(CLUSTER, [Commit("billing", "orders", 0, 20, now, 3, now)], now_ms=now)
            await notices.publish(CLUSTER, [("billing", "commits")])
            assert (await topic.until("billing", 3, timeout=20))[-1] == ("ERR", "OK")
    finally:
        await poller.stop()
        await notices.stop()


async def _taken_over(ev):
    owned = ev.owned_partitions()
    return owned is not None and ev.taken_over == owned


async def test_a_notice_naming_more_groups_than_an_evaluation_chunk_has_each_of_them_evaluated(
    kafka, redis_server, redis
):
    """The ingest names a batch's groups of one partition in one notice: hundreds at once. Groups stored after the
    evaluator took its partitions over are evaluated because the notice named them, every one."""
    kafka.create_topic(STATUS_TOPIC, 3)
    groups = [f"team-{i:04d}" for i in range(SWEEP_CHUNK + 100)]
    async with _evaluator_with_notices(kafka, redis_server, redis, groups) as (topic, notices):
        await notices.publish(CLUSTER, [(g, "commits") for g in groups])
        await eventually(lambda: _published(topic, groups), timeout=30)
        stats = await redis.hgetall(keys.evaluator_stats(CLUSTER))
        # new groups: first evaluated from the newcomers' queue (newcomers.py), after any known group
        assert int(stats.get(b"evaluations:notice", 0)) + int(stats[b"evaluations:new"]) >= len(groups)


@contextlib.asynccontextmanager
async def _evaluator_with_notices(kafka, redis_server, redis, groups):
    """An evaluator that holds the changes topic's one partition, these groups' commits stored (not announced), and a
    notice publisher that knows the partition."""
    kafka.create_topic(CHANGES_TOPIC, 1)
    config = make_config(kafka.bootstrap, redis_server.url, **NO_SWEEP)
    store = WindowStore(redis, config.window())
    notices = ChangePublisher({"bootstrap.servers": kafka.bootstrap}, CHANGES_TOPIC)
    await notices.start()
    try:
        async with StatusTopic(kafka.bootstrap) as topic, running(EvaluatorService(config, CLUSTER, http_port=0)) as ev:
            await eventually(lambda: _taken_over(ev), timeout=30)
            await eventually(lambda: _knows_partitions(notices), timeout=20)
            now = int(time.time() * 1000)
            await store.writes.add_broker_offsets(CLUSTER, "orders", [100], sampled_at=now)
            commits = [Commit(g, "orders", 0, 100, now - 1000, 1, now - 1000) for g in groups]
            await store.writes.add_commits(CLUSTER, commits, now_ms=now)
            yield topic, notices
    finally:
        await notices.stop()


async def _knows_partitions(notices):
    return notices.partitions == 1


async def test_a_probes_answer_evaluates_its_known_groups_again_behind_the_new_ones(kafka, redis_server, redis):
    known, new = ["known-1", "known-2"], ["new-1"]
    async with _evaluator_with_notices(kafka, redis_server, redis, known + new) as (topic, notices):
        await notices.publish(CLUSTER, [(g, "commits") for g in known])
        await eventually(lambda: _published(topic, known), timeout=30)
        await notices.publish(CLUSTER, [(g, PROBE_REASON) for g in known + new])
        await eventually(lambda: _published(topic, new), timeout=30)
        stats = await eventually(lambda: _evaluated_for_probe(redis, len(known)), timeout=30)
        assert int(stats[b"evaluations:new"]) == len(known) + len(new)  # the new one queued as new, once


async def _published(topic, groups):
    await topic.read()
    return {e["group"] for e in topic.events} >= set(groups)


async def _evaluated_for_probe(redis, n):
    stats = await redis.hgetall(keys.evaluator_stats(CLUSTER))
    return stats if int(stats.get(b"evaluations:probe", 0)) >= n else None
