"""Reading history into Spark: Parquet or JSON-lines files (the archiver's layout or any directory of them), or the
history topic through the spark-sql-kafka connector when it is on the classpath. Every row is checked as
`shared/records/history.py` checks a record; bad rows are counted by reason and skipped, never fatal."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path

from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.utils import AnalysisException

from lagwatch.shared.records.history import (
    FORMAT_VERSION,
    GROUP_KINDS,
    HISTORY_COLUMNS,
    KIND_COMMIT,
    KIND_PROBE,
    KINDS,
    OBSERVED_AT_MAX,
    REQUIRED_COLUMNS,
)
from lagwatch.shared.runtime.config import Config, ConfigError
from lagwatch.shared.runtime.kafka_client import java_client_options
from lagwatch.spark.spark_types import ddl

FORMATS = ("auto", "parquet", "json", "kafka")
FUTURE_TOLERANCE_MS = 3_600_000  # how far ahead of the job's clock a host's clock may run (`--future-tolerance`)
KAFKA_PREFIX = "kafka://"  # kafka://<bootstrap servers or a configured cluster's name>/<topic>
# a directory (or file) inside the archiver's layout: <root>/cluster=<name>[/date=<day>][/<file>.parquet]
_INSIDE_LAYOUT = re.compile(r"^(?P<root>.*?)/?cluster=[^/]+(?:/date=[^/]+)?(?:/[^/]+\.parquet)?/?$")


class InputError(ValueError):
    """The input cannot be read at all (missing path, wrong format, missing columns)."""


@dataclass(frozen=True)
class HistorySource:
    location: str  # a path (local, or any Hadoop-compatible URI) or kafka://servers/topic
    format: str = "auto"

    def check(self) -> None:
        """What can be checked before Spark starts: the format, and that a local path exists."""
        fmt = self.resolved_format()
        if fmt not in FORMATS:
            raise InputError(f"unknown input format {fmt!r} (use {', '.join(FORMATS)})")
        if fmt == "kafka" or "://" in self.location:
            return
        path = Path(self.location)
        if not path.exists():
            raise InputError(f"input path {self.location} does not exist")
        if path.is_dir() and not _has_data_file(path):
            raise InputError(f"input path {self.location} holds no history files (Parquet or JSON lines)")

    def resolved_format(self) -> str:
        if self.location.startswith(KAFKA_PREFIX):
            return "kafka"
        if self.format != "auto":
            return self.format
        path = Path(self.location)
        if path.is_file():
            return "json" if path.suffix in (".json", ".jsonl", ".ndjson") else "parquet"
        if path.is_dir() and not any(path.rglob("*.parquet")) and any(path.rglob("*.json*")):
            return "json"
        return "parquet"


def _has_data_file(directory: Path) -> bool:
    """Whether Spark would read a file under `directory` (it skips names starting with "." or "_", and all below)."""
    for path in directory.rglob("*"):
        if path.is_file() and not any(part.startswith((".", "_")) for part in path.relative_to(directory).parts):
            return True
    return False


def history_schema(*, widen: bool = False) -> str:
    return ddl((name, "long" if widen and kind == "int" else kind) for name, kind in HISTORY_COLUMNS)


def _check_columns(columns: list[str], location: str) -> None:
    """Every column but the probe's (files from before the probe kind lack them: read as null)."""
    missing = [name for name in REQUIRED_COLUMNS if name not in columns]
    if missing:
        raise InputError(
            f"history at {location} lacks column(s) {', '.join(missing)}; "
            f"expected {', '.join(REQUIRED_COLUMNS)} (see shared/records/history.py)"
        )


def kafka_options(location: str, config: Config | None) -> dict[str, str]:
    """The Java client's connection for a kafka:// location: a configured cluster's (bootstrap servers, TLS and
    SASL login) when the location names the cluster or its servers; else the servers in plain text."""
    servers = location[len(KAFKA_PREFIX) :].partition("/")[0]
    for name, cluster in (config.clusters if config else {}).items():
        if servers in (name, ",".join(cluster.bootstrap_servers)):
            try:
                return java_client_options(cluster, name)
            except ConfigError as exc:
                raise InputError(str(exc)) from None
    return {"bootstrap.servers": servers}


def read_history(spark: SparkSession, source: HistorySource, config: Config | None = None) -> DataFrame:
    source.check()
    fmt = source.resolved_format()
    if fmt == "kafka":
        return _read_kafka(spark, source.location, kafka_options(source.location, config))
    try:
        if fmt == "json":
            frame = spark.read.schema(history_schema()).option("mode", "PERMISSIVE").json(source.location)
        else:
            _check_columns(_parquet_columns(spark, source.location), source.location)
            # integers read as long: files from other writers may hold int64 partitions or int32 offsets
            frame = _parquet_reader(spark, source.location).schema(history_schema(widen=True)).parquet(source.location)
    except (AnalysisException, Py4JJavaError) as exc:  # Py4JJavaError: not Parquet, unreadable, ...
        raise InputError(f"cannot read {fmt} history at {source.location}: {_first_line(exc)}") from None
    # try_cast: an int64 partition past int32 is a bad row (a cast would fail the job: Spark's ANSI mode)
    return frame.select(*(F.col(name).try_cast(kind).alias(name) for name, kind in HISTORY_COLUMNS))


def _parquet_reader(spark: SparkSession, location: str) -> DataFrameReader:
    """A reader that takes `cluster` (and `date`) from the path also when `location` is inside the archiver's
    layout (one cluster's or one day's directory), as it does from the root."""
    inside = _INSIDE_LAYOUT.match(location)
    return spark.read.option("basePath", inside["root"] or ".") if inside else spark.read


def _parquet_columns(spark: SparkSession, location: str) -> list[str]:
    """The columns of the files' schema: one file's footer, or all of theirs merged when that one lacks some (files
    of an older layout beside newer ones: their rows then lack a value, and are counted bad, not the whole input)."""
    columns = _parquet_reader(spark, location).parquet(location).columns
    if any(name not in columns for name in REQUIRED_COLUMNS):
        with contextlib.suppress(Py4JJavaError):  # types that do not merge (int32 and int64): one file's answer
            columns = _parquet_reader(spark, location).option("mergeSchema", "true").parquet(location).columns
    return columns


def _read_kafka(spark: SparkSession, location: str, connection: dict[str, str]) -> DataFrame:
    servers, _, topic = location[len(KAFKA_PREFIX) :].partition("/")
    if not servers or not topic:
        raise InputError(f"a Kafka source is kafka://<bootstrap servers or cluster name>/<topic>, not {location}")
    try:
        raw = (
            spark.read.format("kafka")
            .options(**{f"kafka.{key}": value for key, value in connection.items()})
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
        )
    except Exception as exc:
        if "kafka" in str(exc).lower() and "data source" in str(exc).lower():
            raise InputError(
                "reading history from Kafka needs the spark-sql-kafka connector on the classpath "
                "(spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>); "
                "or read the archiver's Parquet files instead"
            ) from None
        raise
    return history_of_messages(raw)


def history_of_messages(raw: DataFrame) -> DataFrame:
    """History rows from history-topic messages (a `value` column): one or more JSON records per message, one per
    line (shared/records/history.py)."""
    lines = raw.select(F.explode(F.split(F.col("value").cast("string"), "\n")).alias("line"))
    parsed = lines.select(F.from_json("line", history_schema()).alias("r"), _format_version("line").alias("v"))
    known = F.col("v") == F.lit(FORMAT_VERSION)
    return (
        parsed.select("r.*", "v")
        .withColumn("kind", F.when(known, F.col("kind")).otherwise(F.lit(OF_UNKNOWN_VERSION)))
        .drop("v")
    )


# A record of a format this job does not know: its fields may not mean what the replay thinks (`bad_row_reason`).
OF_UNKNOWN_VERSION = "(unknown format version)"


def _format_version(line: str) -> Column:
    """A record's "v" (history.py; a record without one is of version 1); not an integer: -1, no version known."""
    text = F.get_json_object(F.col(line), "$.v")
    return F.when(text.isNull(), F.lit(1)).otherwise(
        F.when(text.rlike(r"^[0-9]{1,9}$"), text.cast("int")).otherwise(F.lit(-1))
    )


def _first_line(exc: Exception) -> str:
    java = getattr(exc, "java_exception", None)  # Py4JJavaError's own first line names only the Java call
    text = (java.getMessage() or "") if java is not None else str(exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def _non_negative(name: str) -> Column:
    return F.col(name).isNull() | (F.col(name) < 0)


def bad_row_reason(now_ms: int, future_tolerance_ms: int = FUTURE_TOLERANCE_MS) -> Column:
    """Why a row cannot be replayed (a short reason), or null for a good row. `now_ms`: the job's clock. A row
    observed past it by more than `future_tolerance_ms` comes from a host whose clock ran ahead: the end of a
    cluster's history is its latest row, and one row in, say, 2099 would have every group evaluated until then.
    (NTP keeps hosts within milliseconds; a job run where the clock is behind the history's, on a copy of it say,
    takes a larger tolerance.)"""
    is_commit, of_group = F.col("kind") == KIND_COMMIT, F.col("kind").isin(*GROUP_KINDS)
    is_probe = F.col("kind") == KIND_PROBE
    return (
        F.when(F.col("kind") == F.lit(OF_UNKNOWN_VERSION), F.lit("unknown format version"))
        .when(F.col("kind").isNull() | ~F.col("kind").isin(*KINDS), F.lit("unknown kind"))
        .when(F.col("cluster").isNull() | (F.col("cluster") == ""), F.lit("no cluster"))
        .when(F.col("topic").isNull() | (F.col("topic") == ""), F.lit("no topic"))
        .when(_non_negative("partition"), F.lit("bad partition"))
        .when(_non_negative("offset"), F.lit("bad offset"))
        .when(_non_negative("observed_at") | (F.col("observed_at") > OBSERVED_AT_MAX), F.lit("bad observed_at"))
        .when(F.col("observed_at") > now_ms + future_tolerance_ms, F.lit("observed_at in the future"))
        .when(of_group & (F.col("group").isNull() | (F.col("group") == "")), F.lit("no group"))
        .when(is_commit & _non_negative("commit_timestamp"), F.lit("bad commit_timestamp"))
        .when(of_group & _non_negative("order"), F.lit("bad order"))
        .when(is_probe & _non_negative("log_end"), F.lit("bad log_end"))
        .when(is_probe & _negative("unread_from"), F.lit("bad unread_from"))
        .when(is_probe & _negative("unread_ms"), F.lit("bad unread_ms"))
    )


def _negative(name: str) -> Column:
    """Below 0 (null is not: a nullable column's)."""
    return F.col(name).isNotNull() & (F.col(name) < 0)
