"""A group whose data in Redis lagwatch did not write (a key edited by hand, another version's) cannot be
evaluated: it is counted, logged and skipped, and the groups evaluated with it still get their statuses."""

import asyncio
import time

from lagwatch.services.evaluator.runs import UNEVALUABLE, UNEVALUABLE_RETRY_MS
from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.config import Config
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, make_config, running
from tests.services.evaluator.test_evaluator import StatusTopic, commits

STATUS_TOPIC, CHANGES_TOPIC = "lagwatch.status", "lagwatch.changes"


async def groups_committed(kafka, redis_server, redis, groups: tuple[str, ...]) -> tuple[Config, int]:
    """The topics, and each group one second behind a log end of 100 on `orders`; the config and the time."""
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic(CHANGES_TOPIC, 4)
    config = make_config(kafka.bootstrap, redis_server.url)
    store = WindowStore(redis, config.window())
    now = int(time.time() * 1000)
    await store.writes.add_broker_offsets(CLUSTER, "orders", [100], sampled_at=now)
    for group in groups:
        await store.writes.add_commits(CLUSTER, commits(group, [100], now - 1000), now_ms=now)
    return config, now


async def test_a_group_that_cannot_be_read_holds_back_none_of_the_others(kafka, redis_server, redis, caplog):
    config, now = await groups_committed(kafka, redis_server, redis, ("alpha", "broken", "omega"))
    await redis.hset(keys.group_meta(CLUSTER, "broken"), "last", "not a number")
    skipped = UNEVALUABLE.labels(CLUSTER)._value.get()
    async with StatusTopic(kafka.bootstrap) as topic, running(EvaluatorService(config, CLUSTER, http_port=0)) as ev:
        report = await ev.evaluate_now(["alpha", "broken", "omega"])
        assert report is not None  # the service goes on
        assert await topic.until("alpha", 1) == [("NOTFOUND", "OK")]
        assert await topic.until("omega", 1) == [("NOTFOUND", "OK")]
        due = await ev.schedule.earliest(ev.owned_partitions() or {0})
    assert UNEVALUABLE.labels(CLUSTER)._value.get() > skipped
    assert "group 'broken' cannot be evaluated (ValueError" in caplog.text
    assert "broken" not in {e["group"] for e in topic.events}
    assert due is None or due >= now + UNEVALUABLE_RETRY_MS // 2  # not due again at every turn of the schedule


async def test_the_partition_count_asked_for_while_the_service_starts_is_an_answer_not_a_failure(
    kafka, redis_server, redis, caplog
):
    """While the service starts, its Kafka consumer exists a while before it has joined. The changes topic's
    partition count (which places a group's next evaluation in the schedule) read from it then raised, and an
    evaluation finishing in that moment took its readable group for unreadable: logged, counted, left for a minute.
    Asked for all through a start, the count is 1 (not known yet) or 4, and 4 once the consumer holds its partitions."""
    config, _ = await groups_committed(kafka, redis_server, redis, ("alpha",))
    skipped, counts, deadline = UNEVALUABLE.labels(CLUSTER)._value.get(), set(), time.monotonic() + 30
    async with running(EvaluatorService(config, CLUSTER, http_port=0)) as ev:
        while ev.owned_partitions() is None and time.monotonic() < deadline:  # all through the start
            counts.add(ev.changes_partitions())
            await asyncio.sleep(0)
        assert await ev.evaluate_now(["alpha"]) is not None
        assert ev.changes_partitions() == 4
    assert counts and counts <= {1, 4}
    assert UNEVALUABLE.labels(CLUSTER)._value.get() == skipped
    assert "cannot be evaluated" not in caplog.text
