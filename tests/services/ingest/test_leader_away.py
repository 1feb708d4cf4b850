"""A broker leading some partitions is away while the rest of the cluster answers (an offline partition; a broker
down with replication 1): the ingest goes on with every other partition, from its start on."""

import asyncio
import logging
import time

from prometheus_client import REGISTRY
from redis.asyncio import Redis

from lagwatch.devkit.offsets_topic_writer import OffsetCommitSpec, OffsetsTopicWriter
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.windows.ingest_totals import read_totals
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, readiness, running
from tests.services.ingest.conftest import AWAY
from tests.services.ingest.test_ingest_resilience import _equals, commits_round, expected_orders, stored_orders


async def test_a_worker_starts_while_a_broker_leading_other_topics_is_away(one_broker_apart, redis_server, redis):
    """Its first log-end poll is answered only partly: the commits of the partitions the others lead are stored all
    the same (the first poll used to be retried until every leader answered: no commit was read meanwhile)."""
    config = make_config(one_broker_apart.bootstrap, redis_server.url)
    store = WindowStore(redis, config.window())
    one_broker_apart.set_broker_down(AWAY)
    async with OffsetsTopicWriter(one_broker_apart.bootstrap) as writer, running(IngestWorker(config, CLUSTER)):
        specs = commits_round(0, int(time.time() * 1000))
        orders = await writer.commits(specs)
        expected = expected_orders(specs, orders)
        await eventually(lambda: _equals(stored_orders(store), expected), timeout=15)


async def test_a_commit_for_a_partition_never_sampled_whose_leader_is_away_does_not_hold_the_others(
    one_broker_apart, redis_server, redis
):
    """`remote`'s leader was away from the start, so its log end was never known: its commit is dropped and
    counted, as Burrow drops a commit it has no broker offsets for; the batch's other commits are stored (the batch
    used to be retried until that broker came back)."""
    config = make_config(one_broker_apart.bootstrap, redis_server.url)
    store = WindowStore(redis, config.window())
    one_broker_apart.set_broker_down(AWAY)
    now = int(time.time() * 1000)
    async with OffsetsTopicWriter(one_broker_apart.bootstrap) as writer, running(IngestWorker(config, CLUSTER)):
        await writer.commits([OffsetCommitSpec("billing", "remote", 0, 5, timestamp=now)])
        await writer.commits([OffsetCommitSpec("billing", "orders", 0, 7, timestamp=now)])
        await eventually(lambda: _stored_offsets(store, "billing", "orders", [7]), timeout=15)
        await eventually(lambda: _dropped_without_log_end(redis, 1))


async def _stored_offsets(store: WindowStore, group: str, topic: str, offsets: list[int]) -> bool:
    stored = await store.reads.get_group(CLUSTER, group)
    partitions = [p for p in stored.partitions if p.topic == topic] if stored else []
    return [e.offset for p in partitions for e in p.entries] == offsets


async def _dropped_without_log_end(redis: Redis, n: int) -> bool:
    return (await read_totals(redis, CLUSTER)).get("outcome:no_broker_offset", 0) >= n


async def test_a_leader_away_is_said_once_while_it_lasts_and_again_when_it_answers(
    one_broker_apart, redis_server, caplog
):
    """A broker away for many polls: one warning naming its partitions (each poll of `offset-refresh` used to log
    one), the gauge counts them, and a line says when every leader answers again."""
    config = make_config(one_broker_apart.bootstrap, redis_server.url)
    one_broker_apart.set_broker_down(AWAY)
    with caplog.at_level(logging.INFO, logger="lagwatch.services.ingest"):
        async with running(IngestWorker(config, CLUSTER)):
            await eventually(lambda: _unanswered(at_least=3))
            await asyncio.sleep(10 * 0.3)  # ten more polls with the broker still away
            away_lines = _lines(caplog, logging.WARNING, "leaders did not answer")
            assert len(away_lines) == 1, away_lines
            assert "remote[0]" in away_lines[0]
            assert not _lines(caplog, logging.WARNING, "Kafka unreachable")
            one_broker_apart.set_broker_up(AWAY)
            await eventually(lambda: _unanswered(at_most=0))
    assert _lines(caplog, logging.INFO, "every partition leader answers again")


async def _unanswered(at_least: int = 0, at_most: int = 1_000_000) -> bool:
    value = REGISTRY.get_sample_value("lagwatch_ingest_partitions_unanswered", {"cluster": CLUSTER})
    return value is not None and at_least <= value <= at_most


def _lines(caplog, level: int, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and text in r.getMessage()]


async def test_a_worker_whose_partition_leaders_are_away_stays_ready_while_the_cluster_answers(
    one_broker_apart, redis_server
):
    """It goes on with every other partition, so it stays ready (a partition offline for weeks used to keep the
    ingest not ready, holding every rollout of it); the gauge counts the partitions (LagwatchPartitionLeadersAway
    fires on it). The whole cluster away: not ready."""
    config = make_config(one_broker_apart.bootstrap, redis_server.url)
    one_broker_apart.set_broker_down(AWAY)
    async with running(IngestWorker(config, CLUSTER)) as worker:
        await eventually(lambda: _unanswered(at_least=3))
        answers = []
        for _ in range(10):  # across several polls with the broker still away
            answers.append(await readiness(worker))
            await asyncio.sleep(0.3)
        assert {status for status, _ in answers} == {200}, answers
        assert answers[-1][1]["checks"] == {"redis": True, "kafka": True}
        await asyncio.to_thread(one_broker_apart.set_broker_down)
        try:
            _, body = await eventually(lambda: _answer_is(worker, 503), timeout=30)
            assert body["checks"] == {"redis": True, "kafka": False}
        finally:
            await asyncio.to_thread(one_broker_apart.set_broker_up)
        await eventually(lambda: _answer_is(worker, 200), timeout=30)


async def _answer_is(worker: IngestWorker, status: int) -> tuple[int, dict] | None:
    got = await readiness(worker)
    return got if got[0] == status else None
