"""Which Kafka cluster a cluster name stands for: a cluster replaced under the same name is noticed, and what lagwatch
kept of the old one is forgotten.

Kafka gives every cluster an id (Metadata's `ClusterId`, new only when the cluster is created anew); the ingest
records it in Redis (`keys.kafka_id`). Another id means the cluster was replaced under the name: its offsets differ,
so none of its commits can continue the windows (each would look older than what a window holds and be dropped, and
every group would drift to STOP). Burrow, restarted, starts empty; lagwatch keeps its windows, so it has to notice.

The first worker to see the new id takes a lease, forgets the cluster's data (`forget`), then records the id; other
workers starting meanwhile wait for it. A running worker starts over (`IngestWorker.kafka_replaced`) on the same new
id in two looks in a row. Brokers that give no id, or another one at each request, are not checked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from lagwatch.services.ingest import metrics
from lagwatch.services.ingest.leases import CLAIM_KAFKA_ID, Lease
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.redis_client import reply, text
from lagwatch.shared.runtime.service_lifecycle import pause

log = logging.getLogger(__name__)
REQUEST_TIMEOUT_S = 10.0
LEASE_MS = 120_000  # forgetting a cluster of 100k groups takes seconds; a worker that died leaves it to the next
WAIT_S = 0.5  # a worker waiting for another to forget asks again this often

Forget = Callable[[str, str], Awaitable[None]]  # (the id recorded, the id Kafka gives) -> forget the old one's data


class KafkaIdentity:
    """The id of the Kafka cluster behind one cluster name, as Kafka gives it and as Redis recorded it."""

    def __init__(self, cluster: str, redis: Any, rdkafka_config: Mapping[str, Any]) -> None:
        self.cluster = cluster
        self.verified: str | None = None  # the id this worker checked at its start (None: Kafka gives none)
        self._suspect: str | None = None  # another id, answered once by a running worker's last look
        self._config = dict(rdkafka_config)
        self._admin: AdminClient | None = None
        self._redis = redis
        self._claim = redis.register_script(CLAIM_KAFKA_ID)
        self._forgetting = Lease(redis, keys.kafka_forgetting(cluster))
        metrics.KAFKA_REPLACED.labels(cluster)  # at 0 from the start: Prometheus's increase() misses a series born at 1

    async def current(self) -> str | None:
        """The id Kafka gives now (None: the brokers give none); KafkaException when no broker answers."""
        if self._admin is None:
            self._admin = AdminClient(self._config, logger=log)
        return await cluster_id(self._admin)

    async def verify(self, forget: Forget, stopping: asyncio.Event | None = None) -> str | None:
        """At a worker's start, before anything of the cluster is read or written: compare the id Kafka gives with
        the one recorded, forgetting the old cluster's data (`forget`) when they differ; while another worker does,
        wait for it (or for `stopping`). Returns the id (None: Kafka gives none, or stopped while waiting).
        KafkaException or RedisError: retried by the caller, as the start is."""
        seen, again = await self.current(), await self.current()
        if seen is None or seen != again:  # a service answering with another id each time must not forget each start
            how = "no cluster id" if seen is None else f"another cluster id at each request ({seen}, {again})"
            level = logging.INFO if seen is None else logging.WARNING  # none: Event Hubs, Kafka before 0.10.1
            log.log(
                level,
                "ingest %s: the brokers give %s: a cluster replaced under this name is not noticed",
                self.cluster,
                how,
            )
            self.verified = None
            return None
        while await self._recorded_other(seen):
            if await self._forgetting.take(LEASE_MS):
                # the lease is ours: the worker that held it may have forgotten and recorded the id meanwhile
                if recorded := await self._recorded_other(seen):
                    _warn_replaced(self.cluster, recorded, seen)
                    metrics.KAFKA_REPLACED.labels(self.cluster).inc()
                    await forget(recorded, seen)
                    await reply(self._redis.set(keys.kafka_id(self.cluster), seen))
                await self._forgetting.release()  # (one that dies leaves it to expire)
                break
            if stopping is not None and stopping.is_set():
                return None
            await asyncio.sleep(WAIT_S)  # another worker forgets the old cluster's data
        self.verified = seen
        return seen

    async def _recorded_other(self, seen: str) -> str | None:
        """The id recorded when it is another than `seen` (none recorded: `seen` is, from now on)."""
        verdict, recorded = (text(v) for v in await self._claim(keys=[keys.kafka_id(self.cluster)], args=[seen]))
        return recorded if verdict == "other" else None

    async def watch(self, stopping: asyncio.Event, every: float) -> bool:
        """Look every `every` s until `stopping`; True once the cluster behind the name was replaced (the running
        worker then starts over: its windows in memory belong to the old cluster)."""
        while not stopping.is_set():
            await pause(stopping, every)
            if not stopping.is_set() and await self.replaced():
                return True
        return False

    async def replaced(self) -> bool:
        """Whether the cluster behind the name is another than the one verified at the start, the same new id in two
        looks in a row (a running worker looks every offset-refresh). Kafka away, or giving no id: not replaced
        (asked again next time)."""
        if self.verified is None:
            return False
        try:
            seen = await self.current()
        except KafkaException as exc:
            log.debug("ingest %s: cluster id not read (%s)", self.cluster, exc)
            return False
        if seen is None or seen == self.verified:
            self._suspect = None
            return False
        if seen != self._suspect:  # one answer alone does not end the run: the same new id twice in a row does
            self._suspect = seen
            return False
        log.warning(
            "ingest %s: the Kafka cluster behind this name is now %s, not %s: the worker starts over",
            self.cluster,
            seen,
            self.verified,
        )
        return True


async def cluster_id(admin: AdminClient) -> str | None:
    """The id of the Kafka cluster the admin client talks to (None: the brokers give none); KafkaException when no
    broker answers. A Metadata request without topics."""
    try:
        described = await asyncio.wrap_future(admin.describe_cluster(request_timeout=REQUEST_TIMEOUT_S))
    finally:
        admin.poll(0)  # librdkafka's log lines (and a token's refresh) wait in its queue until served
    return described.cluster_id or None


def _warn_replaced(cluster: str, recorded: str, seen: str) -> None:
    log.warning(
        "ingest %s: Kafka cluster %s replaced by %s under this name: its windows, log ends and read marks are "
        "forgotten (none of the new cluster's commits could continue them); its groups are recorded NOTFOUND. If "
        "two Kafka clusters are configured under one name sharing this Redis, give each a name of its own",
        cluster,
        recorded,
        seen,
    )
