"""Reading history into Spark: Parquet or JSON-lines files (the archiver's layout or any directory of them), or the
history topic through the spark-sql-kafka connector when it is on the classpath. Every row is checked as
`shared/domain/history.py` checks a record; bad rows are counted by reason and skipped, never fatal."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType
from pyspark.sql.utils import AnalysisException

from lagwatch.shared.config import Config, ConfigError
from lagwatch.shared.domain.history import COLUMN_NAMES, HISTORY_COLUMNS, KIND_COMMIT, KINDS
from lagwatch.shared.kafka.kafka_client import java_client_options
from lagwatch.spark.spark_types import spark_type

FORMATS = ("auto", "parquet", "json", "kafka")
KAFKA_PREFIX = "kafka://"  # kafka://<bootstrap servers or a configured cluster's name>/<topic>


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
        if fmt != "kafka" and "://" not in self.location and not Path(self.location).exists():
            raise InputError(f"input path {self.location} does not exist")

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


def history_schema(*, widen: bool = False) -> StructType:
    return StructType(
        [
            StructField(name, spark_type("long" if widen and kind == "int" else kind), True)
            for name, kind in HISTORY_COLUMNS
        ]
    )


def _check_columns(columns: list[str], location: str) -> None:
    missing = [name for name in COLUMN_NAMES if name not in columns]
    if missing:
        raise InputError(
            f"history at {location} lacks column(s) {', '.join(missing)}; "
            f"expected {', '.join(COLUMN_NAMES)} (see shared/domain/history.py)"
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
            _check_columns(spark.read.parquet(source.location).columns, source.location)  # one file's footer
            # integers read as long: files from other writers may hold int64 partitions or int32 offsets
            frame = spark.read.schema(history_schema(widen=True)).parquet(source.location)
    except AnalysisException as exc:
        raise InputError(f"cannot read {fmt} history at {source.location}: {_first_line(exc)}") from None
    return frame.select(*(F.col(name).cast(spark_type(kind)).alias(name) for name, kind in HISTORY_COLUMNS))


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
    line (shared/domain/history.py)."""
    lines = raw.select(F.explode(F.split(F.col("value").cast("string"), "\n")).alias("line"))
    return lines.select(F.from_json("line", history_schema()).alias("r")).select("r.*")


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _non_negative(name: str) -> Column:
    return F.col(name).isNull() | (F.col(name) < 0)


def bad_row_reason() -> Column:
    """Why a row cannot be replayed (a short reason), or null for a good row."""
    is_commit = F.col("kind") == KIND_COMMIT
    return (
        F.when(F.col("kind").isNull() | ~F.col("kind").isin(*KINDS), F.lit("unknown kind"))
        .when(F.col("cluster").isNull() | (F.col("cluster") == ""), F.lit("no cluster"))
        .when(F.col("topic").isNull() | (F.col("topic") == ""), F.lit("no topic"))
        .when(_non_negative("partition"), F.lit("bad partition"))
        .when(_non_negative("offset"), F.lit("bad offset"))
        .when(_non_negative("observed_at"), F.lit("bad observed_at"))
        .when(is_commit & (F.col("group").isNull() | (F.col("group") == "")), F.lit("no group"))
        .when(is_commit & _non_negative("commit_timestamp"), F.lit("bad commit_timestamp"))
        .when(is_commit & _non_negative("order"), F.lit("bad order"))
    )
