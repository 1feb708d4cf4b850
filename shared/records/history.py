"""The history lagwatch keeps of what it ingested, for the Spark replay (`lagwatch.spark`).

Six kinds of normalized records, one flat shape so a file or a topic can hold them all:

| column            | commit                | broker (log-end) | log-start     | topic-deleted    | offset-deleted    |
| ----------------- | --------------------- | ---------------- | ------------- | ---------------- | ----------------- |
| `kind`            | `"commit"`            | `"broker"`       | `"log-start"` | `"topic-deleted"`| `"offset-deleted"`|
| `cluster`         | cluster name          | cluster name     | cluster name  | cluster name     | cluster name      |
| `group`           | consumer group        | null             | null          | null, or a group | consumer group    |
| `topic`           | topic                 | topic            | topic         | topic            | topic             |
| `partition`       | partition             | partition        | partition     | 0                | partition         |
| `offset`          | committed offset      | log-end offset   | log-start     | 0                | 0                 |
| `commit_timestamp`| commit timestamp      | null             | null          | null             | null              |
| `order`           | offset of the record  | null             | null          | null             | of the tombstone  |
| `observed_at`     | when lagwatch read it | when sampled     | when sampled  | when deleted     | when read         |

and `probe` (the log probe's answer): `group`, `commit_timestamp` and `order` null, `offset` the committed offset it
read from, `observed_at` when it probed, and three columns of its own (`PROBE_COLUMNS`, null in the other kinds):
`log_end` (the log end then), `unread_from` (the first record a `read_committed` consumer would receive, or null:
none before `log_end`) and `unread_ms` (that record's timestamp, or null).

Times are ms since the epoch; `order` is the commit record's offset in the offsets topic. A commit the ingest read
again after a history-topic outage (it had read it before, then could not archive it) is observed at its commit
time, or at the time it was read again if that is earlier. Log-start samples (every `topic-refresh`) let the replay
estimate retention risk as the evaluator does (`shared/statuses/retention.py`, from the log start's pace; the topics'
`retention.ms` is not in the history). A `topic-deleted` record says every partition of the topic left the windows,
as the live store drops them: with `group` null, the topic was deleted from Kafka (or re-created with fewer
partitions: the new ones come back with their samples and commits), for every group; with a group, it was deleted
from that group through the api (Burrow's `DELETE .../consumer/<group>/topic/<topic>`). An `offset-deleted` record
says the group's window of that partition went, on a tombstone of the offsets topic: the partition's offset deleted
or expired, or the whole group deleted (a record per partition it had, all at the group tombstone's `order`; not
when the tombstone was a protocol upgrade's, which keeps the windows). A `probe` record is the log probe's answer
for one (partition, committed offset) (`services/ingest/log_probe.py`, a `ProbedLog`): `unread_from` null says that
nothing a `read_committed` consumer would receive lies between the offset and `log_end` (transaction markers, aborted
records), so a group committed there is caught up while neither moves; the replay judges it so, as the live readers
do (`ProbedLog.caught_up_at`). Like samples, it is of the topic, for every group committed there.

On the history topic (`lagwatch.history`) each record is one JSON object with these keys and `"v"`, its format's
version (FORMAT_VERSION, written first; records from before it was written hold none and are of version 1); a
reader meeting another version rejects the record (`decode`: counted and skipped as any bad record), rather than
taking a format it does not know for its own. A new kind whose own columns are null in the other kinds extends the
format without a new version (`probe`, with `PROBE_COLUMNS`): a reader that does not know the kind rejects its records
by name and keeps reading the rest (a new version would have it reject every record, commits too, while its writers
are upgraded); records and files from before the kind lack those columns, read as null. A message holds one or more
records of one key, one per line (JSON Lines, in the order read; JSON never holds a raw newline inside a record).
Keys only place messages (the archiver ignores them) and keep what must stay in order in one partition: the ingest
keys commits by the offsets-topic partition it read them from (`commits_key`: `<cluster>/offsets-<p>`, which holds
every commit of its groups), so a message carries a batch's commits of one offsets partition, many groups (messages
per group would cost the ingest several times its throughput); samples, probe answers and deletions are keyed
`<cluster>/<topic>`.

In files, Parquet with `HISTORY_COLUMNS` (files from before the probe kind lack `PROBE_COLUMNS`), laid out
`<root>/cluster=<cluster>/date=<YYYY-MM-DD>/part-*.parquet` (UTC date of `observed_at`), which Spark reads as
partition columns.
"""

from __future__ import annotations

import json
import json.encoder
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, NamedTuple

from lagwatch.shared.protocol.types import CLUSTER_NAME, CLUSTER_NAME_RULE, Commit, ProbedLog

FORMAT_VERSION = 1  # of a record on the history topic: its key "v"
KIND_COMMIT = "commit"
KIND_BROKER = "broker"
KIND_LOG_START = "log-start"
KIND_TOPIC_DELETED = "topic-deleted"
KIND_OFFSET_DELETED = "offset-deleted"
KIND_PROBE = "probe"
KINDS = (KIND_COMMIT, KIND_BROKER, KIND_LOG_START, KIND_TOPIC_DELETED, KIND_OFFSET_DELETED, KIND_PROBE)
GROUP_KINDS = (KIND_COMMIT, KIND_OFFSET_DELETED)  # a group's own records: a group and an `order`, replayed in order
SAMPLE_KINDS = (KIND_BROKER, KIND_LOG_START, KIND_PROBE)  # what was read of a topic's partition: for all its groups

# (name, type) in file order; the types are Arrow / Spark SQL type names shared by the archiver and the job
HISTORY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("kind", "string"),
    ("cluster", "string"),
    ("group", "string"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "long"),
    ("commit_timestamp", "long"),
    ("order", "long"),
    ("observed_at", "long"),
    ("log_end", "long"),
    ("unread_from", "long"),
    ("unread_ms", "long"),
)
PROBE_COLUMNS = ("log_end", "unread_from", "unread_ms")  # a probe's own: null in other kinds, absent before them
_json_string = json.encoder.encode_basestring_ascii  # json.dumps' own string encoder
_SURROGATE = re.compile("[\ud800-\udfff]")
COLUMN_NAMES = tuple(name for name, _ in HISTORY_COLUMNS)
REQUIRED_COLUMNS = tuple(name for name in COLUMN_NAMES if name not in PROBE_COLUMNS)  # every record's and file's
INT_MAX, LONG_MAX = 2**31 - 1, 2**63 - 1
OBSERVED_AT_MAX = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: the last instant with a date to file it under
# (column, largest value) of the integer columns, in `check`'s order
_INTEGERS = (
    ("partition", INT_MAX),
    ("offset", LONG_MAX),
    ("observed_at", OBSERVED_AT_MAX),
    ("commit_timestamp", LONG_MAX),
    ("order", LONG_MAX),
    ("log_end", LONG_MAX),
    ("unread_from", LONG_MAX),
    ("unread_ms", LONG_MAX),
)


class HistoryRecord(NamedTuple):
    kind: str
    cluster: str
    group: str | None
    topic: str
    partition: int
    offset: int
    commit_timestamp: int | None
    order: int | None
    observed_at: int
    log_end: int | None = None
    unread_from: int | None = None
    unread_ms: int | None = None

    def key(self) -> bytes:
        """A key for a message of this record alone (samples are published so; the ingest keys its messages of
        commits by offsets partition, `commits_key`)."""
        return f"{self.cluster}/{self.group if self.kind == KIND_COMMIT else self.topic}".encode()

    def encode(self) -> bytes:
        """The record's JSON; a probe's columns only in a probe's record (the others' stay as before the kind, the
        bytes the ingest's compiled writer writes for commits)."""
        fields = self._asdict()
        if self.kind != KIND_PROBE:
            for name in PROBE_COLUMNS:
                del fields[name]
        return json.dumps({"v": FORMAT_VERSION, **fields}, separators=(",", ":")).encode()


class HistoryRecordInvalid(ValueError):
    pass


MESSAGE_BYTES = 128 * 1024  # a message takes no more records past this (Kafka refuses messages over 1 MB)


class HistoryMessages:
    """Records as history-topic messages: consecutive records of one key share a message, one per line, until it
    passes MESSAGE_BYTES. A key's messages keep the order of its records (`messages` is in the order they were
    closed, and one key goes to one partition). A batch reads an offsets partition's records in one run, so its
    commits of one offsets partition (`commits_key`) mostly make one message.

    The ingest's compiled pass notes its records in writers (`defer`) whose `encode` writes their messages later,
    off the pass's thread: `close` has them written, in order, before `messages` is read."""

    __slots__ = ("_deferred", "_key", "_open", "messages")

    def __init__(self) -> None:
        self.messages: list[tuple[bytes, bytes]] = []  # (key, records), closed
        self._key = b""  # the open message's key
        self._open = bytearray()
        self._deferred: list[Any] = []  # writers with records to encode (`encode(messages)`), in order

    def add(self, key: bytes, value: bytes) -> None:
        """One record (`commits_key` and a commit's value, or a sample's key and value)."""
        if self._deferred:
            self.close()
        if self._open and key == self._key and len(self._open) < MESSAGE_BYTES:
            self._open += b"\n"
            self._open += value
        else:
            self.close()
            self._key, self._open = key, bytearray(value)

    def add_commit(
        self, cluster: str, offsets_partition: int, group: str, topic: str, partition: int, *numbers: int
    ) -> None:
        """A commit as the ingest archives it, read from `offsets_partition`: `numbers` are its offset, timestamp,
        order and observed_at. The reference of the ingest's compiled writer (services/ingest/commit_pass.pyx), which
        writes the same bytes from the heads of `commit_group_head` and `commit_partition_head`."""
        commit = Commit(group, topic, partition, *numbers)
        self.add(commits_key(cluster, offsets_partition), commit_record(cluster, commit).encode())

    def defer(self, writer: Any) -> None:
        """Records noted by `writer` come next: `close` has `writer.encode(messages)` append their messages."""
        self._deferred.append(writer)

    def close(self) -> None:
        """Every message complete in `messages`: the open one (records added later begin a new one), then those of
        deferred writers, in order."""
        if self._open:
            self.messages.append((self._key, bytes(self._open)))
            self._open = bytearray()
        writers, self._deferred = self._deferred, []
        for writer in writers:
            writer.encode(self.messages)

    def __bool__(self) -> bool:
        return bool(self.messages or self._open or self._deferred)


def records_of(message: bytes) -> list[bytes]:
    """The records of a history-topic message (each for `decode`)."""
    return message.split(b"\n")


def commit_record(cluster: str, commit: Commit) -> HistoryRecord:
    return HistoryRecord(KIND_COMMIT, cluster, *commit)  # a Commit's fields are the record's from `group` on


def commits_key(cluster: str, offsets_partition: int) -> bytes:
    """The key of the ingest's messages of commits read from one offsets-topic partition: every commit of a group
    is in one such partition, so a group's records keep their order in one history partition."""
    return f"{cluster}/offsets-{int(offsets_partition)}".encode()


def commit_group_head(cluster: str, group: str) -> bytes:
    """The part of a commit's record that names its group: the value up to `"topic":` (for the ingest's compiled
    writer, which writes the numbers after it and `commit_partition_head`)."""
    kind = f'{{"v":{FORMAT_VERSION},"kind":"{KIND_COMMIT}",'
    return f'{kind}"cluster":{_json_string(cluster)},"group":{_json_string(group)},'.encode()


def commit_partition_head(topic_partition: tuple[str, int]) -> bytes:
    """The part of a commit's record value that names its partition, up to the offset's digits."""
    topic, partition = topic_partition
    return f'"topic":{_json_string(topic)},"partition":{int(partition)},"offset":'.encode()


def broker_records(
    cluster: str, by_topic: dict[str, dict[int, int]], sampled_at: int, kind: str = KIND_BROKER
) -> Iterator[HistoryRecord]:
    """A poll's samples: log ends (`KIND_BROKER`) or log starts (`KIND_LOG_START`)."""
    for topic, offsets in by_topic.items():
        for partition, offset in offsets.items():
            yield HistoryRecord(kind, cluster, None, topic, partition, offset, None, None, sampled_at)


def topic_deleted_record(cluster: str, topic: str, deleted_at: int, group: str | None = None) -> HistoryRecord:
    """A topic gone from every group's windows (`group` None: deleted from Kafka) or from one group's (the api)."""
    return HistoryRecord(KIND_TOPIC_DELETED, cluster, group, topic, 0, 0, None, None, deleted_at)


def offset_deleted_record(
    cluster: str, group: str, topic: str, partition: int, order: int, observed_at: int
) -> HistoryRecord:
    """A group's window of a partition gone on an offsets-topic tombstone at `order`."""
    return HistoryRecord(KIND_OFFSET_DELETED, cluster, group, topic, partition, 0, None, order, observed_at)


def probe_record(cluster: str, topic: str, partition: int, answer: ProbedLog) -> HistoryRecord:
    """The log probe's answer for a partition (`ProbedLog`), observed when it probed."""
    return HistoryRecord(
        KIND_PROBE,
        cluster,
        None,
        topic,
        partition,
        answer.committed,
        None,
        None,
        answer.probed_at,
        answer.log_end,
        answer.unread_from,
        answer.unread_ms,
    )


def decode(value: bytes) -> HistoryRecord:
    """A record from the history topic; HistoryRecordInvalid names what is wrong (a format version other than
    FORMAT_VERSION too)."""
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError) as exc:  # RecursionError: arrays nested thousands deep
        raise HistoryRecordInvalid(f"not JSON: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(doc, dict):
        raise HistoryRecordInvalid("not a JSON object")
    version = doc.get("v", 1)
    if type(version) is not int or version != FORMAT_VERSION:
        raise HistoryRecordInvalid(
            f"format version {json.dumps(version)[:20]} unknown (this lagwatch reads {FORMAT_VERSION})"
        )
    missing = [name for name in REQUIRED_COLUMNS if name not in doc]
    if missing:
        raise HistoryRecordInvalid(f"missing {', '.join(missing)}")
    values: list[Any] = [doc.get(name) for name in COLUMN_NAMES]  # a probe's own columns absent: null
    record = HistoryRecord(*values)
    problem = check(record)
    if problem:
        raise HistoryRecordInvalid(problem)
    return record


def check(record: HistoryRecord) -> str | None:
    """Why a record cannot be archived and replayed, or None. The Spark job applies the same checks to its input
    columns. Every value must also fit its file column (`HISTORY_COLUMNS`) and `observed_at` a calendar date: a
    record the archiver could not write would otherwise stop it at every restart."""
    if record.kind not in KINDS:
        return f"kind must be one of {', '.join(KINDS)}"
    if not isinstance(record.cluster, str) or not CLUSTER_NAME.match(record.cluster):
        return f"cluster must be a cluster's name ({CLUSTER_NAME_RULE})"  # it names a directory
    if not _text(record.topic):
        return "topic is empty or not UTF-8 text"
    of_group = record.kind in GROUP_KINDS
    if not (_text(record.group) if of_group else record.group is None or _text(record.group)):
        return "group is empty or not UTF-8 text" if of_group else "group must be UTF-8 text or null"
    for name, ceiling in _INTEGERS:
        value = getattr(record, name)
        if value is None and name in _nullable(record.kind):
            continue
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= ceiling:
            return f"{name} must be a non-negative integer (at most {ceiling})"
    return None


def _nullable(kind: str) -> tuple[str, ...]:
    """The integer columns a record of `kind` may leave null."""
    if kind == KIND_COMMIT:
        return PROBE_COLUMNS
    if kind in GROUP_KINDS:
        return ("commit_timestamp", *PROBE_COLUMNS)
    if kind == KIND_PROBE:
        return ("commit_timestamp", "order", "unread_from", "unread_ms")
    return ("commit_timestamp", "order", *PROBE_COLUMNS)


def _text(value: object) -> bool:
    """A non-empty string that UTF-8 can hold (JSON's escapes can spell lone surrogates, which it cannot)."""
    return isinstance(value, str) and value != "" and _SURROGATE.search(value) is None


def utc_date(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d")


def as_columns(records: Iterable[HistoryRecord]) -> dict[str, list[Any]]:
    """Records as column lists (what Arrow and pandas build tables from)."""
    columns: dict[str, list[Any]] = {name: [] for name in COLUMN_NAMES}
    appenders = [columns[name].append for name in COLUMN_NAMES]
    for record in records:
        for append, value in zip(appenders, record, strict=True):
            append(value)
    return columns
