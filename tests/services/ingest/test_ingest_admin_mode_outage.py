"""Admin mode while a broker is away: the groups it coordinates cannot be fetched (their windows stay as they were),
and the others are polled at their pace — not once per request timeout (10 s), as when every poll waited for
every group's answer."""

import contextlib
import time

from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, produce, running
from tests.services.ingest.conftest import AWAY
from tests.services.ingest.test_ingest import window_of
from tests.services.ingest.test_ingest_admin_mode import Member


async def test_a_group_whose_coordinator_is_away_does_not_hold_the_others(one_broker_apart, redis_server, redis):
    one_broker_apart.set_group_coordinator("g-near", 1)
    one_broker_apart.set_group_coordinator("g-far", AWAY)
    await produce(one_broker_apart.bootstrap, "orders", {0: 10})
    config = make_config(
        one_broker_apart.bootstrap,
        redis_server.url,
        **{f"CLUSTERS__{CLUSTER}__OFFSETS_SOURCE": "admin", f"CLUSTERS__{CLUSTER}__ADMIN_GROUPS": "g-near,g-far"},
    )
    store = WindowStore(redis, config.window())
    near, far = (Member(one_broker_apart.bootstrap, group, "orders") for group in ("g-near", "g-far"))
    async with running(IngestWorker(config, CLUSTER)):
        await near.start()
        await far.start()
        try:
            await near.commit(2)
            await far.commit(3)
            await eventually(lambda: _newest(store, "g-near", 2), timeout=10)
            await eventually(lambda: _newest(store, "g-far", 3), timeout=10)

            one_broker_apart.set_broker_down(AWAY)
            for offset in (4, 6, 8):  # each seen within a few polls, though g-far's fetch waits for its coordinator
                await near.commit(offset)
                await eventually(lambda o=offset: _newest(store, "g-near", o), timeout=3)
            assert await _newest(store, "g-far", 3)  # a fetch that did not answer concludes nothing
        finally:
            one_broker_apart.set_broker_up(AWAY)
            await near.stop()
            with contextlib.suppress(Exception):  # its coordinator was away: it may have lost its membership
                await far.stop()


async def _newest(store: WindowStore, group: str, offset: int) -> bool:
    window = await window_of(store, group, "orders", 0)
    return window is not None and bool(window.entries) and window.entries[-1].offset == offset


async def test_a_description_not_answered_does_not_hold_the_others():
    """DescribeGroups (the Kafka mock refuses it, so its answers are stood in for here): the group whose coordinator
    does not answer is looked at next poll, the other's membership is taken now."""
    from concurrent.futures import Future

    from confluent_kafka import Node
    from confluent_kafka import TopicPartition as Tp
    from confluent_kafka.admin import ConsumerGroupDescription, MemberAssignment, MemberDescription

    from lagwatch.services.ingest.admin_offsets import ANSWER_WAIT_S, AdminOffsets
    from lagwatch.shared.protocol.group_filter import GroupFilter

    member = MemberDescription("m-1", "near-a", "/10.0.0.1", MemberAssignment([Tp("orders", 0)]))
    answered: Future = Future()
    answered.set_result(ConsumerGroupDescription("g-near", False, [member], "range", "STABLE", Node(1, "h", 9092)))
    answers = {"g-near": answered, "g-far": Future()}  # g-far's coordinator never answers

    class Describing:
        def describe_consumer_groups(self, groups, request_timeout):
            return {g: answers[g] for g in groups}

    source = AdminOffsets({}, named_groups=(), group_filter=GroupFilter(), partition_counts=dict)
    source._admin = Describing()
    started = time.monotonic()
    steps = await source._membership_changes(["g-near", "g-far"], 1_700_000_000_000)
    assert time.monotonic() - started < ANSWER_WAIT_S + 1
    assert [s.group for s in steps] == ["g-near"]


async def test_an_answer_that_comes_between_polls_is_stamped_with_when_it_came():
    """g-far's OffsetFetch is not answered within the poll that sent it (its coordinator away); the answer comes a
    second before the next poll, which stamps g-far's commit with the answer's time, not its own. (Stood-in
    fetches: the moment the Kafka mock answers a fetch sent to a broker that comes back is not the test's to pick.)"""
    import asyncio

    from lagwatch.services.ingest.admin_offsets import AdminOffsets
    from lagwatch.shared.protocol.group_filter import GroupFilter
    from lagwatch.shared.runtime.clock import now_ms

    far_answers = asyncio.Event()

    async def offset_fetch(group, partitions):
        if group == "g-far":
            await far_answers.wait()
        return {("orders", 0): 5}

    async def groups():
        return ["g-near", "g-far"], False

    source = AdminOffsets({}, named_groups=(), group_filter=GroupFilter(), partition_counts=dict)
    source._admin = _Served()  # asked nothing else: groups and fetches are stood in for
    source._groups, source._offset_fetch, source._membership_changes = groups, offset_fetch, _no_members
    first = await source.poll()
    assert [commit.group for commit in first] == ["g-near"]
    far_answers.set()
    await asyncio.sleep(0.05)  # the answer is taken in (its task completes) ...
    came = now_ms()
    await asyncio.sleep(1.0)  # ... a second before the next poll
    second = await source.poll()
    assert [commit.group for commit in second] == ["g-far"]
    stamped = (second[0].observed_at, second[0].timestamp)
    assert all(came - 100 <= t <= came for t in stamped), (stamped, came)  # the poll's own time: came + 1000


async def _no_members(groups, observed):
    return []


class _Served:
    def poll(self, timeout):  # the admin client's queue of log lines, served after each poll
        return 0
