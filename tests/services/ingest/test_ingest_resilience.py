"""The ingest under restarts, scale-out, a Redis outage and SIGTERM: nothing lost, nothing doubled."""

import asyncio
import gc
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from lagwatch.devkit.mock_kafka import MockKafkaCluster
from lagwatch.devkit.offsets_topic_writer import (
    DEFAULT_PARTITIONS,
    OFFSETS_TOPIC,
    OffsetCommitSpec,
    OffsetsTopicWriter,
)
from lagwatch.devkit.redis_server import RedisServer
from lagwatch.services.ingest.service import IngestWorker, consumer_group
from lagwatch.shared.windows.changes import ChangePublisher, decode_notice, groups_of
from lagwatch.shared.windows.read_through_store import ReadThroughStore
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, running
from tests.net_helpers import free_port

GROUPS = [f"group-{i}" for i in range(40)]


def commits_round(r, now):
    return [OffsetCommitSpec(g, "orders", p, r * 10 + p, timestamp=now - 60_000 + r) for g in GROUPS for p in range(2)]


async def stored_orders(store):
    """{(group, partition): [orders]} of everything in the windows."""
    out = {}
    for group in await store.reads.list_groups(CLUSTER):
        if group not in GROUPS:  # lagwatch's own group
            continue
        stored = await store.reads.get_group(CLUSTER, group)
        for p in stored.partitions if stored else []:
            out[(group, p.partition)] = [e.order for e in p.entries]
    return out


def expected_orders(specs, orders):
    out = {}
    for spec, order in zip(specs, orders, strict=True):
        out.setdefault((spec.group, spec.partition), []).append(order)
    return out


async def test_restarting_mid_stream_loses_and_duplicates_nothing(kafka, redis_server, redis):
    kafka.create_topic("orders", 2)
    config = make_config(kafka.bootstrap, redis_server.url, STORAGE__INTERVALS="50", INGEST__BATCH_SIZE="50")
    store = WindowStore(redis, config.window())
    now = int(time.time() * 1000)
    specs, orders = [], []
    async with OffsetsTopicWriter(kafka.bootstrap) as writer:
        first = IngestWorker(config, CLUSTER)
        async with running(first):
            for r in range(5):
                batch = commits_round(r, now)
                specs += batch
                orders += await writer.commits(batch)
            await eventually(lambda: _true(first.batches_done >= 3))
        # stopped mid-stream (more rounds are written while nobody runs), then a new worker takes over
        for r in range(5, 10):
            batch = commits_round(r, now)
            specs += batch
            orders += await writer.commits(batch)
        async with running(IngestWorker(config, CLUSTER)):
            expected = expected_orders(specs, orders)
            await eventually(lambda: _equals(stored_orders(store), expected), timeout=30)


async def _true(value):
    return bool(value)


async def _equals(awaitable, expected):
    return await awaitable == expected


async def test_two_workers_share_the_partitions_and_each_group_has_one_writer(kafka, redis_server, redis):
    """Worker A runs here, instrumented; worker B is a `lagwatch run ingest` process, as in a deployment."""
    kafka.create_topic("orders", 2)
    config = make_config(kafka.bootstrap, redis_server.url, STORAGE__INTERVALS="50")
    store = WindowStore(redis, config.window())
    here = IngestWorker(config, CLUSTER)
    here.processor.packs_flush = False  # writes as GroupWrites, to see each group (the packed ones are the same)
    writes_here: list[tuple[str, bool]] = []  # (group written, did A hold the group's offsets partition right then)
    original = here.processor.cache.write

    async def recording(writes):
        held = here.consumer.assigned
        writes_here.extend((w.group, writer.partition_for(w.group) in held) for w in writes if w.group in GROUPS)
        return await original(writes)

    here.processor.cache.write = recording
    shared_round = False
    async with running(here), OffsetsTopicWriter(kafka.bootstrap) as writer:
        await eventually(lambda: _has_partitions(here, 50))
        other = _ingest_process(kafka.bootstrap, redis_server.url)
        try:
            specs, orders = [], []
            for r in range(6):  # the mock's coordinator sometimes drops B for a while (a join race): try rounds
                await eventually(lambda: _has_partitions(here, 25), timeout=60)
                written_before = len(writes_here)
                round_specs = commits_round(r, int(time.time() * 1000))
                round_orders = await writer.commits(round_specs)
                specs, orders = specs + round_specs, orders + round_orders
                expected = expected_orders(specs, orders)
                await eventually(lambda e=expected: _equals(stored_orders(store), e), timeout=30)
                by_a = {group for group, _ in writes_here[written_before:]}
                if 0 < len(by_a) < len(GROUPS):  # A wrote its share and B, holding the rest, the others
                    shared_round = True
                    break
        finally:
            other.send_signal(signal.SIGTERM)
            out, _ = other.communicate(timeout=30)
        assert other.returncode == 0, out
    assert writes_here and all(held for _, held in writes_here)  # A only ever wrote groups whose partition it held
    assert shared_round


async def _has_partitions(worker, n):
    return len(worker.consumer.assigned) == n


def _ingest_process(bootstrap, redis_url):
    env = dict(
        os.environ,
        REDIS_URL=redis_url,
        KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        LAGWATCH__STORAGE__INTERVALS="50",
        LAGWATCH__INGEST__SESSION_TIMEOUT="3",
    )
    lagwatch = Path(sys.executable).parent / "lagwatch"
    return subprocess.Popen(
        [str(lagwatch), "run", "ingest", "--http-port", "0", "--workers", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


async def committed_offsets(bootstrap):
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=consumer_group(CLUSTER))
    await consumer.start()
    try:
        tps = [TopicPartition(OFFSETS_TOPIC, p) for p in range(50)]
        return {tp.partition: await consumer.committed(tp) for tp in tps}
    finally:
        await consumer.stop()


async def test_redis_down_the_batch_waits_and_kafka_offsets_are_not_committed_past_it(kafka, tmp_path, caplog):
    kafka.create_topic("orders", 1)
    caplog.set_level(logging.INFO, logger="lagwatch.services.ingest")
    with RedisServer(dir=tmp_path / "redis", appendonly=True) as server:
        server.start()
        config = make_config(kafka.bootstrap, server.url)
        redis = Redis.from_url(server.url)
        store = WindowStore(redis, config.window())
        async with OffsetsTopicWriter(kafka.bootstrap) as writer, running(IngestWorker(config, CLUSTER)) as worker:
            await writer.commit("billing", "orders", 0, 1)
            await eventually(lambda: store.reads.get_group(CLUSTER, "billing"))
            partition = writer.partition_for("billing")
            await eventually(lambda: _committed_past(kafka.bootstrap, partition, -1))  # commits trail the store
            before = (await committed_offsets(kafka.bootstrap))[partition]
            server.stop()
            await writer.commit("billing", "orders", 0, 2)
            await asyncio.sleep(2)  # the worker retries meanwhile
            assert (await committed_offsets(kafka.bootstrap))[partition] == before
            assert not worker.stopping.is_set()
            outage = [r for r in caplog.records if "Redis unreachable" in r.getMessage()]
            assert not [r for r in caplog.records if r.exc_info], caplog.text[-2000:]  # an outage, no bug
            # said once, though the log-end poller tried every 0.3 s (a warning each, before)
            assert [r.levelno for r in outage] == [logging.WARNING], caplog.text[-2000:]
            server.start()
            await eventually(lambda: _newest_offset(store, "billing", 2), timeout=30)
            await eventually(lambda: _committed_past(kafka.bootstrap, partition, before), timeout=10)
            await eventually(lambda: _said(caplog, "Redis unreachable: over after"))
        await redis.aclose()


async def _said(caplog, text):
    return any(text in r.getMessage() for r in caplog.records)


async def _newest_offset(store, group, offset):
    try:
        stored = await store.reads.get_group(CLUSTER, group)
    except Exception:
        return False
    return stored is not None and stored.partitions[0].entries[-1].offset == offset


async def _committed_past(bootstrap, partition, before):
    committed = (await committed_offsets(bootstrap))[partition]
    return committed is not None and committed > before


async def test_sigterm_finishes_commits_and_exits_cleanly(kafka, redis_server, redis):
    kafka.create_topic("orders", 1)
    port = free_port()
    env = dict(os.environ, REDIS_URL=redis_server.url, KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap)
    lagwatch = Path(sys.executable).parent / "lagwatch"
    proc = subprocess.Popen(
        [str(lagwatch), "run", "ingest", "--http-port", str(port), "--workers", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        async with OffsetsTopicWriter(kafka.bootstrap) as writer:
            await eventually(lambda: _ready(port), timeout=30)
            await writer.commit("billing", "orders", 0, 3)
            store = WindowStore(redis)
            await eventually(lambda: store.reads.get_group(CLUSTER, "billing"))
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert (await committed_offsets(kafka.bootstrap))[writer.partition_for("billing")] is not None, out


async def _ready(port):
    try:
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/readyz") as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False


async def _checks_scraped(port) -> dict[str, float]:
    """`lagwatch_service_ready` as Prometheus scrapes it from the health port: check -> 1 or 0."""
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as response:
        text = await response.text()
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == "lagwatch_service_ready"]
    assert {s.labels["service"] for s in family.samples} == {"ingest"}
    return {s.labels["check"]: s.value for s in family.samples}


async def test_kafka_down_at_start_up_the_worker_waits_unready_and_then_works(redis_server, redis):
    """A worker started before its Kafka answers keeps running (health up, not ready: its /metrics says which
    check fails, for Prometheus, which scrapes it as up) and, once Kafka is there, stores commits."""
    kafka_port, health_port = free_port(), free_port()
    config = make_config(f"127.0.0.1:{kafka_port}", redis_server.url, INGEST__HTTP_PORT=str(health_port))
    async with running(IngestWorker(config, CLUSTER)) as worker:
        await eventually(lambda: _health_answers(health_port))
        await asyncio.sleep(2)  # a few failed connection attempts
        assert not worker.stopping.is_set()
        assert not await _ready(health_port)
        assert await _checks_scraped(health_port) == {"redis": 1.0, "kafka": 0.0}
        with MockKafkaCluster(port=kafka_port) as kafka:
            kafka.start()
            kafka.create_topic(OFFSETS_TOPIC, DEFAULT_PARTITIONS)
            kafka.create_topic("orders", 1)
            async with OffsetsTopicWriter(kafka.bootstrap) as writer:
                await eventually(lambda: _ready(health_port), timeout=40)
                assert await _checks_scraped(health_port) == {"redis": 1.0, "kafka": 1.0}
                await writer.commit("billing", "orders", 0, 3)
                await eventually(lambda: WindowStore(redis).reads.get_group(CLUSTER, "billing"), timeout=30)


async def test_change_notices_flow_once_kafka_is_there_when_it_was_not_at_first():
    """Kafka down when a service starts: its notices wait for it (queued by the producer), they are not turned off
    for good (the evaluator would hear of changes only at its sweeps)."""
    port = free_port()
    publisher = ChangePublisher({"bootstrap.servers": f"127.0.0.1:{port}"})
    await publisher.start()
    await publisher.publish(CLUSTER, [("billing", "commits")])  # no Kafka yet
    with MockKafkaCluster(port=port) as kafka:
        kafka.start()
        kafka.create_topic("lagwatch.changes", 4)
        consumer = AIOKafkaConsumer("lagwatch.changes", bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest")
        await consumer.start()
        records: list = []
        try:
            await publisher.publish(CLUSTER, [("audit", "commits")])
            await eventually(lambda: _records_of(consumer, 2, records), timeout=30)
        finally:
            await consumer.stop()
            await publisher.stop()
    assert sorted(g for r in records for g in groups_of(decode_notice(r.value))) == ["audit", "billing"]
    assert publisher.failures == 0


async def test_notices_kafka_never_takes_are_counted_as_failed_not_raised_and_logged_once(caplog):
    """Best effort: the service goes on, and every lost notice is counted; the log says so once, not per notice."""
    publisher = ChangePublisher({"bootstrap.servers": f"127.0.0.1:{free_port()}", "message.timeout.ms": 1500})
    await publisher.start()
    await publisher.publish(CLUSTER, [(f"group-{i}", "commits") for i in range(200)])

    async def counted():
        await publisher.publish(CLUSTER, [])  # serves delivery reports
        return publisher.failures >= 200

    with caplog.at_level(logging.WARNING, logger="lagwatch.shared.windows.changes"):
        await eventually(counted, timeout=20)
    await publisher.stop()
    warnings = [r for r in caplog.records if "change notices not published" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]


async def _health_answers(port):
    try:
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/healthz") as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False


async def _records_of(consumer, count, seen):
    batch = await consumer.getmany(timeout_ms=200)
    seen.extend(r for records in batch.values() for r in records)
    return seen if len(seen) >= count else None


async def test_how_far_the_commits_are_read_stops_during_a_kafka_outage_and_resumes_after(kafka, redis_server, redis):
    """The instant through which the worker has stored every commit (shared/windows/read_through.py) keeps up with the
    clock; while the brokers are away it stays where it was (commits made meanwhile are unread, so the rules'
    clock holds); once they are back and the worker has read to the ends they report, it moves on."""
    kafka.create_topic("orders", 1)
    config = make_config(kafka.bootstrap, redis_server.url)
    async with OffsetsTopicWriter(kafka.bootstrap) as writer, running(IngestWorker(config, CLUSTER)):
        await writer.commit("billing", "orders", 0, 3)
        await eventually(lambda: WindowStore(redis).reads.get_group(CLUSTER, "billing"), timeout=30)
        read_through = ReadThroughStore(redis, CLUSTER)
        await eventually(lambda: _read_through_after(read_through, time.time() * 1000 - 1000))  # keeps up
        down_at = time.time() * 1000
        await asyncio.to_thread(kafka.set_broker_down)
        try:
            await asyncio.sleep(2)
            assert max(await read_through.instants()) <= down_at  # nothing read since: the rules' clock holds
        finally:
            await asyncio.to_thread(kafka.set_broker_up)
        up_at = time.time() * 1000
        await writer.commit("billing", "orders", 0, 5)
        await eventually(lambda: _read_through_after(read_through, up_at), timeout=30)  # and resumes
        stored = await WindowStore(redis).reads.get_group(CLUSTER, "billing")
        assert [e.offset for e in stored.partitions[0].entries][-1] == 5  # read through means stored


async def test_a_log_start_moved_past_where_the_worker_left_off_does_not_stop_the_rules_clock(
    kafka, redis_server, redis
):
    """Retention (or DeleteRecords) removed everything after the worker's committed position while it was away: the
    consumer resets to the log start, and that partition reads as read through, not stuck behind for good (the
    rules' clock is the slowest partition's: one stuck partition would hold STOP back for every group)."""
    kafka.create_topic("orders", 1)
    config = make_config(kafka.bootstrap, redis_server.url)
    async with OffsetsTopicWriter(kafka.bootstrap) as writer:
        partition = writer.partition_for("billing")
        async with running(IngestWorker(config, CLUSTER)):
            await writer.commit("billing", "orders", 0, 1)
            await eventually(lambda: _committed_past(kafka.bootstrap, partition, 0), timeout=30)
        await writer.commit("billing", "orders", 0, 2)
        await writer.commit("billing", "orders", 0, 3)
        await asyncio.to_thread(kafka.delete_records, OFFSETS_TOPIC, partition, 3)  # the log start passes both
        restarted_at = time.time() * 1000
        async with running(IngestWorker(config, CLUSTER)) as worker:
            await eventually(lambda: _read_through_after(ReadThroughStore(redis, CLUSTER), restarted_at), timeout=30)
            await eventually(lambda: _is_set(worker.caught_up), timeout=30)


async def _is_set(event):
    return event.is_set()


async def _read_through_after(store, at_ms):
    instants = await store.instants()
    return bool(instants) and min(instants) > at_ms


async def test_with_start_latest_old_commits_left_unread_do_not_hold_the_rules_clock(kafka, redis_server, redis):
    """`start-latest` skips what the offsets topic held before the first start: those records are never read, and
    how far the worker has read must still follow the clock (else no STOP would ever be found)."""
    kafka.create_topic("orders", 1)
    async with OffsetsTopicWriter(kafka.bootstrap) as writer:
        await writer.commit("billing", "orders", 0, 3)  # before lagwatch ever ran: skipped
        config = make_config(kafka.bootstrap, redis_server.url, **{f"CLUSTERS__{CLUSTER}__START_LATEST": "true"})
        async with running(IngestWorker(config, CLUSTER)):
            read_through = ReadThroughStore(redis, CLUSTER)
            await eventually(lambda: _read_through_after(read_through, time.time() * 1000 - 1000), timeout=30)


async def test_notices_a_full_queue_refuses_are_each_counted():
    """Kafka away for long fills the producer's queue: every notice it refuses is counted, not only the first, and
    those still queued at the stop; the stopped publisher lets go of its producer."""
    settings = {"bootstrap.servers": f"127.0.0.1:{free_port()}", "queue.buffering.max.messages": 10}
    publisher = ChangePublisher(settings)
    await publisher.start()
    await publisher.publish(CLUSTER, [(f"group-{i}", "commits") for i in range(50)])
    assert publisher.failures == 40
    producer = publisher._producer
    await publisher.stop()
    assert publisher.failures == 50  # and the 10 queued ones, dropped at the stop (once: not again as purged)
    gc.collect()
    # ours and the call's: the queued notices' reports, never served, held the publisher and it the producer, a
    # client retrying its brokers for the rest of the process (in the suite: creating a later test's changes topic)
    assert sys.getrefcount(producer) == 2, "the stopped publisher still holds its producer"
