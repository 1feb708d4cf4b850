"""The api service (docs/rules.md §5): Burrow's HTTP API v3 over real Redis windows, served on a real socket.

Every test talks HTTP to an `ApiServer` on a free port with an aiohttp client. The windows are written with the
window store, with current timestamps (group keys expire by Redis' clock and statuses are judged at request time).
"""

import asyncio
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import aiohttp
import pytest
from aiokafka import AIOKafkaConsumer
from prometheus_client.parser import text_string_to_metric_families
from yarl import URL

from lagwatch.devkit.redis_server import RedisServer
from lagwatch.services.api import statuses
from lagwatch.services.api.service import ApiServer
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Commit
from lagwatch.shared.runtime.config import load_config
from lagwatch.shared.windows.changes import decode_notice, groups_of
from lagwatch.shared.windows.ingest_totals import add_to_totals
from lagwatch.shared.windows.store import WindowStore
from lagwatch.shared.windows.window_writes import GroupMetadataUpdate
from tests.evaluated import evaluate
from tests.kafka_helpers import CLUSTER, eventually, running
from tests.net_helpers import free_port

SECOND, MINUTE = 1000, 60_000
INTERVALS = 3
TOKEN = "s3cret-token"
HOST = socket.gethostname()
UNREACHABLE_KAFKA = "127.0.0.1:1"


def api_config(redis_url, bootstrap=UNREACHABLE_KAFKA, **env):
    """Cluster `local` configured, 3-slot windows judged at any age; `env` adds LAGWATCH__... overrides (without
    the prefix)."""
    base = {
        "REDIS_URL": redis_url,
        f"LAGWATCH__CLUSTERS__{CLUSTER}__BOOTSTRAP_SERVERS": bootstrap,
        "LAGWATCH__STORAGE__INTERVALS": str(INTERVALS),
        # the seeded windows are two commits long: judged at any age, as Burrow does (docs/rules.md §3)
        "LAGWATCH__EVALUATOR__MINIMUM_ENTRIES": "1",
    }
    base.update({f"LAGWATCH__{k}": v for k, v in env.items()})
    return load_config(env=base)


@contextlib.asynccontextmanager
async def serving(config):
    async with running(ApiServer(config, port=0)) as server:
        await asyncio.wait_for(server.started.wait(), 10)
        yield server


@pytest.fixture
async def api(redis_server, redis):
    async with serving(api_config(redis_server.url)) as server:
        yield server


async def call(http, method, url, **kwargs):
    """(status, JSON body, headers); `url` may be a yarl URL to send a path exactly as written."""
    async with http.request(method, url, **kwargs) as response:
        return response.status, await response.json(), response.headers


async def get(http, url):
    status, body, _ = await call(http, "GET", url)
    return status, body


def envelope(path, message, *, error=False, **fields):
    return {"error": error, "message": message, **fields, "request": {"url": path, "host": HOST}}


def now_ms():
    return int(time.time() * 1000)


def entry(offset, timestamp, lag):
    return {"offset": offset, "timestamp": timestamp, "observedAt": timestamp, "lag": lag}


async def seed(redis, now):
    """`orders` has 3 partitions. billing: p0 catching up (OK), p1 stuck on one offset with lag (STALL), no p2;
    its owners come from group metadata. audit: caught up on p2."""
    store = WindowStore(redis, api_config("redis://unused").window())
    await store.writes.add_broker_offsets(CLUSTER, "orders", [100, 200, 300], sampled_at=now)
    await store.writes.add_broker_offsets(CLUSTER, "payments", [7], sampled_at=now)
    await store.writes.add_commits(
        CLUSTER,
        [
            Commit("billing", "orders", 0, 90, now - MINUTE, 1, now - MINUTE),
            Commit("billing", "orders", 1, 150, now - MINUTE, 2, now - MINUTE),
            Commit("billing", "orders", 0, 95, now - SECOND, 3, now - SECOND),
            Commit("billing", "orders", 1, 150, now - SECOND, 4, now - SECOND),
            Commit("audit", "orders", 2, 300, now - SECOND, 5, now - SECOND),
        ],
        now_ms=now,
    )
    owners = {("orders", 0): ("/10.0.0.1", "billing-a"), ("orders", 1): ("/10.0.0.2", "billing-b")}
    await store.writes.set_groups_metadata(
        CLUSTER, [GroupMetadataUpdate("billing", generation=1, started_at=now, owners=owners)], now
    )
    await evaluate(redis, api_config("redis://unused"), CLUSTER, ["billing", "audit"], now)  # the ready results
    return store


def billing_partitions(now):
    p0 = {
        "topic": "orders",
        "partition": 0,
        "owner": "/10.0.0.1",
        "client_id": "billing-a",
        "status": "OK",
        "start": entry(90, now - MINUTE, 10),
        "end": entry(95, now - SECOND, 5),
        "current_lag": 5,
        "complete": 2 / 3,
    }
    p1 = {
        "topic": "orders",
        "partition": 1,
        "owner": "/10.0.0.2",
        "client_id": "billing-b",
        "status": "STALL",
        "start": entry(150, now - MINUTE, 50),
        "end": entry(150, now - SECOND, 50),
        "current_lag": 50,
        "complete": 2 / 3,
    }
    return p0, p1


# --- clusters and topics ---------------------------------------------------------------------------------------


async def test_clusters_are_the_configured_ones_and_those_found_in_redis(api, http, redis):
    await WindowStore(redis).writes.add_broker_offsets("other", "orders", [1], sampled_at=now_ms())
    assert await get(http, f"{api.url}/v3/kafka") == (
        200,
        envelope("/v3/kafka", "cluster list returned", clusters=["local", "other"]),
    )


async def test_a_forgotten_cluster_is_no_longer_listed_nor_measured(api, http, redis):
    """`lagwatch forget-cluster` (shared/runtime/cluster_forgetting.py): a cluster out of the configuration but kept
    in Redis is listed, its frozen groups and their lag in /metrics, until it is forgotten."""
    from lagwatch.shared.runtime import cluster_forgetting

    now = now_ms()
    store = WindowStore(redis, api_config("redis://unused").window())
    await store.writes.add_broker_offsets("old", "orders", [100], sampled_at=now)
    await store.writes.add_commits(
        "old", [Commit("billing", "orders", 0, 90, now - SECOND, 1, now - SECOND)], now_ms=now
    )
    await evaluate(redis, api_config("redis://unused"), "old", ["billing"], now)
    assert (await get(http, f"{api.url}/v3/kafka"))[1]["clusters"] == ["local", "old"]
    old = await _series_of(http, f"{api.url}/metrics", "old")
    assert old["lagwatch_cluster_configured"] == 0 and "burrow_kafka_consumer_status" in old  # (an alert's input)
    assert (await _series_of(http, f"{api.url}/metrics", "local"))["lagwatch_cluster_configured"] == 1

    await cluster_forgetting.forget(redis, "old", now)
    assert (await get(http, f"{api.url}/v3/kafka"))[1]["clusters"] == ["local"]
    assert (await get(http, f"{api.url}/v3/kafka/old/consumer"))[0] == 404
    assert await _series_of(http, f"{api.url}/metrics", "old") == {}


async def test_metrics_count_the_instances_of_each_service_running_for_each_cluster(api, http, redis):
    """From their presence in Redis (shared/runtime/presence.py), so that a cluster left without one is said while the
    service's own series are gone with it (`LagwatchServiceNotRunning`)."""
    from lagwatch.shared.runtime.presence import Presence

    assert await _instances(http, api.url) == {"ingest": 0, "evaluator": 0, "notifier": 0}
    first, second = (Presence(redis, "local", "evaluator") for _ in range(2))
    await first.announce()
    await second.announce()
    await Presence(redis, "local", "ingest").announce()
    assert await _instances(http, api.url) == {"ingest": 1, "evaluator": 2, "notifier": 0}
    await second.withdraw()
    assert await _instances(http, api.url) == {"ingest": 1, "evaluator": 1, "notifier": 0}


async def _instances(http, url: str) -> dict[str, float]:
    async with http.get(f"{url}/metrics") as response:
        families = text_string_to_metric_families(await response.text())
        samples = [s for f in families if f.name == "lagwatch_service_instances" for s in f.samples]
    assert {s.labels["cluster"] for s in samples} == {"local"}
    return {s.labels["service"]: s.value for s in samples}


async def _series_of(http, url: str, cluster: str) -> dict[str, float]:
    """Each series of the cluster by name, with its value (the last of a name)."""
    async with http.get(url) as response:
        families = text_string_to_metric_families(await response.text())
        return {s.name: s.value for f in families for s in f.samples if s.labels.get("cluster") == cluster}


async def test_cluster_detail_is_burrows_module_with_the_configured_servers(redis_server, redis, http):
    config = api_config(redis_server.url, bootstrap="127.0.0.1:1,127.0.0.1:2", CLUSTERS__local__OFFSET_REFRESH="30")
    module = {
        "class-name": "kafka",
        "servers": ["127.0.0.1:1", "127.0.0.1:2"],
        "client-profile": {
            "name": "default",
            "client-id": "lagwatch",
            "kafka-version": "auto",
            "tls": None,
            "sasl": None,
        },
        "topic-refresh": 60,
        "offset-refresh": 30,
        "offsets-topic": "__consumer_offsets",
        "start-latest": False,
        "security-protocol": "PLAINTEXT",
    }
    async with serving(config) as api:
        assert await get(http, f"{api.url}/v3/kafka/local") == (
            200,
            envelope("/v3/kafka/local", "cluster module detail returned", module=module, cluster=module),
        )
        assert await get(http, f"{api.url}/v3/kafka/nowhere") == (
            404,
            envelope("/v3/kafka/nowhere", "cluster module not found", error=True),
        )


async def test_cluster_detail_shows_burrows_tls_and_sasl_profiles_without_secrets(redis_server, http):
    ca_file = ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt"  # any readable CA file
    config = api_config(
        redis_server.url,
        CLUSTERS__local__TLS__ENABLED="true",
        CLUSTERS__local__TLS__CA_FILE=ca_file,
        CLUSTERS__local__TLS__VERIFY_HOSTNAME="false",
        CLUSTERS__local__SASL__MECHANISM="SCRAM-SHA-512",
        CLUSTERS__local__SASL__USERNAME="burrow",
        CLUSTERS__local__SASL__PASSWORD="hunter2",
    )
    async with serving(config) as api:
        status, body = await get(http, f"{api.url}/v3/kafka/local")
    assert status == 200
    assert body["module"]["client-profile"] == {
        "name": "default",
        "client-id": "lagwatch",
        "kafka-version": "auto",
        "tls": {"name": "default", "noverify": True, "certfile": "", "keyfile": "", "cafile": ca_file},
        "sasl": {"name": "default", "handshake-first": True, "username": "burrow"},
    }
    assert "hunter2" not in json.dumps(body)


async def test_topics_are_listed_sorted_with_their_latest_offsets(api, http, redis):
    await seed(redis, now_ms())
    base = f"{api.url}/v3/kafka/local/topic"
    assert await get(http, base) == (
        200,
        envelope("/v3/kafka/local/topic", "topic list returned", topics=["orders", "payments"]),
    )
    assert await get(http, f"{base}/orders") == (
        200,
        envelope("/v3/kafka/local/topic/orders", "topic offsets returned", offsets=[100, 200, 300]),
    )
    assert await get(http, f"{base}/nope") == (
        404,
        envelope("/v3/kafka/local/topic/nope", "cluster or topic not found", error=True),
    )
    status, body = await get(http, f"{api.url}/v3/kafka/nowhere/topic")
    assert (status, body["message"]) == (404, "cluster not found")


async def test_topic_offsets_leave_out_partitions_not_polled_yet_as_burrows_compacted_list(api, http, redis):
    await WindowStore(redis).writes.add_broker_offsets(
        CLUSTER, "sparse", {0: 5, 2: 7}, sampled_at=now_ms(), partition_count=3
    )
    path = "/v3/kafka/local/topic/sparse"
    assert await get(http, api.url + path) == (200, envelope(path, "topic offsets returned", offsets=[5, 7]))
    status, body = await get(http, f"{api.url}/v3/kafka/nowhere/topic/sparse")
    assert (status, body["message"]) == (404, "cluster or topic not found")


# --- consumer groups ---------------------------------------------------------------------------------------------


async def test_consumers_are_listed_sorted(api, http, redis):
    await seed(redis, now_ms())
    assert await get(http, f"{api.url}/v3/kafka/local/consumer") == (
        200,
        envelope("/v3/kafka/local/consumer", "consumer list returned", consumers=["audit", "billing"]),
    )


async def test_consumer_detail_pads_each_ring_with_nulls_and_each_topic_to_its_partition_count(api, http, redis):
    now = now_ms()
    await seed(redis, now)
    topics = {
        "orders": [
            {
                "offsets": [None, entry(90, now - MINUTE, 10), entry(95, now - SECOND, 5)],
                "owner": "/10.0.0.1",
                "client_id": "billing-a",
                "current-lag": 5,
            },
            {
                "offsets": [None, entry(150, now - MINUTE, 50), entry(150, now - SECOND, 50)],
                "owner": "/10.0.0.2",
                "client_id": "billing-b",
                "current-lag": 50,
            },
            {"offsets": [], "owner": "", "client_id": "", "current-lag": 0},  # never committed: Burrow's []
        ]
    }
    path = "/v3/kafka/local/consumer/billing"
    assert await get(http, api.url + path) == (200, envelope(path, "consumer detail returned", topics=topics))
    assert await get(http, f"{api.url}/v3/kafka/local/consumer/ghost") == (
        404,
        envelope("/v3/kafka/local/consumer/ghost", "cluster or consumer not found", error=True),
    )


async def test_lag_shows_every_partition_and_status_only_those_worse_than_ok(api, http, redis):
    now = now_ms()
    await seed(redis, now)
    p0, p1 = billing_partitions(now)
    p2 = {
        "topic": "orders",
        "partition": 2,
        "owner": "",
        "client_id": "",
        "status": "OK",
        "start": None,
        "end": None,
        "current_lag": 0,
        "complete": 0.0,
    }
    group = {
        "cluster": "local",
        "group": "billing",
        "status": "ERR",
        "complete": 0.0,
        "partition_count": 3,  # p2 never committed: counted, as Burrow creates it with the group's first commit
        "maxlag": p1,
        "totallag": 55,
    }
    lag_path, status_path = "/v3/kafka/local/consumer/billing/lag", "/v3/kafka/local/consumer/billing/status"
    lag_status, lag_body = await get(http, api.url + lag_path)
    extras = _pop_lag_seconds(lag_body["status"])
    assert (lag_status, lag_body) == (
        200,
        envelope(lag_path, "consumer status returned", status={**group, "partitions": [p0, p1, p2]}),
    )
    # lagwatch's extra fields: one log-end sample so far, older than both commits: lower bounds, seconds small
    # (none for p2, which has no commit)
    assert extras.pop(3) == (None, False)
    assert all(bound is True and 0 <= seconds < 5 for seconds, bound in extras)
    status_status, status_body = await get(http, api.url + status_path)
    _pop_lag_seconds(status_body["status"])
    assert (status_status, status_body) == (
        200,
        envelope(status_path, "consumer status returned", status={**group, "partitions": [p1]}),
    )


def _pop_lag_seconds(status):
    """Take lagwatch's lag-in-seconds fields out of a status body (Burrow's fields stay); return them. lagwatch's
    velocity, retention risk and explanation go too (tests/system/test_velocity_end_to_end.py checks them)."""
    found = [(status.pop("max_lag_seconds"), status.pop("max_lag_seconds_lower_bound"))]
    status.pop("velocity"), status.pop("explanation"), status.pop("retention")
    for part in [*status["partitions"], status["maxlag"]]:
        found.append((part.pop("current_lag_seconds"), part.pop("current_lag_seconds_lower_bound")))
        part.pop("velocity", None), part.pop("retention", None)
    return found


async def test_an_unknown_group_is_notfound_with_404_on_status_and_lag_as_burrow_answers_it(api, http, redis):
    await seed(redis, now_ms())
    for cluster, group in (("local", "ghost"), ("nowhere", "billing")):
        notfound = {
            "cluster": cluster,
            "group": group,
            "status": "NOTFOUND",
            "complete": 1.0,
            "partitions": [],
            "partition_count": 0,
            "maxlag": None,
            "totallag": 0,
        }
        for route in ("status", "lag"):
            path = f"/v3/kafka/{cluster}/consumer/{group}/{route}"
            assert await get(http, api.url + path) == (
                404,
                envelope(path, "consumer status returned", status=notfound),
            )


async def test_group_names_with_slashes_and_unicode_are_reachable_percent_encoded(api, http, redis):
    now = now_ms()
    store = await seed(redis, now)
    await store.writes.add_commits(CLUSTER, [Commit("team/é", "orders", 0, 100, now - SECOND, 9, now)], now_ms=now)
    status, body = await get(http, URL(f"{api.url}/v3/kafka/local/consumer/team%2F%C3%A9/lag", encoded=True))
    assert (status, body["status"]["group"], body["status"]["status"]) == (200, "team/é", "OK")


# --- deleting a group ---------------------------------------------------------------------------------------------


async def test_delete_is_refused_when_no_token_is_configured(api, http, redis):
    await seed(redis, now_ms())
    path = "/v3/kafka/local/consumer/billing"
    status, body, _ = await call(http, "DELETE", api.url + path, headers={"Authorization": "Bearer anything"})
    assert (status, body) == (403, envelope(path, "mutations are disabled: no api.token is configured", error=True))
    assert await redis.exists(keys.group_windows(CLUSTER, "billing"))


async def test_delete_needs_the_right_bearer_token_and_removes_the_group(redis_server, redis, http):
    await seed(redis, now_ms())
    path = "/v3/kafka/local/consumer/billing"
    async with serving(api_config(redis_server.url, API__TOKEN=TOKEN)) as api:
        status, body, headers = await call(http, "DELETE", api.url + path)
        assert (status, body) == (401, envelope(path, "a bearer token is required", error=True))
        assert headers["WWW-Authenticate"] == 'Bearer realm="lagwatch"'
        status, body, headers = await call(http, "DELETE", api.url + path, headers={"Authorization": "Bearer nope"})
        assert (status, body) == (401, envelope(path, "invalid bearer token", error=True))
        assert headers["WWW-Authenticate"] == 'Bearer realm="lagwatch", error="invalid_token"'
        assert await redis.exists(keys.group_windows(CLUSTER, "billing"))

        authorized = {"Authorization": f"Bearer {TOKEN}"}
        status, body, _ = await call(http, "DELETE", api.url + path, headers=authorized)
        assert (status, body) == (200, envelope(path, "consumer group removed"))
        assert (await get(http, api.url + path))[0] == 404
        assert (await get(http, f"{api.url}/v3/kafka/local/consumer"))[1]["consumers"] == ["audit"]
        status, body, _ = await call(http, "DELETE", api.url + path, headers=authorized)
        assert (status, body) == (200, envelope(path, "consumer group removed"))  # Burrow's answer, gone or not


async def test_a_rotation_accepts_the_previous_tokens_beside_the_new_one_and_counts_who_uses_which(
    redis_server, redis, http
):
    """Clients move to a new token one by one: meanwhile the old one still works (no moment when either side is
    refused), and /metrics says how many requests still carry it, so the operator knows when to drop it."""
    await seed(redis, now_ms())
    config = api_config(redis_server.url, API__TOKEN="new-token-2026", API__PREVIOUS_TOKENS="old-token-2025,older-one")
    async with serving(config) as api:
        for token, path in (("old-token-2025", "billing"), ("older-one", "audit"), ("new-token-2026", "billing")):
            url = f"{api.url}/v3/kafka/local/consumer/{path}"
            status, body, _ = await call(http, "DELETE", url, headers={"Authorization": f"Bearer {token}"})
            assert (status, body["message"]) == (200, "consumer group removed"), token
        status, body, _ = await call(
            http, "DELETE", f"{api.url}/v3/kafka/local/consumer/x", headers={"Authorization": "Bearer old-token"}
        )
        assert (status, body["message"]) == (401, "invalid bearer token")  # a prefix of one is none of them
        async with http.get(f"{api.url}/metrics") as response:
            text = await response.text()
    assert 'lagwatch_api_token_uses_total{token="previous"} 2.0' in text
    assert 'lagwatch_api_token_uses_total{token="current"} 1.0' in text


async def test_a_deletion_sends_a_change_notice_so_the_evaluator_reacts_at_once(kafka, redis_server, redis, http):
    kafka.create_topic("lagwatch.changes", 1)
    await seed(redis, now_ms())
    config = api_config(redis_server.url, bootstrap=kafka.bootstrap, API__TOKEN=TOKEN)
    async with serving(config) as api:
        status, _, _ = await call(
            http, "DELETE", f"{api.url}/v3/kafka/local/consumer/billing", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert status == 200
    consumer = AIOKafkaConsumer("lagwatch.changes", bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        message = await asyncio.wait_for(consumer.getone(), 20)
    finally:
        await consumer.stop()
    notice = decode_notice(message.value)
    assert notice is not None and (notice["cluster"], groups_of(notice), notice["reason"]) == (
        "local",
        ["billing"],
        "deleted",
    )


# --- bad requests and failures -------------------------------------------------------------------------------------


async def test_unknown_routes_and_wrong_methods_answer_json(api, http):
    assert await get(http, f"{api.url}/v2/kafka") == (
        404,
        envelope("/v2/kafka", "no such route: GET /v2/kafka", error=True),
    )
    status, body, headers = await call(http, "POST", f"{api.url}/v3/kafka")
    assert (status, body) == (405, envelope("/v3/kafka", "method POST not allowed (allowed: GET, HEAD)", error=True))
    assert headers["Allow"] == "GET, HEAD"
    status, body, _ = await call(http, "PUT", f"{api.url}/v3/kafka/local/consumer/billing")
    assert (status, body["error"], body["message"]) == (
        405,
        True,
        "method PUT not allowed (allowed: DELETE, GET, HEAD)",
    )


async def test_options_on_a_route_lists_its_methods_as_burrows_router_does(api, http):
    async with http.options(f"{api.url}/v3/kafka/local/consumer/billing") as response:
        assert (response.status, response.headers["Allow"], await response.read()) == (
            200,
            "DELETE, GET, HEAD, OPTIONS",
            b"",
        )
    status, body, _ = await call(http, "OPTIONS", f"{api.url}/v2/kafka")
    assert (status, body["message"]) == (404, "no such route: OPTIONS /v2/kafka")


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/v3/kafka/local/consumer/%FF%FE/lag", "malformed path: not UTF-8"),
        ("/v3/kafka/local/consumer/bad%zzname", "malformed path: bad percent-encoding"),
        (
            "/v3/kafka/local/consumer/" + "g" * 1001,
            "malformed path: group is longer than 1000 characters"
            " (POST /api/v1/consumer-groups/{status,lag,detail,delete} take the name in a JSON body)",
        ),
        ("/v3/kafka/local/topic/" + "t" * 1001, "malformed path: topic is longer than 1000 characters"),
    ],
)
async def test_malformed_paths_are_rejected_with_400(api, http, path, message):
    status, body, _ = await call(http, "GET", URL(api.url + path, encoded=True))
    assert (status, body["error"], body["message"]) == (400, True, message)


async def test_an_unexpected_failure_is_a_500_without_a_traceback(api, http, redis):
    now = now_ms()
    await seed(redis, now)
    await redis.hset(keys.group_windows(CLUSTER, "broken"), "orders:0", b"x" * 48)
    await redis.hset(keys.group_meta(CLUSTER, "broken"), "last", "not a number")  # lagwatch never writes this
    async with http.get(f"{api.url}/v3/kafka/local/consumer/broken/lag") as response:
        text = await response.text()
        assert response.status == 500
    assert json.loads(text) == envelope("/v3/kafka/local/consumer/broken/lag", "internal server error", error=True)
    assert "Traceback" not in text and "struct" not in text


async def test_redis_down_is_503_and_unready(kafka, http):
    with RedisServer() as own_redis:
        config = api_config(own_redis.url, bootstrap=kafka.bootstrap)
        async with serving(config) as api:
            status, body = await get(http, f"{api.url}/readyz")
            assert (status, body) == (
                200,
                {"service": "api", "ready": True, "checks": {"redis": True}, "kafka": {"local": True}},
            )
            assert (await get(http, f"{api.url}/v3/kafka"))[0] == 200
            own_redis.stop()
            assert await get(http, f"{api.url}/v3/kafka") == (
                503,
                envelope("/v3/kafka", "storage unavailable: Redis cannot be reached", error=True),
            )
            status, body = await get(http, f"{api.url}/readyz")
            assert (status, body["checks"], body["kafka"]) == (503, {"redis": False}, {"local": True})


async def test_an_unreachable_kafka_is_reported_but_leaves_the_api_ready(api, http):
    """Everything the api serves comes from Redis: a Kafka outage must not take it (and the dashboard) out of its
    Service when operators need it."""
    status, body = await get(http, f"{api.url}/readyz")  # the configured Kafka is unreachable
    assert (status, body) == (
        200,
        {"service": "api", "ready": True, "checks": {"redis": True}, "kafka": {"local": False}},
    )
    assert (await get(http, f"{api.url}/v3/kafka/local/consumer"))[0] == 200


async def test_burrows_readiness_probe_follows_redis(http):
    with RedisServer() as own_redis:
        async with serving(api_config(own_redis.url)) as api:
            async with http.get(f"{api.url}/burrow/admin/ready") as response:
                assert (response.status, await response.text()) == (200, "READY")
            own_redis.stop()
            async with http.get(f"{api.url}/burrow/admin/ready") as response:
                assert (response.status, await response.text()) == (503, "STARTING")


async def test_the_consumers_of_a_topic_are_the_groups_committing_on_it(api, http, redis):
    await seed(redis, now_ms())
    path = "/v3/kafka/local/topic/orders/consumers"
    assert await get(http, api.url + path) == (
        200,
        envelope(path, "consumers of topic returned", consumers=["audit", "billing"]),
    )
    status, body = await get(http, f"{api.url}/v3/kafka/nowhere/topic/orders/consumers")
    assert (status, body["message"]) == (404, "cluster not found")


async def test_liveness_and_burrows_healthcheck(api, http):
    async with http.get(f"{api.url}/burrow/admin") as response:
        assert (response.status, await response.text()) == (200, "GOOD")
    assert await get(http, f"{api.url}/healthz") == (200, {"service": "api", "status": "alive"})


# --- metrics -------------------------------------------------------------------------------------------------------


def samples(text):
    """{(sample name, sorted labels): value} of a Prometheus text exposition."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def labels(**kw):
    return tuple(sorted(kw.items()))


async def fill_billing(redis, store, now):
    """A third commit fills billing's 3-slot rings (Burrow exports offsets and statuses of complete partitions
    only); its ready result is evaluated again."""
    third = [
        Commit("billing", "orders", 0, 98, now - 500, 6, now - 500),
        Commit("billing", "orders", 1, 150, now - 500, 7, now - 500),
    ]
    await store.writes.add_commits(CLUSTER, third, now_ms=now)
    await evaluate(redis, api_config("redis://unused"), CLUSTER, ["billing"], now)


async def test_metrics_have_burrows_names_and_lagwatchs_counters(api, http, redis):
    now = now_ms()
    store = await seed(redis, now)
    await fill_billing(redis, store, now)
    tally = Counter({"records": 40, "decode_error:other": 2, "skipped_type:16": 3, "outcome:appended": 30})
    await add_to_totals(redis, CLUSTER, tally)
    stats = keys.evaluator_stats(CLUSTER)
    for name, n in {"evaluations:notice": 5, "evaluations:sweep": 7, "transitions": 2, "events_published": 2}.items():
        await redis.hincrby(stats, name, n)
    await redis.hincrbyfloat(stats, "evaluation_seconds", 0.25)
    await get(http, f"{api.url}/v3/kafka")  # one timed request

    async with http.get(f"{api.url}/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        found = samples(await response.text())

    billing = {"cluster": "local", "consumer_group": "billing"}
    p0, p1 = {**billing, "topic": "orders", "partition": "0"}, {**billing, "topic": "orders", "partition": "1"}
    p2 = {**billing, "topic": "orders", "partition": "2"}
    audit_p2 = {"cluster": "local", "consumer_group": "audit", "topic": "orders", "partition": "2"}
    expected = {
        ("burrow_kafka_consumer_status", labels(**billing)): 3,  # ERR
        ("burrow_kafka_consumer_status", labels(cluster="local", consumer_group="audit")): 1,  # OK
        ("burrow_kafka_consumer_lag_total", labels(**billing)): 52,
        ("lagwatch_consumer_group_max_lag", labels(**billing)): 50,
        ("burrow_kafka_consumer_partition_lag", labels(**p0)): 2,
        ("burrow_kafka_consumer_partition_lag", labels(**p1)): 50,
        ("burrow_kafka_consumer_partition_lag", labels(**p2)): 0,  # never committed: lag 0, as in Burrow
        ("burrow_kafka_consumer_partition_lag", labels(**audit_p2)): 0,
        ("burrow_kafka_consumer_current_offset", labels(**p0)): 98,
        ("burrow_kafka_consumer_current_offset", labels(**p1)): 150,
        ("burrow_kafka_topic_partition_status", labels(**p0)): 1,  # OK
        ("burrow_kafka_topic_partition_status", labels(**p1)): 5,  # STALL
        ("burrow_kafka_topic_partition_offset", labels(cluster="local", topic="orders", partition="2")): 300,
        ("burrow_kafka_topic_partition_offset", labels(cluster="local", topic="payments", partition="0")): 7,
        ("lagwatch_group_rebalances_last_hour", labels(**billing)): 1,
        ("lagwatch_ingest_records_total", labels(cluster="local")): 40,
        ("lagwatch_ingest_decode_errors_total", labels(cluster="local", type="other")): 2,
        ("lagwatch_ingest_skipped_records_total", labels(cluster="local", reason="16")): 3,
        ("lagwatch_ingest_commits_total", labels(cluster="local", outcome="appended")): 30,
        ("lagwatch_evaluations_total", labels(cluster="local", trigger="notice")): 5,
        ("lagwatch_evaluations_total", labels(cluster="local", trigger="sweep")): 7,
        ("lagwatch_status_transitions_total", labels(cluster="local")): 2,
        ("lagwatch_events_published_total", labels(cluster="local")): 2,
        ("lagwatch_evaluation_seconds_total", labels(cluster="local")): 0.25,
        ("lagwatch_api_request_seconds_count", labels(route="/v3/kafka", method="GET")): 1,
    }
    assert {key: found.get(key) for key in expected} == expected
    for incomplete in (p2, audit_p2):  # fewer commits than ring slots: no offset, no status (Burrow's condition)
        for name in ("burrow_kafka_consumer_current_offset", "burrow_kafka_topic_partition_status"):
            assert (name, labels(**incomplete)) not in found
    names = {name for name, _ in found}
    assert not names & {"burrow_kafka_consumer_partition_status", "burrow_kafka_consumer_partition_current_offset"}


# --- the command ---------------------------------------------------------------------------------------------------


async def test_lagwatch_run_api_serves_until_sigterm(redis_server, redis, http):
    await seed(redis, now_ms())
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_BOOTSTRAP_SERVERS", "LAGWATCH_CONFIG")}
    env.update(REDIS_URL=redis_server.url, LAGWATCH__API__PORT=str(port))
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "lagwatch"), "run", "api"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/v3/kafka"
        status, body = await eventually(lambda: _get_or_none(http, url), timeout=30)
        assert (status, body["clusters"]) == (200, ["local"])  # no cluster configured: found in Redis
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out


async def _get_or_none(http, url):
    try:
        return await get(http, url)
    except aiohttp.ClientError:
        return None


# --- /metrics from the ready results (issue 13) ----------------------------------------------------------------


async def test_a_redis_that_may_evict_is_said_at_start_and_on_metrics(http, caplog):
    """shared/runtime/redis_memory.py: a full Redis with an eviction policy deletes windows and outboxes silently."""
    evicting = ("--maxmemory", str(64 * 1024 * 1024), "--maxmemory-policy", "allkeys-lru")
    with RedisServer(extra_args=evicting) as own_redis, caplog.at_level("WARNING", "lagwatch.shared.store"):
        async with serving(api_config(own_redis.url)) as api, http.get(f"{api.url}/metrics") as response:
            families = {f.name: f for f in text_string_to_metric_families(await response.text())}
    [may_evict] = families["lagwatch_redis_may_evict"].samples
    assert (may_evict.labels, may_evict.value) == ({"server": "redis", "policy": "allkeys-lru"}, 1)
    [evicted] = families["lagwatch_redis_evicted_keys"].samples
    assert evicted.name == "lagwatch_redis_evicted_keys_total"
    assert (evicted.labels, evicted.value) == ({"server": "redis"}, 0)
    [limit] = families["lagwatch_redis_maxmemory_bytes"].samples
    [used] = families["lagwatch_redis_memory_used_bytes"].samples
    assert (limit.labels, limit.value) == ({"server": "redis"}, 64 * 1024 * 1024)
    assert used.labels == {"server": "redis"} and 0 < used.value < limit.value
    said = [r.getMessage() for r in caplog.records if r.name == "lagwatch.shared.runtime.redis_memory"]
    assert [line.split(":")[0] for line in said] == ["api"]


async def test_metrics_from_the_ready_results_equal_what_the_rules_compute_from_the_windows(api, http, redis):
    from lagwatch.services.api import statuses

    now = now_ms()
    store = await seed(redis, now)
    await fill_billing(redis, store, now)
    async with http.get(f"{api.url}/metrics") as response:
        found = samples(await response.text())
    config = api_config("redis://unused")
    for group in ("billing", "audit"):
        status = statuses.evaluate(await store.reads.get_group(CLUSTER, group), now_ms(), config)
        g = {"cluster": CLUSTER, "consumer_group": group}
        assert found[("burrow_kafka_consumer_status", labels(**g))] == int(status.status)
        assert found[("burrow_kafka_consumer_lag_total", labels(**g))] == status.totallag
        assert found[("lagwatch_consumer_group_max_lag", labels(**g))] == status.maxlag.current_lag
        for p in status.partitions:
            part = labels(**g, topic=p.topic, partition=str(p.partition))
            assert found[("burrow_kafka_consumer_partition_lag", part)] == p.current_lag
            if p.complete == 1.0:
                assert found[("burrow_kafka_topic_partition_status", part)] == int(p.status)
                assert found[("burrow_kafka_consumer_current_offset", part)] == p.end.offset
            else:
                assert ("burrow_kafka_topic_partition_status", part) not in found


async def test_metrics_cardinality_settings_leave_series_out(redis_server, redis, http):
    now = now_ms()
    await seed(redis, now)
    partition_families = {
        "burrow_kafka_consumer_partition_lag",
        "burrow_kafka_consumer_current_offset",
        "burrow_kafka_topic_partition_status",
        "burrow_kafka_topic_partition_offset",
        "lagwatch_consumer_lag_seconds",
    }
    settings = [
        ({"API__METRICS_PARTITION_SERIES": "false"}, lambda name, lab: name not in partition_families),
        ({"API__METRICS_GROUP_DENYLIST": "^bill"}, lambda name, lab: lab.get("consumer_group") != "billing"),
        ({"API__METRICS_GROUP_ALLOWLIST": "^bill"}, lambda name, lab: lab.get("consumer_group") in (None, "billing")),
        ({"API__METRICS_TOPIC_DENYLIST": "^pay"}, lambda name, lab: lab.get("topic") != "payments"),
        (
            {"API__METRICS_FAMILY_DENYLIST": "^lagwatch_consumer_(group_|lag_seconds)"},
            lambda name, lab: not name.startswith(("lagwatch_consumer_group_", "lagwatch_consumer_lag_seconds")),
        ),
    ]
    for env, allowed in settings:
        async with serving(api_config(redis_server.url, **env)) as server, http.get(f"{server.url}/metrics") as r:
            found = samples(await r.text())
        assert all(allowed(name, dict(lab)) for name, lab in found), env
        assert ("burrow_kafka_consumer_status", labels(cluster=CLUSTER, consumer_group="billing")) in found or (
            "DENYLIST" in next(iter(env)) and "GROUP" in next(iter(env))
        )
    # group series stay when only topics are filtered, with the group's totals over every partition
    assert found[("burrow_kafka_consumer_lag_total", labels(cluster=CLUSTER, consumer_group="billing"))] == 55


async def test_metric_labels_escape_quotes_and_backslashes_in_every_name(api, http, redis):
    """Kafka refuses such topic names, but whatever Redis holds is written so Prometheus reads it: an unescaped `"`
    in one topic label made the whole scrape unreadable (Prometheus drops all of it)."""
    now = now_ms()
    topic, group = 'odd"topic\\', 'odd"group\\\n'
    store = WindowStore(redis, api_config("redis://unused").window())
    await store.writes.add_broker_offsets(CLUSTER, topic, [10], sampled_at=now)
    await store.writes.add_commits(CLUSTER, [Commit(group, topic, 0, 4, now - SECOND, 1, now - SECOND)], now_ms=now)
    await evaluate(redis, api_config("redis://unused"), CLUSTER, [group], now)
    async with http.get(f"{api.url}/metrics") as response:
        found = samples(await response.text())
    part = labels(cluster=CLUSTER, consumer_group=group, topic=topic, partition="0")
    assert found[("burrow_kafka_consumer_partition_lag", part)] == 6
    assert found[("burrow_kafka_topic_partition_offset", labels(cluster=CLUSTER, topic=topic, partition="0"))] == 10


def test_the_consumers_of_a_topic_are_found_without_decoding_every_result():
    """Only results naming the topic, as their JSON writes it, are decoded; a name that merely contains it, or a
    window not filled yet, is not a consumer."""
    from lagwatch.services.api.burrow_routes import _consumers_of
    from lagwatch.shared.protocol.types import Status
    from lagwatch.shared.statuses.results_store import GroupResult, PartitionResult

    def result(group, *parts):
        return GroupResult(group, Status.OK, 1, (), tuple(PartitionResult(t, 0, Status.OK, 5, f, -2) for t, f in parts))

    raw = {
        g.encode(): r.encode()
        for g, r in {
            "a": result("a", ("orders", 3)),
            "b": result("b", ("orders-v2", 3), ("x", 1)),
            "c": result("c", ("orders", 0)),  # no commit in its window yet
            "d": result("d", ("ördérs", 2), ("orders", 1)),
        }.items()
    }
    raw[b"broken"] = b'not json but mentions "orders"'
    assert _consumers_of("orders", raw) == ["a", "d"]
    assert _consumers_of("ördérs", raw) == ["d"]
    assert _consumers_of("orders-v", raw) == []


async def test_a_group_of_thousands_of_partitions_is_judged_off_the_event_loop(api, http, redis, monkeypatch):
    # ~1 s of CPU at 10k partitions: on the loop, every other request (the probes too) would wait it out
    now = now_ms()
    await seed(redis, now)
    wide = statuses.THREAD_FROM_PARTITIONS
    store = WindowStore(redis, api_config("redis://unused").window())
    await store.writes.add_broker_offsets(CLUSTER, "wide", [100] * wide, sampled_at=now)
    commits = [Commit("fanout", "wide", p, 90, now, p + 1, now) for p in range(wide)]
    await store.writes.add_commits(CLUSTER, commits, now_ms=now)
    threads = []
    judge = statuses._body

    def recording(*args):
        threads.append(threading.current_thread() is threading.main_thread())
        return judge(*args)

    monkeypatch.setattr(statuses, "_body", recording)
    for path in ("/v3/kafka/local/consumer/fanout/lag", "/dashboard/api/group/local/fanout"):
        async with http.get(f"{api.url}{path}") as response:
            assert response.status == 200 and (await response.json())["status"]["partition_count"] == wide
    async with http.get(f"{api.url}/v3/kafka/local/consumer/billing/lag") as response:
        assert response.status == 200
    assert threads == [False, False, True]  # the small group stays on the loop: a thread hop costs more there
