"""Burrow's HTTP API v3 (docs/rules.md §5): clusters, topics and their consumers, consumer groups, their statuses, and
removing a group or one of its topics. A group's routes also answer a POST naming the group in a JSON body
(`/api/v1/consumer-groups/...`, group_routes.py), for names no URL can hold.

Shapes and messages follow Burrow's httpserver (v1.9.5) so existing Burrow clients work unchanged, down to its
NOTFOUND answer (a 404 with `error: false`). A group's status is computed from its windows at request time
(`statuses.py`); the consumer listings are the groups the evaluator holds a ready result for, as /metrics and the
dashboard list them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from lagwatch.services.api import statuses
from lagwatch.services.api.auth import requires_token
from lagwatch.services.api.context import CONTEXT
from lagwatch.services.api.group_routes import BASE as BY_BODY
from lagwatch.services.api.group_routes import named_group
from lagwatch.services.api.paths import named
from lagwatch.services.api.responses import ApiError, ok
from lagwatch.shared.protocol.types import MARKERS_ONLY_LAG
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.config import ClusterConfig
from lagwatch.shared.runtime.kafka_client import security_protocol
from lagwatch.shared.statuses.results_store import ResultsStore, decode_result
from lagwatch.shared.windows.stored_group import StoredGroup, StoredPartition

routes = web.RouteTableDef()


async def _cluster(request: web.Request) -> str:
    return await request.app[CONTEXT].require_cluster(request.match_info["cluster"])


@routes.get("/v3/kafka")
async def list_clusters(request: web.Request) -> web.Response:
    return ok(request, "cluster list returned", clusters=await request.app[CONTEXT].clusters())


@routes.get(named("/v3/kafka/{cluster}"))
async def cluster_detail(request: web.Request) -> web.Response:
    context = request.app[CONTEXT]
    name = request.match_info["cluster"]
    if not await context.knows_cluster(name):
        raise ApiError(404, "cluster module not found")
    module = cluster_module(context.config.clusters.get(name))
    # Burrow's wiki names the key `module` in its example and `cluster` in its prose: both are given
    return ok(request, "cluster module detail returned", module=module, cluster=module)


def cluster_module(cluster: ClusterConfig | None) -> dict[str, Any]:
    """Burrow's cluster module detail; a cluster known only from Redis has no servers here."""
    if cluster is None:
        cluster = ClusterConfig(bootstrap_servers=[])
    return {
        "class-name": "kafka",
        "servers": list(cluster.bootstrap_servers),
        "client-profile": client_profile(cluster),
        "topic-refresh": _seconds(cluster.topic_refresh),
        "offset-refresh": _seconds(cluster.offset_refresh),
        # lagwatch's own (never secrets)
        "offsets-topic": cluster.offsets_topic,
        "start-latest": cluster.start_latest,
        "security-protocol": security_protocol(cluster),
    }


def client_profile(cluster: ClusterConfig) -> dict[str, Any]:
    """Burrow's client profile: `tls` and `sasl` are null when not used, never a password or key's content.
    lagwatch has no named profiles: each cluster carries its own settings, shown under the name `default`."""
    tls, sasl = cluster.tls, cluster.sasl
    return {
        "name": "default",
        "client-id": cluster.client_id,
        "kafka-version": "auto",
        "tls": {
            "name": "default",
            "noverify": not tls.verify_hostname,
            "certfile": tls.cert_file,
            "keyfile": tls.key_file,
            "cafile": tls.ca_file,
        }
        if tls.enabled
        else None,
        "sasl": {"name": "default", "handshake-first": True, "username": sasl.username}
        if sasl.mechanism or sasl.username
        else None,
    }


def _seconds(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value  # Burrow's are whole seconds: 60, not 60.0


@routes.get(named("/v3/kafka/{cluster}/topic"))
async def list_topics(request: web.Request) -> web.Response:
    cluster = await _cluster(request)
    topics = await request.app[CONTEXT].store.reads.list_topics(cluster)
    return ok(request, "topic list returned", topics=sorted(topics))


@routes.get(named("/v3/kafka/{cluster}/topic/{topic}"))
async def topic_detail(request: web.Request) -> web.Response:
    context = request.app[CONTEXT]
    cluster = request.match_info["cluster"]
    offsets = await context.store.reads.topic_offsets(cluster, request.match_info["topic"])
    if offsets is None or not await context.knows_cluster(cluster):
        raise ApiError(404, "cluster or topic not found")
    # as Burrow's: the partitions with a known log end, in order (one not polled yet is left out, not null)
    return ok(request, "topic offsets returned", offsets=[o for o in offsets if o is not None])


@routes.get(named("/v3/kafka/{cluster}/topic/{topic}/consumers"))
async def topic_consumers(request: web.Request) -> web.Response:
    """The groups with a window on the topic (as evaluated: the ready results), [] for an unknown topic."""
    cluster = await _cluster(request)
    raw = await ResultsStore(request.app[CONTEXT].redis).raw(cluster)
    # off the event loop: at 100k groups, decoding every result took seconds, and /healthz waited meanwhile
    consumers = await asyncio.to_thread(_consumers_of, request.match_info["topic"], raw)
    return ok(request, "consumers of topic returned", consumers=consumers)


def _consumers_of(topic: str, raw: Mapping[bytes, bytes]) -> list[str]:
    """The groups whose result has a filled window on `topic`; only results naming it (as their JSON writes it)
    are decoded."""
    needle = json.dumps(topic).encode()
    results = (decode_result(group.decode(), value) for group, value in raw.items() if needle in value)
    return sorted(
        r.group for r in results if r is not None and any(p.topic == topic and p.filled for p in r.partitions)
    )


@routes.get(named("/v3/kafka/{cluster}/consumer"))
async def list_consumers(request: web.Request) -> web.Response:
    cluster = await _cluster(request)
    consumers = await ResultsStore(request.app[CONTEXT].redis).groups(cluster)
    return ok(request, "consumer list returned", consumers=consumers)


@routes.get(named("/v3/kafka/{cluster}/consumer/{group}"))
@routes.post(BY_BODY + "/detail")
async def consumer_detail(request: web.Request) -> web.Response:
    target, context = await named_group(request), request.app[CONTEXT]
    stored = await context.live_group(target.cluster, target.group, now_ms())
    if stored is None:
        raise ApiError(404, "cluster or consumer not found")
    known = await context.store.reads.list_topics(target.cluster)
    topics = consumer_topics(stored, known, context.config.storage.intervals)
    return ok(request, "consumer detail returned", topics=topics)


def consumer_topics(stored: StoredGroup, partition_counts: Mapping[str, int], intervals: int) -> dict[str, list]:
    """{topic: [partition slot, ...]}, a list indexed by partition and sized to the topic's partition count;
    a partition without a commit has `offsets: []`, as in Burrow."""
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
        return {"offsets": [], "owner": "", "client_id": "", "current-lag": 0}
    ring = p.to_rule_input(intervals).offsets if p.packed else []
    offsets = [e.to_json() if e else None for e in ring]
    slot = {"offsets": offsets, "owner": p.owner, "client_id": p.client_id, "current-lag": p.current_lag}
    if p.markers_only:  # lagwatch's, as on the status's partitions
        slot |= {"lag_kind": MARKERS_ONLY_LAG, "unread_records": 0}
    return slot


@routes.get(named("/v3/kafka/{cluster}/consumer/{group}/status"))
@routes.get(named("/v3/kafka/{cluster}/consumer/{group}/lag"))
@routes.post(BY_BODY + "/status")
@routes.post(BY_BODY + "/lag")
async def consumer_status(request: web.Request) -> web.Response:
    """Burrow's answer whether or not the group (or the cluster) is known: `error: false`, "consumer status
    returned"; an unknown one is a 404 with the NOTFOUND status object. `/status` lists only the partitions not OK,
    `/lag` every one."""
    target, context = await named_group(request), request.app[CONTEXT]
    now = await context.judging_clock(target.cluster)
    stored = await context.live_group(target.cluster, target.group, now)
    if stored is None:
        body = statuses.not_found(target.cluster, target.group).to_json()
        return ok(request, "consumer status returned", http_status=404, status=body)
    only_bad = request.path.endswith("/status")
    body = await statuses.status_body(stored, now, context, only_bad_partitions=only_bad)
    return ok(request, "consumer status returned", status=body)


@routes.delete(named("/v3/kafka/{cluster}/consumer/{group}"))
@routes.delete(named("/v3/kafka/{cluster}/consumer/{group}/topic/{topic}"))
@routes.post(BY_BODY + "/delete")
@requires_token
async def remove_consumer(request: web.Request) -> web.Response:
    """Forget a group, or one topic of it (the whole group when that was its last topic), as Burrow's DELETEs;
    Burrow's answer whether or not it existed."""
    (cluster, group, topic), context = await named_group(request, topic_allowed=True), request.app[CONTEXT]
    await context.require_cluster(cluster)
    deletions = context.store.deletions
    existed = await (
        deletions.delete_group(cluster, group) if topic is None else deletions.delete_group_topic(cluster, group, topic)
    )
    if existed:
        if topic is None or await context.store.reads.get_group(cluster, group) is None:
            await ResultsStore(context.redis).remove(cluster, group)
        await context.notices.deleted(cluster, group)  # the evaluator re-evaluates it at once
    return ok(request, "consumer group removed")  # Burrow's answer, whether the group existed or not
