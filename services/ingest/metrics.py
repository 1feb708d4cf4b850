"""The ingest's Prometheus metrics (this process). Its running totals in Redis, which the api reads, are a contract
between the two: `shared/windows/ingest_totals.py`."""

from __future__ import annotations

from collections import Counter as Tally

from prometheus_client import Counter, Gauge, Histogram

RECORDS = Counter("lagwatch_ingest_records_total", "Records read from the offsets topic", ["cluster"])
DECODE_ERRORS = Counter(
    "lagwatch_ingest_decode_errors_total", "Offsets-topic records that could not be decoded", ["cluster", "type"]
)
SKIPPED = Counter(
    "lagwatch_ingest_skipped_records_total",
    "Records skipped on purpose (other record types, tombstones, filtered groups)",
    ["cluster", "reason"],
)
COMMITS = Counter(
    "lagwatch_ingest_commits_total", "Offset commits by what the window store did with them", ["cluster", "outcome"]
)
BATCH_SECONDS = Histogram(
    "lagwatch_ingest_batch_seconds",
    "Time to decode and store one batch",
    ["cluster"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
COMMIT_DELAY = Histogram(
    "lagwatch_ingest_commit_delay_seconds",
    "Each batch's largest delay from a commit to its windows stored, commit times taken to lagwatch's clock by "
    "lagwatch_commit_clock_offset_seconds",
    ["cluster"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)
CLOCK_OFFSET = Gauge(
    "lagwatch_commit_clock_offset_seconds",
    "How far the commit timestamps of an offsets-topic partition (its leader's clock: the coordinator of its groups) "
    "are behind lagwatch's clock, negative ahead; absent in admin mode, whose commits the poller stamps itself",
    ["cluster", "partition"],
)
HISTORY_BROKEN = Gauge(
    "lagwatch_ingest_history_broken",
    "1 while the history topic does not take the ingest's commits: windows go on, the offsets-topic position waits",
    ["cluster"],
)
PROBES = Counter("lagwatch_ingest_log_probes_total", "Partitions read by the log probe", ["cluster"])
PROBE_FAILURES = Counter(
    "lagwatch_ingest_log_probe_failures_total",
    "Log probes without an answer, by why (the offsets' answer stands)",
    ["cluster", "reason"],
)
HISTORY_REWINDS = Counter(
    "lagwatch_ingest_history_rewinds_total",
    "Times the ingest read its partitions again to archive the commits of a history-topic outage",
    ["cluster"],
)
KAFKA_REPLACED = Counter(
    "lagwatch_ingest_kafka_replaced_total",
    "Times this worker found another Kafka cluster (another cluster id) behind the cluster name and forgot the old "
    "one's windows and topics",
    ["cluster"],
)
RETRIES = Counter("lagwatch_ingest_retries_total", "Batches retried after a Redis or Kafka failure", ["cluster"])


def observe(cluster: str, tally: Tally[str]) -> None:
    """Feed one batch's tally to the Prometheus counters."""
    for name, n in tally.items():
        kind, _, detail = name.partition(":")
        if kind == "records":
            RECORDS.labels(cluster).inc(n)
        elif kind == "decode_error":
            DECODE_ERRORS.labels(cluster, detail).inc(n)
        elif kind == "outcome":
            COMMITS.labels(cluster, detail).inc(n)
        elif kind == "redis_retries":
            RETRIES.labels(cluster).inc(n)
        elif kind != "batches":
            SKIPPED.labels(cluster, detail or kind).inc(n)
