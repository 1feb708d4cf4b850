"""Whose clock (services/ingest/commit_clock.py): coordinator records with chosen commit timestamps written to the
Kafka mock, read by an ingest worker into a real Redis; the offset between each coordinator's commit times and
lagwatch's clock is exported to /metrics and Redis, the ingest's delay measured."""

import pytest
from prometheus_client import REGISTRY

from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OffsetsTopicWriter
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.windows.clock_offset import CoordinatorClocks, offsets_partition_of
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, running
from tests.services.ingest.test_ingest import window_of
from tests.services.ingest.test_ingest_resilience import _is_set

HOUR_MS = 3_600_000


BILLING = offsets_partition_of("billing", DEFAULT_PARTITIONS)  # the offsets partition of the group committing


async def _exported_offset(redis, partition: int = BILLING) -> int | None:
    stored = CoordinatorClocks.parse(await redis.hgetall(keys.commit_clock(CLUSTER)))
    return stored.offsets_ms.get(partition)


def _sample(name: str, partition: int | None = None) -> float:
    labels = {"cluster": CLUSTER} if partition is None else {"cluster": CLUSTER, "partition": str(partition)}
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _offset_sample(partition: int = BILLING) -> float:
    return _sample("lagwatch_commit_clock_offset_seconds", partition)


@pytest.mark.parametrize("skew_ms", [-HOUR_MS, HOUR_MS], ids=["commit times an hour behind", "an hour ahead"])
async def test_commit_times_off_by_an_hour_give_that_offset_within_the_ingests_delay(
    kafka, redis_server, redis, skew_ms
):
    kafka.create_topic("orders", 1)
    config = make_config(kafka.bootstrap, redis_server.url)
    delays_before = [_sample(f"lagwatch_ingest_commit_delay_seconds_{s}") for s in ("count", "sum")]
    async with OffsetsTopicWriter(kafka.bootstrap) as writer, running(IngestWorker(config, CLUSTER)) as worker:
        await eventually(lambda: _is_set(worker.caught_up), timeout=30)
        written_at = now_ms()
        await writer.commit("billing", "orders", 0, 1, timestamp=written_at + skew_ms)
        offset_ms = await eventually(lambda: _exported_offset(redis))
        delay_ms = now_ms() - written_at  # the ingest's delay is within this
        assert -skew_ms <= offset_ms <= -skew_ms + delay_ms
        assert _offset_sample() == offset_ms / 1000
        assert worker.pipeline.clock.offsets_ms == {BILLING: offset_ms}
        # the ingest's delay, measured on lagwatch's clock: that commit's, once
        assert _sample("lagwatch_ingest_commit_delay_seconds_count") == delays_before[0] + 1
        assert 0 <= _sample("lagwatch_ingest_commit_delay_seconds_sum") - delays_before[1] <= delay_ms / 1000
        stored = await redis.hgetall(keys.commit_clock(CLUSTER))
        assert written_at <= int(stored[b"at_ms"]) <= written_at + delay_ms
        # the offsets topic's partition count, which maps a group to its coordinator for the rules' readers
        assert CoordinatorClocks.parse(stored).of_group("billing") == offset_ms


async def test_old_commits_read_again_after_a_restart_do_not_move_the_offset(kafka, redis_server, redis):
    """Commits stamped an hour ago, waiting in the offsets topic while no worker ran, are read by the next one before
    it reaches the log end: they are late, not a clock an hour off. Until it reads at the log end, the worker goes by
    the offset the last one stored."""
    kafka.create_topic("orders", 1)
    config = make_config(kafka.bootstrap, redis_server.url)
    store = WindowStore(redis, config.window())
    async with OffsetsTopicWriter(kafka.bootstrap) as writer:
        async with running(IngestWorker(config, CLUSTER)) as worker:
            await eventually(lambda: _is_set(worker.caught_up), timeout=30)
            await writer.commit("billing", "orders", 0, 1)
            before = await eventually(lambda: _exported_offset(redis))
        assert 0 <= before < 5_000
        for offset in (2, 3, 4):
            await writer.commit("billing", "orders", 0, offset, timestamp=now_ms() - HOUR_MS)
        async with running(IngestWorker(config, CLUSTER)) as worker:
            await eventually(lambda: _newest_offset_is(store, 4), timeout=30)
            await eventually(lambda: _is_set(worker.caught_up), timeout=30)
            # nothing read at the log end yet: the offset the last worker stored, not an hour
            assert worker.pipeline.clock.offsets_ms == {BILLING: before}
            assert await _exported_offset(redis) == before
            assert _offset_sample() < 5
            await writer.commit("billing", "orders", 0, 5)  # read at the log end
            await eventually(lambda: _newest_offset_is(store, 5), timeout=30)
            assert 0 <= worker.pipeline.clock.offsets_ms[BILLING] < 5_000
            assert 0 <= await _exported_offset(redis) < 5_000


async def _newest_offset_is(store, offset):
    window = await window_of(store, "billing", "orders", 0)
    return window is not None and window.entries[-1].offset == offset


async def test_each_coordinator_has_its_own_offset(kafka, redis_server, redis):
    """Two groups coordinated by different offsets partitions (brokers), one stamping commits an hour ahead: only
    that partition's offset is an hour; the other's stays near zero, and each group reads its own."""
    kafka.create_topic("orders", 1)
    right, ahead = "billing", next(g for g in (f"audit-{i}" for i in range(100)) if _partition(g) != BILLING)
    config = make_config(kafka.bootstrap, redis_server.url)
    async with OffsetsTopicWriter(kafka.bootstrap) as writer, running(IngestWorker(config, CLUSTER)) as worker:
        await eventually(lambda: _is_set(worker.caught_up), timeout=30)
        await writer.commit(right, "orders", 0, 1)
        await writer.commit(ahead, "orders", 0, 1, timestamp=now_ms() + HOUR_MS)
        await eventually(lambda: _exported_offset(redis, _partition(ahead)))
        await eventually(lambda: _exported_offset(redis, BILLING))
        clocks = CoordinatorClocks.parse(await redis.hgetall(keys.commit_clock(CLUSTER)))
        assert 0 <= clocks.of_group(right) < 5_000
        assert -HOUR_MS <= clocks.of_group(ahead) < -HOUR_MS + 5_000
        assert _offset_sample(_partition(ahead)) == clocks.of_group(ahead) / 1000
        assert 0 <= _offset_sample() < 5
        worker.pipeline.clock.revoked([_partition(ahead)])  # its next owner exports it
        assert (
            REGISTRY.get_sample_value(
                "lagwatch_commit_clock_offset_seconds", {"cluster": CLUSTER, "partition": str(_partition(ahead))}
            )
            is None
        )


def _partition(group: str) -> int:
    return offsets_partition_of(group, DEFAULT_PARTITIONS)
