"""A second evaluator joining one that ran alone: it takes about half of the changes partitions (a rebalance), and
from then on each instance runs the schedule of its own. STOP detection goes on through the rebalance (STOPs whose
instants fall while the second instance joins, and after), and the status topic carries each transition exactly
once: none repeated (the second instance's catch-up evaluates again the groups the first already judged), none
missed (a STOP, a transition recorded with its event still in the outbox)."""

import asyncio
import re
import signal
from pathlib import Path

import pytest

from lagwatch.services.evaluator.evaluation import GroupEvaluator
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.windows.changes import partition_of
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, evaluator_process, eventually, make_config
from tests.services.evaluator.test_evaluator import StatusTopic
from tests.services.evaluator.test_evaluator_schedule import NO_SWEEP, stopping_group
from tests.services.evaluator.test_ownership import quiet_groups
from tests.system.test_evaluator_restart_end_to_end import RefusingPublisher, announce, now_ms

pytestmark = pytest.mark.slow  # STOPs scheduled seconds ahead, a second member joining the consumer group

PARTITIONS = 4
QUIET = [f"quiet-{i}" for i in range(300)]
STOPPING = [f"stopping-{i}" for i in range(12)]
UNSENT = [f"unsent-{i}" for i in range(16)]  # in every partition
STOP_FOUND_WITHIN_MS = 10_000  # what the fleet's operators are promised after a takeover, not a measured figure
TAKING, HANDING = "taking over changes partitions", "handed over changes partitions"


async def test_a_second_evaluator_takes_half_the_partitions_and_each_transition_is_published_once(
    kafka, redis_server, redis, tmp_path
):
    kafka.create_topic("lagwatch.status", 3)
    kafka.create_topic("lagwatch.changes", PARTITIONS)
    config = make_config(kafka.bootstrap, redis_server.url, **NO_SWEEP)
    store = WindowStore(redis, config.window())
    await quiet_groups(store, QUIET, now_ms())
    logs = {name: tmp_path / f"{name}-evaluator.log" for name in ("first", "second")}
    processes = {}
    try:
        processes["first"] = _evaluator(kafka.bootstrap, redis_server.url, logs["first"])
        async with StatusTopic(kafka.bootstrap) as topic:
            await _until_each(topic, QUIET, 1, timeout=60)
            # the instants: from before the second instance has joined until well after
            now = now_ms()
            instants = {group: now + 2500 + 1500 * i for i, group in enumerate(STOPPING)}
            for i, (group, at) in enumerate(instants.items()):
                await stopping_group(store, group, stop_at_ms=at, now_ms=now, order=3 * i + 1)
            await announce(kafka.bootstrap, STOPPING)
            await _until_each(topic, STOPPING, 1, timeout=30)
            await _recorded_but_unsent(redis, store, config)

            joined_at = now_ms()
            processes["second"] = _evaluator(kafka.bootstrap, redis_server.url, logs["second"])
            owned = await eventually(lambda: _shared(logs), timeout=30)
            shared_at = now_ms()
            # the second instance's catch-up sends what the outbox holds for its groups; the first sends the rest at
            # their next evaluation (a change notice here)
            await _until_each(topic, _placed_in(UNSENT, owned["second"]), 1, timeout=30)
            await announce(kafka.bootstrap, _placed_in(UNSENT, owned["first"]))
            await _until_each(topic, UNSENT, 1, timeout=30)
            await _until_each(topic, STOPPING, 2, timeout=60)
            await eventually(lambda: _shared(logs), timeout=5)  # still shared: no further rebalance hid a repeat
            await asyncio.sleep(1.0)  # anything repeated would be on its way by now
            await topic.read()
    except AssertionError as failed:  # what the instances did is the first thing to read
        raise AssertionError(f"{failed}\n{_tails(logs)}") from failed
    finally:
        for process in processes.values():
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
    _print_delays(topic, instants, joined_at, shared_at, logs)
    _assert_each_transition_once(topic, instants)
    for name, partitions in owned.items():  # each instance found STOPs of groups it holds, not only the first
        found = [g for g in _placed_in(STOPPING, partitions) if f"/{g}: -> ERR" in logs[name].read_text()]
        assert found, (name, partitions)
    assert all(process.returncode == 0 for process in processes.values()), _tails(logs)


def _assert_each_transition_once(topic: StatusTopic, instants: dict[str, int]) -> None:
    """The first status of every group once, and each STOP once, found within the bound after its instant."""
    for group in [*QUIET, *UNSENT]:
        assert topic.transitions(group) == [("NOTFOUND", "OK")], (group, topic.describe(group))
    for group in STOPPING:
        assert topic.transitions(group) == [("NOTFOUND", "OK"), ("OK", "ERR")], (group, topic.describe(group))
        stopped = _err_event(topic, group)
        assert stopped["partitions"][0]["status"] == "STOP", topic.describe(group)
        assert instants[group] <= stopped["evaluated_at"] <= instants[group] + STOP_FOUND_WITHIN_MS, group


def _evaluator(bootstrap: str, redis_url: str, log: Path):
    with log.open("w") as out:
        return evaluator_process(
            bootstrap, redis_url, out, EVALUATOR__SWEEP_INTERVAL=NO_SWEEP["EVALUATOR__SWEEP_INTERVAL"]
        )


async def _recorded_but_unsent(redis, store: WindowStore, config) -> None:
    """Groups whose first status is recorded with its event left in the outbox (Kafka refused it), as an evaluator
    leaves them when it dies between the two; no change notice names them, so only an evaluation that catches up on
    their partition sends it."""
    await quiet_groups(store, UNSENT, now_ms())
    statuses = StatusStore(redis, config.window().expire_group_ms)
    unsent = GroupEvaluator(CLUSTER, store, statuses, RefusingPublisher(), config.rules())
    assert (await unsent.evaluate(UNSENT)).transitions == len(UNSENT)
    assert {partition_of(CLUSTER, g, PARTITIONS) for g in UNSENT} == set(range(PARTITIONS))


async def _until_each(topic: StatusTopic, groups: list[str], n: int, timeout: float) -> None:
    """Until the status topic carries at least `n` transitions of each of these groups."""

    async def enough():
        await topic.read()
        return all(len(topic.transitions(group)) >= n for group in groups)

    try:
        await eventually(enough, timeout=timeout)
    except AssertionError:
        short = [group for group in groups if len(topic.transitions(group)) < n]
        raise AssertionError(f"wanted {n} transitions of each, saw fewer of {short[:20]}") from None


def _owned(log_text: str) -> set[int]:
    """The changes partitions an instance holds, replaying what its log says it took over and handed over."""
    owned: set[int] = set()
    for line in log_text.splitlines():
        for said, change in ((TAKING, owned.update), (HANDING, owned.difference_update)):
            if said in line:
                change(int(p) for p in re.findall(r"\d+", line.split(said, 1)[1]))
    return owned


async def _shared(logs: dict[str, Path]) -> dict[str, set[int]] | None:
    """Each instance's partitions, once both hold some and together all, each partition once."""
    owned = {name: _owned(log.read_text()) if log.exists() else set() for name, log in logs.items()}
    first, second = owned["first"], owned["second"]
    together = first and second and not first & second and first | second == set(range(PARTITIONS))
    return owned if together else None


def _placed_in(groups: list[str], partitions: set[int]) -> list[str]:
    return [g for g in groups if partition_of(CLUSTER, g, PARTITIONS) in partitions]


def _err_event(topic: StatusTopic, group: str) -> dict:
    return next(e for e in topic.events if e["group"] == group and e["status"] == "ERR")


def _print_delays(topic: StatusTopic, instants: dict[str, int], joined_at: int, shared_at: int, logs) -> None:
    """How late each STOP was found and by which instance, beside when the second instance started and when the
    partitions were shared (seen in the output with -s)."""
    print(f"\nsecond instance started at +0 ms, partitions shared at +{shared_at - joined_at} ms")
    texts = {name: log.read_text() for name, log in logs.items()}
    for group, at in instants.items():
        found = next((e["evaluated_at"] for e in topic.events if e["group"] == group and e["status"] == "ERR"), None)
        finders = [name for name, text in texts.items() if f"/{group}: -> ERR" in text]
        late = None if found is None else found - at
        print(f"{group}: instant at +{at - joined_at} ms, found {late} ms after it, by the {' and '.join(finders)}")


def _tails(logs: dict[str, Path]) -> str:
    return "\n".join(
        f"{name} evaluator's log:\n{log.read_text()[-10_000:]}" for name, log in logs.items() if log.exists()
    )
