"""The history of what the ingest read: its records, the Parquet files they are archived in, and the archiver service
that moves them from the history topic to those files."""

from __future__ import annotations

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from aiokafka import AIOKafkaProducer

from lagwatch.services.archiver.service import RECORDS, Archiver
from lagwatch.shared.protocol.types import Commit, ProbedLog
from lagwatch.shared.records.history import (
    FORMAT_VERSION,
    KIND_BROKER,
    KIND_PROBE,
    MESSAGE_BYTES,
    PROBE_COLUMNS,
    HistoryMessages,
    HistoryRecord,
    HistoryRecordInvalid,
    broker_records,
    commit_group_head,
    commit_record,
    commits_key,
    decode,
    probe_record,
    records_of,
    utc_date,
)
from lagwatch.shared.records.history_files import HistoryFileWriter
from tests.kafka_helpers import CLUSTER, eventually, make_config, running

DAY = 86_400_000
T = 1_767_225_600_000  # 2026-01-01T00:00:00Z
COMMIT = commit_record("prod", Commit("g", "t", 3, 120, T - 5, 77, T))
CAUGHT_UP = probe_record("prod", "t", 3, ProbedLog(120, 121, None, None, T))  # only a marker between the two
UNREAD = probe_record("prod", "t", 3, ProbedLog(120, 190, 120, T - 60_000, T))


def test_a_commit_record_round_trips_through_its_json():
    assert decode(COMMIT.encode()) == COMMIT
    assert COMMIT.key() == b"prod/g"


def test_every_record_says_its_format_version_first_and_one_without_is_of_the_first():
    """The ingest's records (and the commits its compiled writer writes after the same head) say their version;
    those written before it did are version 1."""
    assert COMMIT.encode().startswith(b'{"v":%d,"kind":"commit",' % FORMAT_VERSION)
    assert commit_group_head("prod", "g").startswith(b'{"v":%d,' % FORMAT_VERSION)
    assert decode(COMMIT.encode().replace(b'"v":1,', b"")) == COMMIT


def test_a_probe_answer_round_trips_through_its_json_and_other_kinds_carry_none_of_its_columns():
    """A probe record holds the whole answer; the other kinds' records are the bytes they were before the kind (the
    ingest's compiled writer writes commits' without it), and records written before it read as ever."""
    for record in (CAUGHT_UP, UNREAD):
        assert decode(record.encode()) == record and record.key() == b"prod/t"
    assert tuple(CAUGHT_UP) == (KIND_PROBE, "prod", None, "t", 3, 120, None, None, T, 121, None, None)
    assert (UNREAD.unread_from, UNREAD.unread_ms) == (120, T - 60_000)
    assert all(f'"{name}"'.encode() not in COMMIT.encode() for name in PROBE_COLUMNS)
    assert COMMIT.encode() == (
        b'{"v":1,"kind":"commit","cluster":"prod","group":"g","topic":"t","partition":3,"offset":120,'
        b'"commit_timestamp":%d,"order":77,"observed_at":%d}' % (T - 5, T)
    )
    assert decode(COMMIT.encode()).log_end is None


def test_log_end_samples_are_keyed_by_topic():
    samples = list(broker_records("prod", {"t": {0: 10, 1: 12}}, T))

    assert [(s.kind, s.partition, s.offset, s.observed_at, s.group) for s in samples] == [
        (KIND_BROKER, 0, 10, T, None),
        (KIND_BROKER, 1, 12, T, None),
    ]
    assert samples[0].key() == b"prod/t"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (b"{", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"kind": "commit"}', "missing cluster, group"),
        (COMMIT._replace(offset=-1).encode(), "offset must be a non-negative integer"),
        (COMMIT._replace(group="").encode(), "group is empty"),
        (COMMIT._replace(kind="x").encode(), "kind must be one of commit, broker, log-start, .*, probe"),
        (CAUGHT_UP._replace(log_end=None).encode(), "log_end must be a non-negative integer"),
        (UNREAD._replace(unread_from=-1).encode(), "unread_from must be a non-negative integer"),
        (UNREAD._replace(unread_ms="soon").encode(), "unread_ms must be a non-negative integer"),
        # values no file column can hold: the archiver could not write them (and stopped at each restart)
        (
            COMMIT._replace(offset=2**63).encode(),
            r"offset must be a non-negative integer \(at most 9223372036854775807\)",
        ),
        (COMMIT._replace(partition=2**31).encode(), "partition must be"),
        (COMMIT._replace(observed_at=2**62).encode(), "observed_at must be"),  # no UTC date to file it under
        (COMMIT._replace(group="\ud800").encode(), "group is empty or not UTF-8 text"),
        (COMMIT._replace(kind=KIND_BROKER, group=7).encode(), "group must be UTF-8 text or null"),
        (COMMIT._replace(cluster="../../etc").encode(), "cluster must be a cluster's name"),  # names a directory
        (COMMIT._replace(cluster="prod\n").encode(), "cluster must be a cluster's name"),  # `$` allowed a last newline
        (b"[" * 100_000 + b"]" * 100_000, "not JSON: RecursionError"),
        # a format this lagwatch does not know, whatever the rest holds
        (COMMIT.encode().replace(b'"v":1', b'"v":2'), "format version 2 unknown"),
        (COMMIT.encode().replace(b'"v":1', b'"v":"1"'), 'format version "1" unknown'),
        (COMMIT.encode().replace(b'"v":1', b'"v":true'), "format version true unknown"),
    ],
)
def test_bad_records_say_what_is_wrong(value, problem):
    with pytest.raises(HistoryRecordInvalid, match=problem):
        decode(value)


def test_files_are_partitioned_by_cluster_and_date_and_written_whole(tmp_path):
    writer = HistoryFileWriter(str(tmp_path), flush_rows=3)
    records = [COMMIT, COMMIT._replace(observed_at=T + DAY), COMMIT._replace(cluster="test")]

    assert writer.add(records[:2]) is False
    assert writer.add(records[2:]) is True  # full: time to flush
    written = writer.flush()

    assert sorted(p.split(str(tmp_path))[1].rsplit("/", 1)[0] for p in written) == [
        "/cluster=prod/date=2026-01-01",
        "/cluster=prod/date=2026-01-02",
        "/cluster=test/date=2026-01-01",
    ]
    assert writer.buffered == 0 and writer.rows_written == 3
    assert not list(tmp_path.rglob("*.tmp"))
    table = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    assert sorted(table.column("cluster").to_pylist()) == ["prod", "prod", "test"]
    assert set(table.column("offset").to_pylist()) == {120}


def test_utc_dates():
    assert utc_date(T - 1) == "2025-12-31" and utc_date(T) == "2026-01-01"


async def test_the_archiver_writes_the_topic_to_files_and_skips_bad_records(kafka, redis_server, tmp_path):
    """Messages of one record and of several (one per line, as the ingest sends a group's commits); a bad record
    alone or among good ones is counted and skipped, its neighbours archived. The log probe's answers are archived
    whole, beside the commits in the same files."""
    kafka.create_topic("lagwatch.history", 2)
    config = make_config(
        kafka.bootstrap,
        redis_server.url,
        HISTORY__PATH=str(tmp_path),
        HISTORY__FLUSH_ROWS="40",  # the memory bound: files every 40 records
        HISTORY__FLUSH_INTERVAL="0.5",
        HISTORY__HTTP_PORT="0",
    )
    good = [commit_record(CLUSTER, Commit("g", "t", i % 4, i, T + i, i, T + i)) for i in range(100)]
    bad_before = RECORDS.labels(CLUSTER, "bad")._value.get()
    async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        for record in good[:50]:
            await producer.send("lagwatch.history", record.encode(), key=record.key())
        await producer.send("lagwatch.history", b"not a record", key=b"x")
        for start in range(50, 100, 10):  # ten records per message, one bad line among those of the first
            lines = [record.encode() for record in good[start : start + 10]]
            if start == 50:
                lines.insert(4, b'{"kind":"commit"}')
            await producer.send("lagwatch.history", b"\n".join(lines), key=good[start].key())
        probes = [record._replace(cluster=CLUSTER) for record in (CAUGHT_UP, UNREAD)]
        await producer.send("lagwatch.history", b"\n".join(p.encode() for p in probes), key=probes[0].key())

    archiver = Archiver(config, CLUSTER, http_port=0)
    async with running(archiver):
        await eventually(lambda: _archived(archiver, 102), timeout=30)

    assert RECORDS.labels(CLUSTER, "bad")._value.get() == bad_before + 2
    # memory bound: a flush comes once 40 are buffered, checked after each message (here at most ten records)
    rows_per_file = [pq.ParquetFile(f).metadata.num_rows for f in tmp_path.rglob("*.parquet")]
    assert len(rows_per_file) >= 2 and max(rows_per_file) < 50
    assert sorted(_offsets(tmp_path)) == list(range(100))
    assert _probes(tmp_path) == [(r.offset, r.log_end, r.unread_from, r.unread_ms, r.observed_at) for r in probes]

    # its position was committed with the files: a restarted archiver writes nothing twice
    again = Archiver(config, CLUSTER, http_port=0)
    async with running(again):
        await eventually(lambda: _assigned(again), timeout=30)
        await eventually(lambda: _idle_for(again), timeout=10)
    assert sorted(_offsets(tmp_path)) == list(range(100))


def _offsets(root) -> list[int]:
    """The commits' offsets archived under `root`."""
    table = ds.dataset(root, format="parquet", partitioning="hive").to_table(filter=ds.field("kind") == "commit")
    return table.column("offset").to_pylist()


def _probes(root) -> list[tuple]:
    """The probe answers archived under `root`, as (committed, log end, unread from, unread ms, probed at)."""
    table = ds.dataset(root, format="parquet", partitioning="hive").to_table(filter=ds.field("kind") == KIND_PROBE)
    rows = table.sort_by("log_end").to_pylist()
    return [(r["offset"], r["log_end"], r["unread_from"], r["unread_ms"], r["observed_at"]) for r in rows]


async def _archived(archiver: Archiver, n: int) -> bool:
    return archiver.writer.rows_written >= n and not archiver.positions


async def _assigned(archiver: Archiver) -> bool:
    return bool(archiver.consumer.assignment())


async def _idle_for(archiver: Archiver) -> bool:
    positions = [await archiver.consumer.position(tp) for tp in archiver.consumer.assignment()]
    return sum(positions) >= 57 and archiver.writer.rows_written == 0  # every message: 50 + 1 + 5 + 1


def test_history_record_fields_are_the_documented_columns():
    from lagwatch.shared.records.history import COLUMN_NAMES

    assert HistoryRecord._fields == COLUMN_NAMES


def _commit(group: str, partition: int, offset: int, offsets_partition: int = 0) -> tuple[bytes, bytes]:
    """(key, value) as the ingest adds a commit read from `offsets_partition`."""
    return commits_key("prod", offsets_partition), commit_record(
        "prod", Commit(group, "t", partition, offset, T, offset, T)
    ).encode()


def test_consecutive_commits_of_an_offsets_partition_share_a_message_and_each_partition_keeps_its_order():
    """Many groups' commits share a message; a group's are all read from one offsets partition, so they stay in
    order under one key."""
    messages = HistoryMessages()
    sent = [("a", 0, 1, 7), ("b", 1, 2, 7), ("c", 0, 3, 12), ("a", 0, 4, 7), ("b", 1, 5, 7)]
    for group, partition, offset, offsets_partition in sent:
        messages.add(*_commit(group, partition, offset, offsets_partition))
    messages.close()

    assert [key for key, _ in messages.messages] == [b"prod/offsets-7", b"prod/offsets-12", b"prod/offsets-7"]
    read = [decode(line) for _, message in messages.messages for line in records_of(message)]
    assert [(r.group, r.partition, r.offset) for r in read] == [s[:3] for s in sent]
    assert [len(records_of(m)) for _, m in messages.messages] == [2, 1, 2]


def test_a_message_takes_no_more_records_once_past_its_size():
    messages = HistoryMessages()
    per_message = MESSAGE_BYTES // (len(_commit("g", 0, 1000)[1]) + 1) + 1  # records of 1000 to 9999: one size
    offsets = range(1000, 1000 + 2 * per_message + 5)  # enough for two messages and a bit
    for offset in offsets:
        messages.add(*_commit("g", 0, offset))
    assert len(messages.messages) == 2  # the third is still open
    messages.close()

    sizes = [len(message) for _, message in messages.messages]
    assert len(sizes) == 3 and all(size < MESSAGE_BYTES + 200 for size in sizes)
    assert [decode(line).offset for _, m in messages.messages for line in records_of(m)] == list(offsets)
