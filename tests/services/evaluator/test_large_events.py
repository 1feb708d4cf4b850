"""Events Kafka would refuse for their size (the default limit is 1 MiB): a group with thousands of partitions
not OK still has its status changes published, and no such event holds back the other groups' events."""

import time

from lagwatch.services.evaluator.evaluation import GroupEvaluator
from lagwatch.services.evaluator.publisher import EventPublisher
from lagwatch.shared.events.status_event import MAX_EVENT_BYTES, transition
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.protocol.types import Commit, Status
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, make_config
from tests.services.evaluator.test_evaluator import StatusTopic

STATUS_TOPIC = "lagwatch.status"
MINUTE = 60_000
PARTITIONS = 10_000


async def test_a_record_kafka_refuses_for_its_size_holds_back_no_other_group(kafka):
    kafka.create_topic(STATUS_TOPIC, 3)
    publisher = EventPublisher({"bootstrap_servers": kafka.bootstrap}, STATUS_TOPIC)
    await publisher.start()
    huge, small = b'{"x":"' + b"y" * 2_000_000 + b'"}', b'{"x":"small"}'
    try:
        acknowledged = await publisher.publish(
            [(CLUSTER, "big", huge), (CLUSTER, "big", b"{}"), (CLUSTER, "zeta", small)]
        )
    finally:
        await publisher.stop()
    assert acknowledged == {small}  # "big"'s second event waits behind its first: their order is kept


async def add_groups(store, now):
    """`big`: 10,000 partitions, all stopped, lag growing with the partition number; `zeta`: one, stopped too."""
    t0 = now - 10 * MINUTE
    await store.writes.add_broker_offsets(CLUSTER, "orders", [10_000 + p for p in range(PARTITIONS)], sampled_at=t0)
    for group, partitions in [("big", PARTITIONS), ("zeta", 1)]:
        batch = [
            Commit(group, "orders", p, 100 + i, t0 + i * MINUTE, i + 1, t0 + i * MINUTE)
            for i in range(3)
            for p in range(partitions)
        ]
        await store.writes.add_commits(CLUSTER, batch, now_ms=now)


async def stored_groups(kafka, redis_server, redis):
    """The status topic, and `add_groups` stored with windows of 3 commits: (config, store, statuses, now)."""
    kafka.create_topic(STATUS_TOPIC, 3)
    config = make_config(kafka.bootstrap, redis_server.url, STORAGE__INTERVALS="3")
    store = WindowStore(redis, config.window())
    now = int(time.time() * 1000)
    await add_groups(store, now)
    return config, store, StatusStore(redis, config.window().expire_group_ms), now


async def test_a_group_with_ten_thousand_bad_partitions_has_its_change_published_and_the_next_group_too(
    kafka, redis_server, redis
):
    config, store, statuses, now = await stored_groups(kafka, redis_server, redis)
    publisher = EventPublisher({"bootstrap_servers": kafka.bootstrap}, STATUS_TOPIC)
    await publisher.start()
    try:
        async with StatusTopic(kafka.bootstrap) as topic:
            report = await GroupEvaluator(CLUSTER, store, statuses, publisher, config.rules()).evaluate(
                ["big", "zeta"], now
            )
            assert (report.transitions, report.published) == (2, 2)
            assert await topic.until("big", 1) == [("NOTFOUND", "ERR")]
            assert await topic.until("zeta", 1) == [("NOTFOUND", "ERR")]
    finally:
        await publisher.stop()
    assert [s.pending for s in await statuses.states(CLUSTER, ["big", "zeta"])] == [[], []]
    big = next(e for e in topic.events if e["group"] == "big")
    listed = [p["partition"] for p in big["partitions"]]
    assert big["partition_count"] == PARTITIONS and 0 < len(listed) < PARTITIONS
    assert listed == list(range(PARTITIONS - len(listed), PARTITIONS))  # the largest lags
    assert big["maxlag"]["partition"] == PARTITIONS - 1 and big["totallag"] > 0


async def test_a_too_large_event_already_in_the_outbox_is_published_fitted(kafka, redis_server, redis):
    """An outbox written before events were fitted: its event is sent fitted, and taken out of the outbox."""
    config, store, statuses, now = await stored_groups(kafka, redis_server, redis)
    publisher = EventPublisher({"bootstrap_servers": kafka.bootstrap}, STATUS_TOPIC)
    evaluator = GroupEvaluator(CLUSTER, store, statuses, publisher, config.rules())
    stored, states = await evaluator.read(["big"], now)
    change = transition(
        CLUSTER, "big", Status.NOTFOUND, 0, states[0].incident, evaluator.status_of(stored[0], now), now
    )
    assert change is not None and len(huge := change.event.encode()) > MAX_EVENT_BYTES  # every partition not OK
    assert await statuses.transition(
        CLUSTER, "big", expected_seq=0, status=change.status, keeps=change.incident, event=huge, now_ms=now
    )
    await publisher.start()
    try:
        async with StatusTopic(kafka.bootstrap) as topic:
            assert (await evaluator.evaluate(["big"], now)).published == 1
            assert await topic.until("big", 1) == [("NOTFOUND", "ERR")]
    finally:
        await publisher.stop()
    assert (await statuses.states(CLUSTER, ["big"]))[0].pending == []
