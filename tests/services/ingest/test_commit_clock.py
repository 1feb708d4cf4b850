"""Whose clock (services/ingest/commit_clock.py): coordinator records with chosen commit timestamps written to the
Kafka mock, read by an ingest worker into a real Redis; the offset between commit times and lagwatch's clock is
exported to /metrics and Redis, the ingest's delay measured."""

import pytest
from prometheus_client import REGISTRY

from lagwatch.devkit.offsets_topic_writer import OffsetsTopicWriter
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, running
from tests.services.ingest.test_ingest import window_of
from tests.services.ingest.test_ingest_resilience import _is_set

HOUR_MS = 3_600_000


async def _exported_offset(redis) -> int | None:
    stored = await redis.hgetall(keys.commit_clock(CLUSTER))
    return int(stored[b"offset_ms"]) if stored else None


def _sample(name: str) -> float:
    return REGISTRY.get_sample_value(name, {"cluster": CLUSTER}) or 0.0


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
        assert _sample("lagwatch_commit_clock_offset_seconds") == offset_ms / 1000
        assert worker.pipeline.clock.offset_ms == offset_ms
        # the ingest's delay, measured on lagwatch's clock: that commit's, once
        assert _sample("lagwatch_ingest_commit_delay_seconds_count") == delays_before[0] + 1
        assert 0 <= _sample("lagwatch_ingest_commit_delay_seconds_sum") - delays_before[1] <= delay_ms / 1000
        stored = await redis.hgetall(keys.commit_clock(CLUSTER))
        assert written_at <= int(stored[b"at_ms"]) <= written_at + delay_ms


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
            assert worker.pipeline.clock.offset_ms == before
            assert await _exported_offset(redis) == before
            assert _sample("lagwatch_commit_clock_offset_seconds") < 5
            await writer.commit("billing", "orders", 0, 5)  # read at the log end
            await eventually(lambda: _newest_offset_is(store, 5), timeout=30)
            assert 0 <= worker.pipeline.clock.offset_ms < 5_000
            assert 0 <= await _exported_offset(redis) < 5_000


async def _newest_offset_is(store, offset):
    window = await window_of(store, "billing", "orders", 0)
    return window is not None and window.entries[-1].offset == offset
