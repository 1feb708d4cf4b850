"""A flush started by a rebalance (`on_partitions_revoked`, on aiokafka's coordinator task) writes the buffer in a
thread while the archiver's own task may hand it the records of its next fetch: those are written by a later flush,
and no position is committed past them before."""

from __future__ import annotations

import asyncio
import threading
from typing import NamedTuple

import pyarrow.dataset as ds
from aiokafka import TopicPartition

from lagwatch.services.archiver.service import Archiver
from lagwatch.shared.protocol.types import Commit
from lagwatch.shared.records import history_files
from lagwatch.shared.records.history import commit_record
from tests.kafka_helpers import CLUSTER, make_config

T = 1_767_225_600_000  # 2026-01-01T00:00:00Z
TP = TopicPartition("lagwatch.history", 0)


class Message(NamedTuple):  # what the archiver reads of aiokafka's ConsumerRecord
    value: bytes
    offset: int
    partition: int = 0


def _fetched(offset: int) -> dict:
    record = commit_record(CLUSTER, Commit("g", "t", 0, offset, T + offset, offset, T + offset))
    return {TP: [Message(record.encode(), offset)]}


async def test_records_fetched_while_a_revoke_flush_writes_are_kept_and_not_committed_past(
    kafka, redis_server, tmp_path, monkeypatch
):
    config = make_config(kafka.bootstrap, redis_server.url, HISTORY__PATH=str(tmp_path), HISTORY__HTTP_PORT="0")
    archiver = Archiver(config, CLUSTER, http_port=0)
    committed: list[dict] = []

    async def commit(positions: dict) -> None:
        committed.append(positions)

    monkeypatch.setattr(archiver.consumer, "commit", commit)
    writing, go_on = threading.Event(), threading.Event()
    write_table = history_files.pq.write_table

    def slow_write_table(*args, **kwargs):  # the file's rows are taken; the write is under way
        writing.set()
        go_on.wait(10)
        write_table(*args, **kwargs)

    monkeypatch.setattr(history_files.pq, "write_table", slow_write_table)

    await archiver._add(_fetched(0))
    revoke_flush = asyncio.create_task(archiver.flush())
    await asyncio.to_thread(writing.wait, 10)
    next_fetch = asyncio.create_task(archiver._add(_fetched(1)))  # the consumer's task, meanwhile
    await asyncio.sleep(0.2)
    go_on.set()
    await asyncio.gather(revoke_flush, next_fetch)
    await archiver.flush()
    await archiver.consumer.stop()

    table = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    assert sorted(table.column("offset").to_pylist()) == [0, 1]
    assert committed and committed[0][TP] == 1  # the first flush covered offset 0 only
    assert committed[-1][TP] == 2
