"""An evaluator killed hard (SIGKILL: no graceful stop) with groups mid-state, and one started again. The
restarted one resumes from what Redis holds (each group's recorded status, its place in the schedule, its outbox)
instead of recomputing every group first, and the status topic carries each transition exactly once: none repeated
(the compare-and-set on the group's transition count), none missed (a STOP whose instant passed while no evaluator
ran, one after the restart, an event recorded but never published)."""

import asyncio
import time

import pytest

from lagwatch.services.evaluator.evaluation import GroupEvaluator
from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.protocol import keys
from lagwatch.shared.windows.changes import ChangePublisher
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, evaluator_process, eventually, make_config, running
from tests.services.evaluator.test_evaluator import StatusTopic
from tests.services.evaluator.test_evaluator_schedule import NO_SWEEP, stopping_group
from tests.services.evaluator.test_ownership import quiet_groups

pytestmark = pytest.mark.slow  # STOPs scheduled seconds ahead, a rejoin after a member died

STATUS_TOPIC, CHANGES_TOPIC = "lagwatch.status", "lagwatch.changes"
STEADY = [f"steady-{i}" for i in range(20)]


class RefusingPublisher:
    """Kafka refuses everything: a transition is recorded with its event left in the outbox, as when an evaluator
    dies between the two."""

    async def publish(self, items, topic=None):
        return set()


def now_ms() -> int:
    return int(time.time() * 1000)


async def announce(bootstrap: str, groups) -> None:
    """Change notices for these groups, as the ingest sends when it stores their commits."""
    notices = ChangePublisher({"bootstrap.servers": bootstrap}, CHANGES_TOPIC)
    await notices.start()
    try:
        await notices.publish(CLUSTER, [(group, "commits") for group in groups])
    finally:
        await notices.stop()


async def test_an_evaluator_killed_and_started_again_publishes_each_transition_once(
    kafka, redis_server, redis, tmp_path
):
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic(CHANGES_TOPIC, 4)
    config = make_config(kafka.bootstrap, redis_server.url, **NO_SWEEP)
    store = WindowStore(redis, config.window())
    await quiet_groups(store, STEADY, now_ms())
    killed_log = tmp_path / "killed-evaluator.log"
    with killed_log.open("w") as out:
        killed = evaluator_process(kafka.bootstrap, redis_server.url, out, EVALUATOR__SWEEP_INTERVAL="3600")
    try:
        async with StatusTopic(kafka.bootstrap) as topic:
            for group in STEADY:
                await topic.until(group, 1, timeout=60)
            now = now_ms()  # STOPs: while the first one runs, while none does, after the restart
            instants = {"stopped-before": now + 3000, "stops-while-down": now + 12_000, "stops-later": now + 25_000}
            for i, (group, at) in enumerate(instants.items()):
                await stopping_group(store, group, stop_at_ms=at, now_ms=now, order=3 * i + 1)
            await announce(kafka.bootstrap, instants)
            assert await topic.until("stopped-before", 2, timeout=30) == [("NOTFOUND", "OK"), ("OK", "ERR")]
            for group in instants:
                await topic.until(group, 1, timeout=30)
            await eventually(lambda: _outboxes_empty(redis, [*STEADY, *instants]), timeout=30)
            killed.kill()  # mid-state: one incident open, two STOPs scheduled, nothing left to publish
            killed.wait(timeout=30)

            await quiet_groups(store, ["unsent"], now_ms())
            statuses = StatusStore(redis, config.window().expire_group_ms)
            unsent = GroupEvaluator(CLUSTER, store, statuses, RefusingPublisher(), config.rules())
            assert (await unsent.evaluate(["unsent"])).transitions == 1

            async with running(EvaluatorService(config, CLUSTER, http_port=0)) as restarted:
                for group in instants:
                    await topic.until(group, 2, timeout=60)
                await topic.until("unsent", 1, timeout=60)
                await eventually(lambda: _caught_up(restarted), timeout=60)
                await asyncio.sleep(1.0)  # anything repeated would be on its way by now
                await topic.read()
    except AssertionError as failed:
        raise AssertionError(f"{failed}\nkilled evaluator's log:\n{killed_log.read_text()[-20_000:]}") from failed
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.wait(timeout=30)
    for group in STEADY:
        assert topic.transitions(group) == [("NOTFOUND", "OK")], group
    for group in instants:
        assert topic.transitions(group) == [("NOTFOUND", "OK"), ("OK", "ERR")], topic.describe(group)
        assert [e["seq"] for e in topic.events if e["group"] == group] == [1, 2]
    assert topic.transitions("unsent") == [("NOTFOUND", "OK")]


async def _outboxes_empty(redis, groups) -> bool:
    lengths = [await redis.llen(keys.group_pending_events(CLUSTER, group)) for group in groups]
    return not any(lengths)


async def _caught_up(evaluator: EvaluatorService) -> bool:
    owned = evaluator.owned_partitions()
    return bool(owned) and evaluator.taken_over == owned and not evaluator.runs.backlog
