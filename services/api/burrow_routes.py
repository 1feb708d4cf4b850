"""Burrow's HTTP API v3 (spec §5): clusters, topics, consumer groups, their statuses, and removing a group.

Shapes and messages follow Burrow's documentation so existing Burrow clients (dashboards, Telegraf's burrow input,
alerting scripts) work unchanged. A group's status is computed from its Redis windows at request time
(`statuses.py`); the consumer listing is the groups the evaluator holds a ready result for (`results_store.py`, the
same /metrics and the dashboard read), so all three list the same groups.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from lagwatch.services.api import statuses
from lagwatch.services.api.auth import requires_token
from lagwatch.services.api.context import CONTEXT, ApiContext, now_ms
from lagwatch.services.api.responses import ApiError, ok
from lagwatch.shared.config import ClusterConfig
from lagwatch.shared.kafka_client import security_protocol
from lagwatch.shared.store.redis_store import StoredGroup, StoredPartition
from lagwatch.shared.store.results_store import ResultsStore

routes = web.RouteTableDef()


def _context(request: web.Request) -> ApiContext:
    return request.app[CONTEXT]


async def _cluster(request: web.Request) -> str:
    return await _context(request).require_cluster(request.match_info["cluster"])


@routes.get("/v3/kafka")
async def list_clusters(request: web.Request) -> web.Response:
    return ok(request, "cluster list returned", clusters=await _context(request).clusters())


@routes.get("/v3/kafka/{cluster}")
async def cluster_detail(request: web.Request) -> web.Response:
    cluster = await _cluster(request)
    module = cluster_module(_context(request).config.clusters.get(cluster))
    # Burrow's wiki names the key `module` in its example and `cluster` in its prose: both are given
    return ok(request, "cluster module detail returned", module=module, cluster=module)


def cluster_module(cluster: ClusterConfig | None) -> dict[str, Any]:
    """Burrow's cluster module detail; a cluster known only from Redis has no servers here."""
    if cluster is None:
        cluster = ClusterConfig(bootstrap_servers=[])
    return {
        "class-name": "kafka",
        "servers": list(cluster.bootstrap_servers),
        "client-profile": {"name": "default", "client-id": cluster.client_id, "kafka-version": "auto"},
        "topic-refresh": _seconds(cluster.topic_refresh),
        "offset-refresh": _seconds(cluster.offset_refresh),
        # lagwatch's own (never secrets)
        "offsets-topic": cluster.offsets_topic,
        "start-latest": cluster.start_latest,
        "security-protocol": security_protocol(cluster),
    }


def _seconds(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value  # Burrow's are whole seconds: 60, not 60.0


@routes.get("/v3/kafka/{cluster}/topic")
async def list_topics(request: web.Request) -> web.Response:
    cluster = await _cluster(request)
    topics = await _context(request).store.list_topics(cluster)
    return ok(request, "topic list returned", topics=sorted(topics))


@routes.get("/v3/kafka/{cluster}/topic/{topic}")
async def topic_detail(request: web.Request) -> web.Response:
    cluster = await _cluster(request)
    offsets = await _context(request).store.topic_offsets(cluster, request.match_info["topic"])
    if offsets is None:
        raise ApiError(404, "topic not found")
    return ok(request, "topic offsets returned", offsets=offsets)


@routes.get("/v3/kafka/{cluster}/consumer")
async def list_consumers(request: web.Request) -> web.Response:
    cluster = await _cluster(request)
    consumers = await ResultsStore(_context(request).redis).groups(cluster)
    return ok(request, "consumer list returned", consumers=consumers)


@routes.get("/v3/kafka/{cluster}/consumer/{group}")
async def consumer_detail(request: web.Request) -> web.Response:
    context = _context(request)
    cluster = await _cluster(request)
    stored = await context.live_group(cluster, request.match_info["group"], now_ms())
    if stored is None:
        raise ApiError(404, "consumer group not found")
    known = await context.store.list_topics(cluster)
    topics = consumer_topics(stored, known, context.config.storage.intervals)
    return ok(request, "consumer detail returned", topics=topics)


def consumer_topics(stored: StoredGroup, partition_counts: Mapping[str, int], intervals: int) -> dict[str, list]:
    """{topic: [partition slot, ...]}, a list indexed by partition and sized to the topic's partition count;
    partitions the group has no window for get an empty slot, as in Burrow."""
    by_topic: dict[str, dict[int, StoredPartition]] = {}
    for p in stored.partitions:
        by_topic.setdefault(p.topic, {})[p.partition] = p
    out: dict[str, list] = {}
    for topic, parts in sorted(by_topic.items()):
        size = max(partition_counts.get(topic, 0), max(parts) + 1)
        out[topic] = [_partition_slot(parts.get(i), intervals) for i in range(size)]
    return out


def _partition_slot(p: StoredPartition | None, intervals: int) -> dict[str, Any]:
    if p is None:
        return {"offsets": [None] * intervals, "owner": "", "client_id": "", "current-lag": 0}
    ring = p.to_rule_input(intervals).offsets
    return {
        "offsets": [e.to_json() if e else None for e in ring],
        "owner": p.owner,
        "client_id": p.client_id,
        "current-lag": p.current_lag,
    }


@routes.get("/v3/kafka/{cluster}/consumer/{group}/status")
async def consumer_status(request: web.Request) -> web.Response:
    return await _status(request, only_bad_partitions=True)


@routes.get("/v3/kafka/{cluster}/consumer/{group}/lag")
async def consumer_lag(request: web.Request) -> web.Response:
    return await _status(request, only_bad_partitions=False)


async def _status(request: web.Request, *, only_bad_partitions: bool) -> web.Response:
    context = _context(request)
    cluster = await _cluster(request)
    group = request.match_info["group"]
    now = now_ms()
    stored = await context.live_group(cluster, group, now)
    if stored is None:
        body = {"status": statuses.not_found(cluster, group).to_json()}
        raise ApiError(404, "consumer group not found", fields=body)
    status = statuses.evaluate(stored, now, context.config)
    body = statuses.with_lag_seconds(status.to_json(only_bad_partitions=only_bad_partitions), stored, now)
    return ok(request, "consumer status returned", status=body)


@routes.delete("/v3/kafka/{cluster}/consumer/{group}")
@requires_token
async def remove_consumer(request: web.Request) -> web.Response:
    context = _context(request)
    cluster = await _cluster(request)
    group = request.match_info["group"]
    if not await context.store.delete_group(cluster, group):
        raise ApiError(404, "consumer group not found")
    await ResultsStore(context.redis).remove(cluster, group)
    await context.notices.deleted(cluster, group)
    return ok(request, "consumer group removed")
