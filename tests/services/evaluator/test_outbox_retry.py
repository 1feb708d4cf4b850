"""An event Kafka did not take stays in the outbox; the schedule evaluates its group again soon, so it goes out
without waiting for the sweep, even when the group is gone (NOTFOUND: the sweep never lists it again)."""

import time

from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, running
from tests.services.evaluator.test_evaluator import StatusTopic, commits

STATUS_TOPIC, CHANGES_TOPIC = "lagwatch.status", "lagwatch.changes"


class RefusingPublisher:
    """Kafka refusing every event (an authorization error, a topic being re-created): nothing is acknowledged."""

    async def publish(self, items, topic=None):
        return set()


async def test_a_closing_event_kafka_refused_is_published_once_it_takes_events_again(kafka, redis_server, redis):
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic(CHANGES_TOPIC, 4)
    config = make_config(kafka.bootstrap, redis_server.url, EVALUATOR__SWEEP_INTERVAL="0.5")
    store = WindowStore(redis, config.window())
    statuses = StatusStore(redis, config.window().expire_group_ms)
    now = int(time.time() * 1000)
    await store.writes.add_broker_offsets(CLUSTER, "orders", [100], sampled_at=now)
    await store.writes.add_commits(CLUSTER, commits("billing", [100], now - 1000), now_ms=now)
    async with StatusTopic(kafka.bootstrap) as topic, running(EvaluatorService(config, CLUSTER, http_port=0)) as ev:
        assert await topic.until("billing", 1) == [("NOTFOUND", "OK")]
        publisher, ev.evaluator.publisher = ev.evaluator.publisher, RefusingPublisher()
        await store.deletions.delete_group(CLUSTER, "billing")  # deleted (DELETE /v3/...): the group is NOTFOUND
        await ev.evaluate_now(["billing"])
        sweeps = ev.sweeps_done
        await eventually(lambda: swept_since(ev, sweeps + 2))  # sweeps that listed it before it was gone are done
        state = (await statuses.states(CLUSTER, ["billing"]))[0]
        assert state.status.name == "NOTFOUND" and len(state.pending) == 1
        ev.evaluator.publisher = publisher  # Kafka takes events again
        assert await topic.until("billing", 2) == [("NOTFOUND", "OK"), ("OK", "NOTFOUND")]
    assert (await statuses.states(CLUSTER, ["billing"]))[0].pending == []


async def swept_since(ev, n):
    return ev.sweeps_done >= n
