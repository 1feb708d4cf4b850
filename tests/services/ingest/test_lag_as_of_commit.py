"""Lag as of the commit (BatchProcessor._log_end, window.log_end_as_of): a commit stored after the log end moved on
keeps the lag it had when it was made, so a late ingest neither hides a WARN nor raises one.

Through a running ingest worker on the Kafka mock and a real Redis: each step produces 20 records, waits for the
poller to sample the new log end, then commits. While the worker's batches are held (its commit pass waits, the
poller goes on sampling), the commits pile up in the offsets topic and are stored together, after the log end has
moved past every one of them.
"""

import asyncio

import pytest

from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OffsetsTopicWriter
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.windows.clock_offset import offsets_partition_of
from lagwatch.shared.windows.store import WindowStore
from lagwatch.spark.replay import ReplayConfig, replay_group, replay_inputs, status_changes
from tests.evaluated import evaluate
from tests.kafka_helpers import CLUSTER, eventually, make_config, produce, running
from tests.services.ingest.test_ingest import window_of
from tests.services.ingest.test_ingest_resilience import _is_set
from tests.spark.test_spark_parity import HISTORY_TOPIC, _history

STEPS = 8
HELD_FROM = 3  # the step from which the worker's batches wait (more than one poll interval, 0.3 s, each step)
# every batch this late, from the first: the commit clock's estimate (the smallest read - commit time) holds this
# delay, which must not be taken for the clock (clock_offset.applied_offset)
LATE_S = 0.6


@pytest.mark.parametrize(
    ("held", "late_s"),
    [(True, 0), (False, 0), (False, LATE_S)],
    ids=["ingest held back", "ingest on time", "ingest late on every batch"],
)
async def test_a_consumer_falling_behind_reads_warn_and_one_keeping_up_reads_ok_however_late_the_ingest(
    kafka, redis_server, redis, held, late_s
):
    kafka.create_topic("orders", 1)
    kafka.create_topic(HISTORY_TOPIC, 1)
    config = make_config(
        kafka.bootstrap, redis_server.url, STORAGE__INTERVALS="6", STORAGE__MIN_DISTANCE="0", HISTORY__ENABLED="true"
    )
    store = WindowStore(redis, config.window())
    async with OffsetsTopicWriter(kafka.bootstrap) as writer, running(IngestWorker(config, CLUSTER)) as worker:
        await eventually(lambda: _is_set(worker.caught_up), timeout=30)
        gate = _hold_batches(worker, late_s)
        produced = 0
        for step in range(STEPS):
            produced += 20
            await produce(kafka.bootstrap, "orders", {0: 20})
            await eventually(lambda n=produced: _sampled(worker, n))
            if held and step == HELD_FROM:
                gate.clear()
            await writer.commit("falling", "orders", 0, 10 * (step + 1))  # lag 10, 20, 30, ...
            await writer.commit("keeping-up", "orders", 0, produced)  # lag 0
            await _commit_clock_known(worker)
        await asyncio.sleep(0.5)  # one more poll while held
        gate.set()
        await eventually(lambda: _newest_offset_is(store, "falling", 10 * STEPS), timeout=30)
        await eventually(lambda: _newest_offset_is(store, "keeping-up", produced), timeout=30)

        falling = await window_of(store, "falling", "orders", 0)
        assert [e.lag for e in falling.entries] == [10 * (step + 1) for step in range(STEPS - 6, STEPS)]
        assert [e.lag for e in (await window_of(store, "keeping-up", "orders", 0)).entries] == [0] * 6
        await evaluate(redis, config, CLUSTER, ["falling", "keeping-up"], now_ms())
        statuses = await redis.hgetall(f"lw:c:{{{CLUSTER}}}:statuses")
        assert statuses == {b"falling": b"WARN", b"keeping-up": b"OK"}

    # the replay of the history the ingest recorded meanwhile places the late commits as the ingest did
    records = sorted(await _history(kafka.bootstrap), key=lambda r: r.observed_at)
    replay = ReplayConfig(config.window(), config.rules(), tick_ms=100)
    for group, status in (("falling", "WARN"), ("keeping-up", "OK")):
        commits, samples = replay_inputs(r for r in records if r.group in (group, None))
        replayed = replay_group(CLUSTER, group, commits, samples, replay, end_ms=records[-1].observed_at + 100)
        assert status_changes(replayed.events)[-1][1] == status, (group, status_changes(replayed.events))


async def _commit_clock_known(worker: IngestWorker) -> None:
    """Both groups' coordinators' (their offsets partitions')."""
    partitions = {offsets_partition_of(group, DEFAULT_PARTITIONS) for group in ("falling", "keeping-up")}
    await eventually(lambda: _ready(partitions <= worker.pipeline.clock.offsets_ms.keys()))


def _hold_batches(worker: IngestWorker, late_s: float) -> asyncio.Event:
    """An open gate before the worker's commit pass, each batch `late_s` late: cleared, its batches wait (the poller
    does not)."""
    gate = asyncio.Event()
    gate.set()
    apply = worker.pipeline.apply

    async def held_apply(*args, **kwargs):
        await gate.wait()
        if late_s and args[0]:
            await asyncio.sleep(late_s)
        return await apply(*args, **kwargs)

    worker.pipeline.apply = held_apply  # type: ignore[method-assign]
    return gate


async def _ready(value: bool) -> bool:
    return value


async def _sampled(worker: IngestWorker, log_end: int) -> bool:
    return worker.broker_offsets.latest.get(("orders", 0)) == log_end


async def _newest_offset_is(store, group, offset):
    window = await window_of(store, group, "orders", 0)
    return window is not None and window.entries[-1].offset == offset
