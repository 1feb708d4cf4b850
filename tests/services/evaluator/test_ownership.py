"""Restarts and takeovers resume, not recompute (services/evaluator/ownership.py, backlog.py): an instance that gets
changes-topic partitions runs their stored schedule at once and catches up on their other groups a chunk at a time
after whatever is due; a partition handed away mid-catch-up is caught up no more; a stop mid-catch-up ends the
schedule loop between two chunks."""

import asyncio
import time
from types import SimpleNamespace

import pytest

from lagwatch.services.evaluator import newcomers, ownership, runs
from lagwatch.services.evaluator.evaluation import GroupEvaluator
from lagwatch.services.evaluator.newcomers import Newcomers
from lagwatch.services.evaluator.notices import ChangeNotices
from lagwatch.services.evaluator.ownership import OwnedGroups
from lagwatch.services.evaluator.runs import EvaluationRuns
from lagwatch.services.evaluator.schedule_store import ScheduleStore
from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.protocol.types import Commit
from lagwatch.shared.runtime.config import Config
from lagwatch.shared.windows.changes import encode_log_end_notice, partition_of
from lagwatch.shared.windows.store import WindowStore
from tests.evaluated import AcceptingPublisher, evaluate
from tests.kafka_helpers import CLUSTER, eventually, make_config, running
from tests.services.evaluator.test_evaluator import StatusTopic
from tests.services.evaluator.test_evaluator_schedule import NO_SWEEP, stopping_group

pytestmark = pytest.mark.slow  # thousands of groups taken over

STATUS_TOPIC, CHANGES_TOPIC, PARTITIONS = "lagwatch.status", "lagwatch.changes", 4
CHUNK = 50  # groups per evaluation here: a takeover of QUIET groups is caught up on in many chunks
QUIET = 2000
MINUTE = 60_000


@pytest.fixture
def small_chunks(monkeypatch):
    for module in (runs, ownership, newcomers):
        monkeypatch.setattr(module, "SWEEP_CHUNK", CHUNK)


def place(group: str) -> int:
    return partition_of(CLUSTER, group, PARTITIONS)


async def quiet_groups(store: WindowStore, groups: list[str], now: int, topic: str = "quiet") -> None:
    """Groups caught up on a quiet topic: OK, and nothing time alone changes before they expire."""
    await store.writes.add_broker_polls(CLUSTER, {topic: {0: 300}}, now - MINUTE)
    commits = [
        Commit(group, topic, 0, 100 * (k + 1), now - (3 - k) * MINUTE, 3 * i + k + 1, now - (3 - k) * MINUTE)
        for i, group in enumerate(groups)
        for k in range(3)
    ]
    await store.writes.add_commits(CLUSTER, commits, now, broker_offsets={(topic, 0): 300})


async def evaluated_before(redis, config: Config, groups: list[str], now: int) -> None:
    """What an evaluator that held the partitions before leaves in Redis: statuses, ready results, the schedule."""
    report = await evaluate(redis, config, CLUSTER, groups, now)
    await ScheduleStore(redis, CLUSTER).set(report.next_at, place)


def evaluations_of(evaluation_runs: EvaluationRuns) -> list[tuple[str, list[str]]]:
    """Every evaluation these runs start from now on, in order: (trigger, groups)."""
    seen: list[tuple[str, list[str]]] = []
    evaluate_now = evaluation_runs.evaluate

    async def recorded(groups, trigger, read=None):
        seen.append((trigger, list(groups)))
        return await evaluate_now(groups, trigger, read)

    evaluation_runs.evaluate = recorded
    return seen


def evaluated(evaluations: list[tuple[str, list[str]]], trigger: str | None = None) -> list[str]:
    return [group for by, groups in evaluations if trigger in (None, by) for group in groups]


async def test_a_restarted_evaluator_finds_a_due_stop_before_it_catches_up_on_the_other_groups(
    kafka, redis_server, redis, small_chunks
):
    """The evaluator before evaluated every group and scheduled one group's STOP; the instant passed while none
    ran. The restarted one resumes the schedule: that STOP is found first, while the other groups still wait to be
    caught up on, a chunk at a time, each once and quietly (their recorded statuses stand)."""
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic(CHANGES_TOPIC, PARTITIONS)
    config = make_config(kafka.bootstrap, redis_server.url, **NO_SWEEP)
    store, now = WindowStore(redis, config.window()), int(time.time() * 1000)
    quiet = [f"quiet-{i:04d}" for i in range(QUIET)]
    await quiet_groups(store, quiet, now)
    await stopping_group(store, "stopping", stop_at_ms=now + 1000, now_ms=now)
    await evaluated_before(redis, config, [*quiet, "stopping"], now)
    await asyncio.sleep(max(0.0, (now + 1000) / 1000 - time.time()))  # the instant passes while none runs
    service = EvaluatorService(config, CLUSTER, http_port=0)
    evaluations = evaluations_of(service.runs)
    async with StatusTopic(kafka.bootstrap) as topic, running(service):
        assert await topic.until("stopping", 1, timeout=30) == [("OK", "ERR")]
        await eventually(lambda: _all_in(quiet, evaluations), timeout=60)
        await asyncio.sleep(0.5)
        await topic.read()
    first = next(i for i, (_, groups) in enumerate(evaluations) if "stopping" in groups)
    assert evaluations[first] == ("schedule", ["stopping"])
    assert evaluated(evaluations[:first]) == []  # every other group still waited for the catch-up
    assert sorted(evaluated(evaluations, "takeover")) == quiet  # then caught up on, each once
    assert len([e for e in evaluations if e[0] == "takeover"]) >= QUIET // CHUNK
    assert [e["group"] for e in topic.events] == ["stopping"]  # the others' recorded statuses stood


async def _all_in(groups: list[str], evaluations) -> bool:
    return set(groups) <= set(evaluated(evaluations))


class HeldPartitions:
    """The changes-topic partitions Kafka assigned to the instance, as the test says (`ChangesPartitions`)."""

    def __init__(self, held: set[int]) -> None:
        self.held = held

    def owned(self) -> set[int] | None:
        return self.held or None

    def count(self) -> int:
        return PARTITIONS

    def placing(self):
        return place


def owned_groups(redis, config: Config, partitions: HeldPartitions) -> OwnedGroups:
    """The evaluator's schedule loop and takeovers over real Redis, the partitions held as the test says."""
    store = WindowStore(redis, config.window())
    statuses = StatusStore(redis, config.window().expire_group_ms)
    evaluator = GroupEvaluator(CLUSTER, store, statuses, AcceptingPublisher(), config.rules())
    evaluation_runs = EvaluationRuns(evaluator, ScheduleStore(redis, CLUSTER), partitions.placing, asyncio.Event())
    return OwnedGroups(evaluation_runs, Newcomers(evaluation_runs, 0), partitions, 3600)


async def known_quiet_groups(redis, config: Config, count: int, *readers_of_orders: str) -> list[str]:
    """`count` groups an evaluator before evaluated (OK), on the topic `quiet`; `readers_of_orders` on `orders`."""
    groups = [f"quiet-{i:04d}" for i in range(count)]
    now, store = int(time.time() * 1000), WindowStore(redis, config.window())
    await quiet_groups(store, groups, now)
    await quiet_groups(store, list(readers_of_orders), now, topic="orders")
    await evaluated_before(redis, config, [*groups, *readers_of_orders], now)
    return groups


async def test_groups_of_a_partition_handed_away_mid_catch_up_are_caught_up_no_more(redis_server, redis, small_chunks):
    config = make_config("127.0.0.1:1", redis_server.url)
    groups = await known_quiet_groups(redis, config, 400)
    held = HeldPartitions({0, 1, 2, 3})
    owned = owned_groups(redis, config, held)
    evaluations = evaluations_of(owned.runs)
    await owned._schedule_round()  # takes the four partitions over
    assert evaluations == [] and owned.taken_over == {0, 1, 2, 3}  # their schedule runs; nothing recomputed yet
    await owned._schedule_round()  # lists their groups
    await owned._schedule_round()  # reads the topics of the groups waiting
    await owned._schedule_round()  # catches up on a chunk
    assert [trigger for trigger, _ in evaluations] == ["takeover"]
    first_chunk = evaluated(evaluations)

    held.held = {0, 1}  # a rebalance hands partitions 2 and 3 to another instance
    await owned._schedule_round()
    assert owned.taken_over == {0, 1}
    assert {place(group) for group in owned.runs.backlog} == {0, 1}
    for _ in range(len(groups)):
        if not owned.runs.backlog:
            break
        await owned._schedule_round()
    kept = sorted(g for g in groups if place(g) in {0, 1} and g not in first_chunk)
    assert sorted(evaluated(evaluations[1:])) == kept  # no group of 2 or 3 after the handover, each kept one once


async def test_a_stop_mid_catch_up_ends_the_schedule_loop_between_chunks(redis_server, redis, small_chunks):
    """The service's stop is bounded: the loop looks at `stopping` between two chunks of the catch-up."""
    config = make_config("127.0.0.1:1", redis_server.url)
    await known_quiet_groups(redis, config, 400)
    owned = owned_groups(redis, config, HeldPartitions({0, 1, 2, 3}))
    evaluate_now = owned.runs.evaluate
    chunks: list[list[str]] = []

    async def stop_after_the_first(groups, trigger, read=None):  # a stop asked while a chunk is evaluated
        chunks.append(groups)
        report = await evaluate_now(groups, trigger, read)
        owned.stopping.set()
        return report

    owned.runs.evaluate = stop_after_the_first
    await asyncio.wait_for(owned.run_schedule(), timeout=30)
    assert len(chunks) == 1 and len(chunks[0]) == CHUNK
    assert len(owned.runs.backlog) == 400 - CHUNK  # left waiting: the next instance catches up on them


class NoticeStream:
    """The changes topic as the notices agent takes it from Faust: one batch of these notices."""

    def __init__(self, *values: bytes) -> None:
        self.values = values

    async def take_events(self, n: int, within: float):
        yield [SimpleNamespace(value=value) for value in self.values]


async def test_a_log_end_notice_brings_a_group_not_caught_up_yet_to_the_front(redis_server, redis, small_chunks):
    """A group waiting for the catch-up has no watch to tell whether a poll could change it: a log-end notice for a
    topic it reads (its stored result says which) makes it the next one caught up on, right after what is due."""
    config = make_config("127.0.0.1:1", redis_server.url)
    await known_quiet_groups(redis, config, 400, "zz-reads-orders")  # known, all OK: the last in the backlog
    owned = owned_groups(redis, config, HeldPartitions({0, 1, 2, 3}))
    evaluations = evaluations_of(owned.runs)
    for _ in range(3):  # takes the partitions over, lists their groups, reads their topics
        await owned._schedule_round()
    assert evaluations == [] and list(owned.runs.backlog)[-1] == "zz-reads-orders"

    notices = ChangeNotices(owned.runs, owned.newcomers)
    await notices.take(NoticeStream(encode_log_end_notice(CLUSTER, ["orders"], int(time.time() * 1000))))
    assert evaluations == []  # the notice itself evaluates nothing: the group keeps to the catch-up's pace
    await owned._schedule_round()
    assert evaluations[0][0] == "takeover" and evaluations[0][1][0] == "zz-reads-orders"


async def test_new_groups_sparklines_are_drawn_once_no_new_group_waits(redis_server, redis, small_chunks):
    """A flood of new groups (a cold start's every group) gets every status before any sparkline: a chunk of new
    groups owes its sparklines, the schedule loop draws none while new groups wait, and draws them after."""
    config = make_config("127.0.0.1:1", redis_server.url)
    groups = [f"new-{i:03d}" for i in range(3 * CHUNK)]
    now = int(time.time() * 1000)
    await quiet_groups(WindowStore(redis, config.window()), groups, now)
    owned = owned_groups(redis, config, HeldPartitions({0, 1, 2, 3}))
    owned.taken_over = {0, 1, 2, 3}  # nothing to take over: only the newcomers and the sparklines are at stake
    results = owned.evaluator.results
    assert await owned.newcomers.known_first(groups) == []  # all new: queued
    await owned.newcomers._evaluate(owned.newcomers.queue.take(CHUNK))
    assert len(await results.all(CLUSTER)) == CHUNK and owned.evaluator.sparklines.owed == set(groups[:CHUNK])

    await asyncio.wait_for(owned._schedule_round(), timeout=10)  # new groups still wait: it draws nothing
    assert await results.sparklines(CLUSTER) == {}
    while owned.newcomers.queue:
        await owned.newcomers._evaluate(owned.newcomers.queue.take(CHUNK))
    assert len(await results.all(CLUSTER)) == len(groups) and await results.sparklines(CLUSTER) == {}
    for _ in range(3):
        await owned._schedule_round()
    assert sorted(await results.sparklines(CLUSTER)) == groups and owned.evaluator.sparklines.owed == set()


async def test_the_heap_is_given_back_once_a_burst_of_new_groups_is_done(
    redis_server, redis, small_chunks, monkeypatch
):
    """A cold start's every group evaluated, then their sparklines drawn: what the burst freed goes back to the
    system once, when the schedule loop has nothing left but to wait; not while new groups still wait."""
    given_back = []
    monkeypatch.setattr(ownership, "give_back_free_memory", lambda: given_back.append(len(owned.newcomers.queue)))
    config = make_config("127.0.0.1:1", redis_server.url)
    groups = [f"new-{i:03d}" for i in range(2 * CHUNK)]
    await quiet_groups(WindowStore(redis, config.window()), groups, int(time.time() * 1000))
    owned = owned_groups(redis, config, HeldPartitions({0, 1, 2, 3}))
    owned.taken_over = {0, 1, 2, 3}
    await owned.newcomers.known_first(groups)
    await owned.newcomers._evaluate(owned.newcomers.queue.take(CHUNK))
    await owned._schedule_round()  # new groups wait: the sparklines too, and the heap is not given back
    await owned.newcomers._evaluate(owned.newcomers.queue.take(CHUNK))
    for _ in range(4):  # the sparklines drawn, then idle rounds
        await owned._schedule_round()
    assert owned.evaluator.sparklines.owed == set() and given_back == [0]
