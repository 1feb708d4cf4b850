"""`GET /metrics`: Prometheus text with Burrow's metric names, read from Redis on every scrape, plus lagwatch's own.

Burrow (exporter style), statuses numbered as Burrow does (NOTFOUND 0, OK 1, WARN 2, ERR 3, STOP 4, STALL 5,
REWIND 6)::

    burrow_kafka_consumer_status{cluster,consumer_group}              group status
    burrow_kafka_consumer_lag_total{cluster,consumer_group}           sum of the partitions' current lag
    burrow_kafka_consumer_max_lag{cluster,consumer_group}             the largest partition lag
    burrow_kafka_consumer_partition_lag{cluster,consumer_group,topic,partition}
    burrow_kafka_consumer_partition_current_offset{...}               newest committed offset
    burrow_kafka_consumer_partition_status{...}                       partition status
    burrow_kafka_topic_partition_offset{cluster,topic,partition}      latest log-end offset

lagwatch's counters come from the running totals the ingest and the evaluator keep in Redis (`lw:c:{c}:stats`,
`lw:c:{c}:evaluator`), so one scrape of the api shows every worker's work; `lagwatch_api_request_seconds` is this
process's own request histogram.

Scrape cost: per cluster, one ZRANGE for the group names, then `get_groups` in chunks of `GROUPS_PER_CHUNK` (two
pipelined round trips per chunk), the rules for every partition, one pipeline for the topics, two HGETALLs for the
counters. It is all proportional to partitions: 10k groups x 10 partitions (bench/bench_api.py, 2 CPUs) take
~9.5 s and ~37 MiB of text (~340k samples), about half of it fetching and unpacking the windows (redis-py's
pure-Python reply parser, 1M window entries), a tenth the rules, the rest building and rendering samples. At that
size give Prometheus a `scrape_timeout` above its 10 s default. The scrape runs in a worker process
(`scrape_process.py`), so requests served meanwhile stay fast, and scrapes are serialized (a second scraper waits
for the first one's answer instead of doubling the load).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from redis.asyncio import Redis

from lagwatch.services.api import statuses
from lagwatch.services.api.context import now_ms
from lagwatch.services.api.scrape_process import ScrapeWorker
from lagwatch.services.ingest.metrics import read_totals
from lagwatch.shared.config import Config
from lagwatch.shared.protocol import GroupStatus
from lagwatch.shared.redis_client import connect
from lagwatch.shared.store import keys
from lagwatch.shared.store.redis_store import WindowStore
from lagwatch.shared.time_lag import TimeLag, worst

GROUPS_PER_CHUNK = 500  # groups fetched per get_groups call: big pipelines, bounded memory per step
GROUP = ["cluster", "consumer_group"]
PARTITION = ["cluster", "consumer_group", "topic", "partition"]
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Scrape:
    """The metric families of one scrape, filled cluster by cluster."""

    def __init__(self) -> None:
        g, c = GaugeMetricFamily, CounterMetricFamily
        self.status = g("burrow_kafka_consumer_status", "Consumer group status (Burrow's numbering)", labels=GROUP)
        self.lag_total = g("burrow_kafka_consumer_lag_total", "Sum of the group's partition lags", labels=GROUP)
        self.max_lag = g("burrow_kafka_consumer_max_lag", "The group's largest partition lag", labels=GROUP)
        self.partition_lag = g("burrow_kafka_consumer_partition_lag", "Partition's current lag", labels=PARTITION)
        self.partition_offset = g(
            "burrow_kafka_consumer_partition_current_offset", "Partition's newest committed offset", labels=PARTITION
        )
        self.partition_status = g(
            "burrow_kafka_consumer_partition_status", "Partition status (Burrow's numbering)", labels=PARTITION
        )
        self.topic_offset = g(
            "burrow_kafka_topic_partition_offset", "Latest log-end offset", labels=["cluster", "topic", "partition"]
        )
        self.rebalances = g("lagwatch_group_rebalances_last_hour", "Generations started in the last hour", labels=GROUP)
        self.lag_seconds = g(
            "lagwatch_consumer_lag_seconds",
            "How long ago the log end passed the newest committed offset (a lower bound when history is short)",
            labels=PARTITION,
        )
        self.max_lag_seconds = g(
            "lagwatch_consumer_group_max_lag_seconds", "The group's largest lag in seconds", labels=GROUP
        )
        self.records = c("lagwatch_ingest_records", "Records read from the offsets topic", labels=["cluster"])
        self.batches = c("lagwatch_ingest_batches", "Batches stored by the ingest", labels=["cluster"])
        self.decode_errors = c(
            "lagwatch_ingest_decode_errors", "Records that could not be decoded", labels=["cluster", "type"]
        )
        self.skipped = c("lagwatch_ingest_skipped_records", "Records skipped on purpose", labels=["cluster", "reason"])
        self.commits = c(
            "lagwatch_ingest_commits", "Offset commits by what the window store did", labels=["cluster", "outcome"]
        )
        self.retries = c("lagwatch_ingest_retries", "Ingest batches retried after a failure", labels=["cluster"])
        self.events = c("lagwatch_events_published", "Status-change events acknowledged by Kafka", labels=["cluster"])
        self.transitions = c("lagwatch_status_transitions", "Status changes recorded", labels=["cluster"])
        self.evaluations = c("lagwatch_evaluations", "Group evaluations", labels=["cluster", "trigger"])
        self.evaluation_seconds = c("lagwatch_evaluation_seconds", "Time spent evaluating groups", labels=["cluster"])
        self.sweeps = c("lagwatch_evaluator_sweeps", "Evaluator sweeps completed", labels=["cluster"])

    def families(self) -> list[Metric]:
        return [m for m in vars(self).values() if isinstance(m, Metric)]

    def add_group(
        self, cluster: str, status: GroupStatus, rebalances: int, lags: Mapping[tuple[str, int], TimeLag | None]
    ) -> None:
        labels = [cluster, status.group]
        slowest = worst(lags.values())
        if slowest is not None:
            self.max_lag_seconds.add_metric(labels, slowest.seconds)
        for (topic, partition), lag in sorted(lags.items()):
            if lag is not None:
                self.lag_seconds.add_metric([*labels, topic, str(partition)], lag.seconds)
        self.status.add_metric(labels, int(status.status))
        self.lag_total.add_metric(labels, status.totallag)
        self.max_lag.add_metric(labels, status.maxlag.current_lag if status.maxlag else 0)
        self.rebalances.add_metric(labels, rebalances)
        for p in status.partitions:
            part = [*labels, p.topic, str(p.partition)]
            self.partition_lag.add_metric(part, p.current_lag)
            self.partition_status.add_metric(part, int(p.status))
            if p.end is not None:
                self.partition_offset.add_metric(part, p.end.offset)

    def add_topic_offsets(self, cluster: str, rings: Mapping[tuple[str, int], list[int]]) -> None:
        for (topic, partition), ring in sorted(rings.items()):
            if ring:
                self.topic_offset.add_metric([cluster, topic, str(partition)], ring[-1])

    def add_ingest_totals(self, cluster: str, totals: Mapping[str, int]) -> None:
        """Field names as `services/ingest/metrics.py` writes them, labelled as its own counters are."""
        for name, n in totals.items():
            kind, _, detail = name.partition(":")
            if kind == "records":
                self.records.add_metric([cluster], n)
            elif kind == "batches":
                self.batches.add_metric([cluster], n)
            elif kind == "decode_error":
                self.decode_errors.add_metric([cluster, detail], n)
            elif kind == "outcome":
                self.commits.add_metric([cluster, detail], n)
            elif kind == "redis_retries":
                self.retries.add_metric([cluster], n)
            else:
                self.skipped.add_metric([cluster, detail or kind], n)

    def add_evaluator_totals(self, cluster: str, totals: Mapping[str, float]) -> None:
        for name, n in totals.items():
            kind, _, trigger = name.partition(":")
            if kind == "evaluations":
                self.evaluations.add_metric([cluster, trigger], n)
            elif kind == "transitions":
                self.transitions.add_metric([cluster], n)
            elif kind == "events_published":
                self.events.add_metric([cluster], n)
            elif kind == "evaluation_seconds":
                self.evaluation_seconds.add_metric([cluster], n)
            elif kind == "sweeps":
                self.sweeps.add_metric([cluster], n)


class WindowCollector(Collector):
    """Reads Redis in `refresh()` (async); `collect()` hands the last refresh to prometheus_client (sync)."""

    def __init__(self, config: Config, redis: Redis) -> None:
        self.config = config
        self.redis = redis
        self.store = WindowStore(redis, config.window())
        self._families: list[Metric] = []

    def describe(self) -> Iterable[Metric]:
        return []  # names vary by scrape; nothing to check at registration

    def collect(self) -> Iterable[Metric]:
        return list(self._families)

    async def refresh(self) -> None:
        scrape = Scrape()
        now = now_ms()
        for cluster in sorted(set(self.config.clusters) | set(await self.store.list_clusters())):
            await self._groups(scrape, cluster, now)
            await self._topics(scrape, cluster)
            await self._counters(scrape, cluster)
        self._families = scrape.families()

    async def _groups(self, scrape: Scrape, cluster: str, now: int) -> None:
        names = await self.store.list_groups(cluster)
        for i in range(0, len(names), GROUPS_PER_CHUNK):
            for stored in await self.store.get_groups(cluster, names[i : i + GROUPS_PER_CHUNK], now):
                if stored is not None and statuses.is_live(stored, now, self.config):
                    status = statuses.evaluate(stored, now, self.config)
                    scrape.add_group(cluster, status, stored.rebalances_last_hour, stored.time_lags(now))

    async def _topics(self, scrape: Scrape, cluster: str) -> None:
        counts = await self.store.list_topics(cluster)
        rings = await self.store.broker_rings(cluster, [(t, p) for t, n in counts.items() for p in range(n)])
        scrape.add_topic_offsets(cluster, rings)

    async def _counters(self, scrape: Scrape, cluster: str) -> None:
        scrape.add_ingest_totals(cluster, await read_totals(self.redis, cluster))
        raw = await self.redis.hgetall(keys.evaluator_stats(cluster))
        scrape.add_evaluator_totals(cluster, {k.decode(): float(v) for k, v in raw.items()})


async def scrape_windows(config: Config) -> bytes:
    """One scrape of everything in Redis, rendered: the collector in its own registry, on its own connection."""
    redis = connect(config.redis)
    try:
        collector = WindowCollector(config, redis)
        registry = CollectorRegistry()
        registry.register(collector)
        await collector.refresh()
        return generate_latest(registry)
    finally:
        await redis.aclose()


class ApiMetrics:
    """This process's request histogram, plus the Redis scrape (done by a worker process, see `scrape_process`)."""

    def __init__(self, config: Config) -> None:
        self.registry = CollectorRegistry()
        self.request_seconds = Histogram(
            "lagwatch_api_request_seconds",
            "Time to answer an api request, by route template",
            ["route", "method"],
            buckets=REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.worker = ScrapeWorker(config)
        self._scrape_lock = asyncio.Lock()

    async def render(self) -> bytes:
        async with self._scrape_lock:  # one scrape at a time: a second scraper waits instead of doubling the load
            windows = await self.worker.scrape()
        return windows + generate_latest(self.registry)

    async def close(self) -> None:
        await self.worker.close()


METRICS = web.AppKey("lagwatch_api_metrics", ApiMetrics)


async def handle_metrics(request: web.Request) -> web.Response:
    body = await request.app[METRICS].render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
