"""The archiver against records that are JSON objects with every key but values no file column can hold, or that
would place a file outside `history.path`: each is counted and skipped like any bad record, the good ones around it
archived, and the archiver keeps running (one such record used to stop it at every restart)."""

from __future__ import annotations

import json

import pyarrow.dataset as ds
from aiokafka import AIOKafkaProducer

from lagwatch.services.archiver.service import RECORDS, Archiver
from lagwatch.shared.protocol.types import Commit
from lagwatch.shared.records.history import commit_record
from tests.kafka_helpers import CLUSTER, eventually, make_config, running

T = 1_767_225_600_000  # 2026-01-01T00:00:00Z
TOPIC = "lagwatch.history"
GOOD = [commit_record(CLUSTER, Commit("g", "t", 0, i, T + i, i, T + i)) for i in range(6)]


def _with(**values) -> bytes:
    return json.dumps({**GOOD[0]._asdict(), **values}).encode()


HOSTILE = [
    _with(offset=2**64),  # past int64
    _with(partition=2**40),  # past int32
    _with(observed_at=2**62),  # no date to file it under
    _with(group="\ud800"),  # a lone surrogate: valid JSON, not UTF-8
    _with(kind="broker", group=7),  # a sample whose group is no string
    _with(cluster="../../../escaped"),  # a directory outside the root
    b"[" * 100_000 + b"]" * 100_000,  # nested past the parser's recursion limit
]


async def test_records_no_file_can_hold_are_counted_and_skipped_and_the_rest_archived(kafka, redis_server, tmp_path):
    kafka.create_topic(TOPIC, 1)
    root = tmp_path / "history"
    config = make_config(
        kafka.bootstrap,
        redis_server.url,
        HISTORY__PATH=str(root),
        HISTORY__FLUSH_INTERVAL="0.5",
        HISTORY__HTTP_PORT="0",
    )
    bad_before = RECORDS.labels(CLUSTER, "bad")._value.get()
    lines = [GOOD[0].encode(), *HOSTILE[:3], GOOD[1].encode(), *HOSTILE[3:], *(r.encode() for r in GOOD[2:])]
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        await producer.send(TOPIC, b"\n".join(lines[:5]), key=b"k")  # among good ones in one message
        for line in lines[5:]:  # and alone
            await producer.send(TOPIC, line, key=b"k")

    archiver = Archiver(config, CLUSTER, http_port=0)
    async with running(archiver):
        await eventually(lambda: _archived(archiver, len(GOOD)), timeout=20)

    assert RECORDS.labels(CLUSTER, "bad")._value.get() == bad_before + len(HOSTILE)
    table = ds.dataset(root, format="parquet", partitioning="hive").to_table()
    assert sorted(table.column("offset").to_pylist()) == list(range(len(GOOD)))
    assert [p.name for p in tmp_path.iterdir()] == ["history"]  # nothing written beside the root


async def _archived(archiver: Archiver, n: int) -> bool:
    return archiver.writer.rows_written >= n and not archiver.positions
