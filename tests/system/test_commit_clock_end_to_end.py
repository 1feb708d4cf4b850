"""One clock: commit timestamps an hour off lagwatch's clock (a broker's clock set wrong, or a v1 client stamping its
own) neither raise STOPs on consumers that keep up nor hide a consumer that stopped; and the groups of a broker whose
clock is right, on the same cluster, keep theirs (each coordinator has its own offset).

Coordinator records with skewed timestamps go to the Kafka mock, a running ingest worker stores them in a real
Redis and estimates the offsets (services/ingest/commit_clock.py); the groups are evaluated as the evaluator does
(its GroupEvaluator on the stored windows), at chosen instants.
"""

import asyncio

import pytest
from prometheus_client import REGISTRY

from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OffsetsTopicWriter
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.windows.clock_offset import offsets_partition_of
from tests.evaluated import evaluate
from tests.kafka_helpers import CLUSTER, eventually, make_config, produce, running
from tests.services.ingest.test_ingest_resilience import _is_set

HOUR_MS = 3_600_000
STEP_S = 0.3
STEPS = 12
STOPS_AFTER = 4  # the stopping group's commits


@pytest.mark.parametrize("skew_ms", [-HOUR_MS, HOUR_MS], ids=["commit times an hour behind", "an hour ahead"])
async def test_a_consumer_keeping_up_stays_ok_and_one_that_stops_reads_err_within_its_windows_span(
    kafka, redis_server, redis, skew_ms
):
    kafka.create_topic("orders", 3)
    config = make_config(kafka.bootstrap, redis_server.url, STORAGE__INTERVALS="3", STORAGE__MIN_DISTANCE="0")
    keeping_up, stopped, right_clock = [], [], []  # their statuses, step by step
    async with OffsetsTopicWriter(kafka.bootstrap) as writer, running(IngestWorker(config, CLUSTER)) as worker:
        await eventually(lambda: _is_set(worker.caught_up), timeout=30)
        produced = 0
        for step in range(STEPS):
            produced += 10
            await produce(kafka.bootstrap, "orders", {0: 10, 1: 10, 2: 10})
            await eventually(lambda n=produced: _sampled(worker, n))  # each commit's lag: exactly what it is behind
            stamp = now_ms() + skew_ms
            # two to three steps behind the producer (never caught up within the broker ring), and not falling behind
            await writer.commit("keeping-up", "orders", 0, produced - (35 if step % 2 else 30), timestamp=stamp)
            # a group coordinated by another broker, whose clock is right: its STOP clock is its own
            await writer.commit("right-clock", "orders", 2, produced - (35 if step % 2 else 30))
            if step < STOPS_AFTER:  # then it stops, while messages keep arriving
                await writer.commit("stopped", "orders", 1, produced - 5, timestamp=stamp)
            await asyncio.sleep(STEP_S)
            keeping_up.append(await _status(redis, config, "keeping-up"))
            stopped.append(await _status(redis, config, "stopped"))
            right_clock.append(await _status(redis, config, "right-clock"))
        offsets_s = {group: _offset_s(group) for group in ("keeping-up", "stopped", "right-clock")}

    assert set(keeping_up) - {"NOTFOUND"} == {"OK"}, keeping_up
    assert set(right_clock) - {"NOTFOUND"} == {"OK"}, right_clock
    assert "ERR" not in stopped[:STOPS_AFTER], stopped
    # its window spans two steps (three commits): ERR from then on, one step and a bit allowed for the ingest
    assert stopped[STOPS_AFTER + 3 :] == ["ERR"] * (STEPS - STOPS_AFTER - 3), stopped
    for group in ("keeping-up", "stopped"):
        assert -skew_ms / 1000 <= offsets_s[group] <= -skew_ms / 1000 + 5, offsets_s
    assert 0 <= offsets_s["right-clock"] <= 5, offsets_s


def _offset_s(group: str) -> float | None:
    """The exported offset of the group's coordinator (its offsets partition)."""
    partition = str(offsets_partition_of(group, DEFAULT_PARTITIONS))
    labels = {"cluster": CLUSTER, "partition": partition}
    return REGISTRY.get_sample_value("lagwatch_commit_clock_offset_seconds", labels)


async def _sampled(worker: IngestWorker, log_end: int) -> bool:
    return worker.broker_offsets.latest.get(("orders", 0)) == log_end


async def _status(redis, config, group: str) -> str:
    await evaluate(redis, config, CLUSTER, [group], now_ms())
    return (await redis.hget(f"lw:c:{{{CLUSTER}}}:statuses", group) or b"NOTFOUND").decode()
