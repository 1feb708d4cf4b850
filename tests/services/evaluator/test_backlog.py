"""The takeover's backlog (services/evaluator/backlog.py): the groups of partitions taken over that this instance has
not evaluated yet, each once, in order; a topic notice brings the groups reading the topic to the front, even when
it came before their topics were read."""

import sys
import time

from lagwatch.services.evaluator.backlog import TakeoverBacklog
from lagwatch.shared.protocol.types import Commit
from lagwatch.shared.statuses.results_store import ResultsStore
from lagwatch.shared.windows.store import WindowStore
from tests.evaluated import evaluate
from tests.kafka_helpers import CLUSTER, make_config


def test_groups_wait_each_once_in_order_and_leave_when_evaluated_or_handed_away():
    backlog = TakeoverBacklog(CLUSTER)
    backlog.take_over({0, 1}, owned={0, 1})
    assert backlog and len(backlog) == 0  # partitions to list
    backlog.listed({0}, ["err", "warn", "ok-1", "ok-2"])
    backlog.listed({1}, ["ok-2", "ok-3"])  # waiting already: keeps its place
    assert list(backlog) == ["err", "warn", "ok-1", "ok-2", "ok-3"]
    backlog.done(["warn"])  # evaluated by a notice or the schedule meanwhile
    assert backlog.take(2) == ["err", "ok-1"]
    backlog.drop(lambda group: group == "ok-3")  # its partition went to another instance
    assert list(backlog) == ["ok-2"] and len(backlog) == 1
    backlog.done(["ok-2"])
    assert not backlog


def test_a_backlog_worked_off_holds_no_memory_of_its_size():
    backlog = TakeoverBacklog(CLUSTER)
    backlog.take_over({0}, owned={0})
    groups = [f"g{i}" for i in range(2000)]
    backlog.listed({0}, groups)
    backlog.read(groups[:1000], {group: {"orders"} for group in groups})
    while backlog.take(500):
        pass
    assert not backlog
    waiting = (backlog._front, backlog._rest, backlog._unread, backlog._topics, backlog._readers)
    assert [sys.getsizeof(d) for d in waiting] == [sys.getsizeof({})] * len(waiting)


def test_a_group_evaluated_after_the_takeover_but_before_the_listing_is_not_queued():
    """The schedule runs before the groups are listed: a group it evaluated needs no catch-up."""
    backlog = TakeoverBacklog(CLUSTER)
    backlog.take_over({0, 1}, owned={0, 1})
    backlog.done(["due"])
    backlog.listed({0}, ["due", "quiet-1"])
    backlog.done(["due-in-1"])
    backlog.listed({1}, ["due-in-1", "quiet-2"])
    assert list(backlog) == ["quiet-1", "quiet-2"]
    backlog.take_over({2}, owned={0, 1, 2})
    backlog.listed({2}, ["due"])  # evaluated before this takeover: caught up on again
    assert list(backlog) == ["quiet-1", "quiet-2", "due"]


def test_a_topic_notice_brings_the_groups_reading_the_topic_to_the_front():
    backlog = TakeoverBacklog(CLUSTER)
    backlog.listed(set(), ["a", "b", "c", "d"])
    assert backlog.unread(3) == ["a", "b", "c"]
    backlog.read(["a", "b", "c"], {"a": {"orders"}, "b": {"refunds"}, "c": {"orders", "refunds"}})
    assert backlog.unread(3) == ["d"]
    assert backlog.promote(["refunds"]) == 2
    assert list(backlog) == ["b", "c", "a", "d"]
    assert backlog.promote(["orders"]) == 1  # c is in front already
    assert backlog.take(4) == ["b", "c", "a", "d"]


def test_a_notice_that_came_before_the_topics_were_read_brings_its_readers_forward_once_they_are():
    """The notices of the partitions' log since the last owner stopped are read as soon as the partitions are
    assigned, before their groups are listed."""
    backlog = TakeoverBacklog(CLUSTER)
    assert backlog.promote(["orders"]) == 0
    backlog.listed(set(), ["a", "b"])
    backlog.read(["a", "b"], {"a": {"refunds"}, "b": {"orders"}})
    assert list(backlog) == ["b", "a"]


def test_a_group_evaluated_before_its_topics_were_read_is_not_read_again():
    backlog = TakeoverBacklog(CLUSTER)
    backlog.listed(set(), ["a", "b"])
    backlog.done(["a"])
    backlog.read(["a", "b"], {"a": {"orders"}, "b": {"orders"}})
    assert backlog.promote(["orders"]) == 1 and list(backlog) == ["b"] and backlog.unread(5) == []


async def test_the_topics_come_from_the_stored_results(redis_server, redis):
    config = make_config("127.0.0.1:1", redis_server.url)
    store, now = WindowStore(redis, config.window()), int(time.time() * 1000)
    await store.writes.add_broker_polls(CLUSTER, {"orders": {0: 10}, "refunds": {0: 10}}, now)
    both = [Commit("billing", topic, 0, 10, now - 1000, i, now - 1000) for i, topic in enumerate(["orders", "refunds"])]
    await store.writes.add_commits(CLUSTER, both, now)
    await evaluate(redis, config, CLUSTER, ["billing"], now)
    topics = await ResultsStore(redis).topics_of(CLUSTER, ["billing", "never-evaluated"])
    assert topics == {"billing": {"orders", "refunds"}}
