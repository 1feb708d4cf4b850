"""The log probe's answers in the history (`probe` records, shared/records/history.py): the history a running ingest
records of a caught-up `read_committed` consumer of transactional topics, with the probe's answers the schedule
publishes (`HistoryPublisher.publish_probes`), replays to the statuses the live evaluator gave: OK where the probe
found only transaction markers past the commit, ERR (STALL) for a consumer with records still to read.

Real transactional producers write to the Kafka mock, the consumers' commits are mirrored into `__consumer_offsets`
as the coordinator writes them, an ingest worker stores them in a real Redis and archives them on the history
topic, and the groups are evaluated as the evaluator does."""

import asyncio

from lagwatch.devkit.offsets_topic_writer import OffsetsTopicWriter
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import ProbedLog
from lagwatch.shared.records.history import KIND_PROBE
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.windows.log_probes import decode_probe
from lagwatch.shared.windows.store import WindowStore
from lagwatch.spark.replay import ReplayConfig, replay_group, replay_inputs
from tests.evaluated import evaluate
from tests.kafka_helpers import CLUSTER, eventually, running
from tests.services.ingest.test_ingest_resilience import _is_set
from tests.services.ingest.test_log_probe import TRANSACTIONAL, transactional_consumers
from tests.services.ingest.test_probe_schedule import COMMITS, _probed, _window_full, stalled_window_config
from tests.spark.test_spark_parity import HISTORY_TOPIC, _history

GROUPS = ("eos-caught-up", "eos-behind")


async def test_a_caught_up_transactional_consumers_history_replays_to_its_live_status(kafka, redis_server, redis):
    kafka.create_topic(TRANSACTIONAL, 1)
    kafka.create_topic(HISTORY_TOPIC, 1)
    caught_up, behind, _ = await transactional_consumers(kafka.bootstrap)  # each consumer's commit
    config = stalled_window_config(kafka, redis_server, INGEST__LOG_PROBE="true", HISTORY__ENABLED="true")
    store = WindowStore(redis, config.window())
    async with OffsetsTopicWriter(kafka.bootstrap) as writer, running(IngestWorker(config, CLUSTER)) as worker:
        await eventually(lambda: _is_set(worker.caught_up), timeout=30)
        for _ in range(COMMITS):
            await writer.commit(GROUPS[0], TRANSACTIONAL, 0, caught_up)
            await writer.commit(GROUPS[1], TRANSACTIONAL, 0, behind)
            await asyncio.sleep(0.1)
        for group in GROUPS:
            await eventually(lambda g=group: _window_full(store, g), timeout=30)
        await eventually(lambda: _probed(redis, caught_up), timeout=30)
        unread = await eventually(lambda: _stored(redis, keys.log_probes_unread), timeout=30)
        answer = await _stored(redis, keys.log_probes)  # the answers the ingest stored, and published
        assert answer is not None and answer.unread_from is None and unread.committed == behind
        await evaluate(redis, config, CLUSTER, list(GROUPS), now_ms())
        live = {g.decode(): s.decode() for g, s in (await redis.hgetall(f"lw:c:{{{CLUSTER}}}:statuses")).items()}
        history = await eventually(lambda: _history_with_probes(kafka.bootstrap, caught_up, behind), timeout=30)

    assert live == {GROUPS[0]: "OK", GROUPS[1]: "ERR"}
    history.sort(key=lambda r: r.observed_at)
    replay = ReplayConfig(config.window(), config.rules(), tick_ms=100)
    end = history[-1].observed_at + 100
    replayed = {}
    for group in GROUPS:
        commits, others = replay_inputs(r for r in history if r.group in (group, None))
        last = replay_group(CLUSTER, group, commits, others, replay, end_ms=end).timeline[-1]
        replayed[group] = last.status
        assert last.totallag == (0 if group == GROUPS[0] else answer.log_end - behind), (group, last)
    assert replayed == live


async def _stored(redis, key) -> ProbedLog | None:
    """The answer stored under the topic's `key` (`keys.log_probes` or `keys.log_probes_unread`) for partition 0."""
    return decode_probe(await redis.hget(key(CLUSTER, TRANSACTIONAL), "0"))


async def _history_with_probes(bootstrap: str, caught_up: int, behind: int):
    """The history topic's records once both answers are among them, the caught-up one's and the one behind's with
    its unread record (else None: not archived yet)."""
    records = await _history(bootstrap)
    answers = {(r.offset, r.unread_from is None) for r in records if r.kind == KIND_PROBE}
    return records if {(caught_up, True), (behind, False)} <= answers else None
