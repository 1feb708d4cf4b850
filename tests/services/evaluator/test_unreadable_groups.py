"""A group whose data in Redis lagwatch did not write (a key edited by hand, another version's) cannot be
evaluated: it is counted, logged and skipped, and the groups evaluated with it still get their statuses."""

import time

from lagwatch.services.evaluator.service import UNEVALUABLE, UNEVALUABLE_RETRY_MS, EvaluatorService
from lagwatch.shared.store import keys
from lagwatch.shared.store.redis_store import WindowStore
from tests.kafka_helpers import CLUSTER, make_config, running
from tests.services.evaluator.test_evaluator import StatusTopic, commits

STATUS_TOPIC, CHANGES_TOPIC = "lagwatch.status", "lagwatch.changes"


async def test_a_group_that_cannot_be_read_holds_back_none_of_the_others(kafka, redis_server, redis, caplog):
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic(CHANGES_TOPIC, 4)
    config = make_config(kafka.bootstrap, redis_server.url)
    store = WindowStore(redis, config.window())
    now = int(time.time() * 1000)
    await store.add_broker_offsets(CLUSTER, "orders", [100], sampled_at=now)
    for group in ("alpha", "broken", "omega"):
        await store.add_commits(CLUSTER, commits(group, [100], now - 1000), now_ms=now)
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
