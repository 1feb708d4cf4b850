"""The archiver when it cannot write under `history.path`, or its Kafka is away: memory stays bounded (fetching
stops), nothing unwritten is counted or committed, `/readyz` says which dependency fails; once the path is writable
again every record is written, once. An unwritable path shows in `/readyz` from start-up, before any record."""

from __future__ import annotations

import asyncio
import logging

import pyarrow.dataset as ds
from aiokafka import AIOKafkaProducer, TopicPartition

from lagwatch.services.archiver import service
from lagwatch.services.archiver.service import RECORDS, WRITE_FAILURES, Archiver
from lagwatch.shared.protocol.types import Commit
from lagwatch.shared.records.history import commit_record
from tests.kafka_helpers import CLUSTER, check_readiness_follows_the_brokers, eventually, make_config, running

T = 1_767_225_600_000  # 2026-01-01T00:00:00Z
TOPIC = "lagwatch.history"
FLUSH_ROWS = 40
PER_MESSAGE = 5  # records per message: the buffer is checked after each message
RECORDS_SENT = 4 * FLUSH_ROWS


def _config(kafka, redis_server, path):
    return make_config(
        kafka.bootstrap,
        redis_server.url,
        HISTORY__PATH=str(path),
        HISTORY__FLUSH_ROWS=str(FLUSH_ROWS),
        HISTORY__FLUSH_INTERVAL="0.5",
        HISTORY__HTTP_PORT="0",
    )


async def _send_history(bootstrap: str, offsets: range) -> None:
    records = [commit_record(CLUSTER, Commit("g", "t", i % 4, i, T + i, i, T + i)) for i in offsets]
    async with AIOKafkaProducer(bootstrap_servers=bootstrap) as producer:
        for start in range(0, len(records), PER_MESSAGE):
            lines = [record.encode() for record in records[start : start + PER_MESSAGE]]
            await producer.send(TOPIC, b"\n".join(lines), key=records[start].key())


async def test_an_unwritable_path_holds_at_most_the_bound_and_a_writable_one_gets_every_record_once(
    kafka, redis_server, tmp_path, http, monkeypatch
):
    monkeypatch.setattr(service, "WRITE_BACKOFF_CAP_S", 0.3)  # retries a few times a second
    kafka.create_topic(TOPIC, 2)
    blocker = tmp_path / "afile"  # a file where the root's parent should be: unwritable, as root too
    blocker.write_text("")
    root = blocker / "history"
    archived_before = RECORDS.labels(CLUSTER, "archived")._value.get()
    failures_before = WRITE_FAILURES.labels(CLUSTER)._value.get()
    await _send_history(kafka.bootstrap, range(RECORDS_SENT))

    archiver = Archiver(_config(kafka, redis_server, root), CLUSTER, http_port=0)
    async with running(archiver):
        await eventually(lambda: _readyz_is(http, archiver, 503, {"kafka": True, "history_path": False}), timeout=30)
        await eventually(lambda: _pending_at_least(archiver, FLUSH_ROWS), timeout=10)
        held = []
        for _ in range(15):  # several retries fail meanwhile: fetching stays stopped
            held.append(archiver.pending_rows)
            await asyncio.sleep(0.1)
        assert max(held) <= FLUSH_ROWS - 1 + PER_MESSAGE  # the bound, checked after each message
        assert WRITE_FAILURES.labels(CLUSTER)._value.get() >= failures_before + 2
        assert RECORDS.labels(CLUSTER, "archived")._value.get() == archived_before  # nothing written: none counted
        assert await _committed(archiver) == {0: None, 1: None}  # no position past an unwritten record

        blocker.unlink()
        blocker.mkdir(exist_ok=True)  # the archiver's retry may have made it already (its parents=True)
        await eventually(lambda: _all_written(archiver, root), timeout=20)
        assert await _readyz_is(http, archiver, 200, {"kafka": True, "history_path": True})

    assert sorted(_offsets(root)) == list(range(RECORDS_SENT))  # each record once
    assert RECORDS.labels(CLUSTER, "archived")._value.get() == archived_before + RECORDS_SENT


async def test_an_unwritable_path_is_not_ready_from_start_up_without_any_record_and_ready_once_writable(
    kafka, redis_server, tmp_path, http, monkeypatch, caplog
):
    monkeypatch.setattr(service, "WRITE_BACKOFF_CAP_S", 0.3)  # the start-up probe retries a few times a second
    kafka.create_topic(TOPIC, 2)  # and stays empty: no write ever tries the path
    blocker = tmp_path / "afile"  # a file where the root's parent should be: unwritable, as root too
    blocker.write_text("")
    root = blocker / "history"
    failures_before = WRITE_FAILURES.labels(CLUSTER)._value.get()

    archiver = Archiver(_config(kafka, redis_server, root), CLUSTER, http_port=0)
    with caplog.at_level(logging.WARNING, logger=service.log.name):
        async with running(archiver):
            await eventually(
                lambda: _readyz_is(http, archiver, 503, {"kafka": True, "history_path": False}), timeout=15
            )
            await eventually(lambda: _failures_at_least(failures_before + 3), timeout=10)  # retried, still failing
            assert await _readyz_is(http, archiver, 503, {"kafka": True, "history_path": False})
            assert archiver.writer.rows_written == 0 and archiver.pending_rows == 0  # no record came into it
            warnings = [r.getMessage() for r in caplog.records if r.name == service.log.name]
            assert len(warnings) == 1, warnings  # once, however many retries
            assert str(root) in warnings[0] and "Not a directory" in warnings[0]  # the path and the error

            blocker.unlink()
            blocker.mkdir(exist_ok=True)  # the archiver's retry may have made it already (its parents=True)
            await eventually(lambda: _readyz_is(http, archiver, 200, {"kafka": True, "history_path": True}), timeout=10)

    # the probe deleted its file; what is left is a directory that dataset readers skip ("_" prefix)
    assert [(p.relative_to(root).as_posix(), p.is_dir()) for p in root.rglob("*")] == [("_lagwatch_probe", True)]
    assert ds.dataset(root, format="parquet", partitioning="hive").files == []


async def test_readiness_says_kafka_is_away_while_its_brokers_are_down(kafka, redis_server, tmp_path):
    kafka.create_topic(TOPIC, 2)
    archiver = Archiver(_config(kafka, redis_server, tmp_path), CLUSTER, http_port=0)
    archiver.kafka_probe.cache_seconds = 0.2  # the probe's cache spares the brokers; the test needs no wait
    async with running(archiver):
        await check_readiness_follows_the_brokers(kafka, archiver)  # and history_path stays true meanwhile


async def _readyz_is(http, archiver: Archiver, status: int, checks: dict[str, bool]) -> bool:
    if archiver.health.port == 0:  # not started yet
        return False
    async with http.get(f"{archiver.health.url}/readyz") as response:
        return response.status == status and (await response.json())["checks"] == checks


async def _failures_at_least(n: float) -> bool:
    return WRITE_FAILURES.labels(CLUSTER)._value.get() >= n


async def _pending_at_least(archiver: Archiver, n: int) -> bool:
    return archiver.pending_rows >= n


async def _committed(archiver: Archiver) -> dict[int, int | None]:
    return {p: await archiver.consumer.committed(TopicPartition(TOPIC, p)) for p in (0, 1)}


async def _all_written(archiver: Archiver, root) -> bool:
    return archiver.writer.rows_written >= RECORDS_SENT and not archiver.positions and archiver.pending_rows == 0


def _offsets(root) -> list[int]:
    return ds.dataset(root, format="parquet", partitioning="hive").to_table().column("offset").to_pylist()
