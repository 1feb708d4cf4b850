"""Burrow parity through the real path (issue 14 points 1-6): commits written to the offsets topic of the Kafka mock,
read by the ingest into Redis, judged by the evaluator, served by the api.

What a team migrating from Burrow v1.9.5 relies on: REWIND judged by the first drop only, the metric names and the
"complete partitions only" condition of Burrow's prometheus.go, a topic's never-committed partitions counted in the
group, Burrow's routes (readiness, topic consumers, DELETE of a group's topic, trailing slashes) and answers, and
expired groups leaving the group index.
"""

from __future__ import annotations

import contextlib
import time

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from lagwatch.devkit.offsets_topic_writer import OffsetCommitSpec, OffsetsTopicWriter
from lagwatch.services.api.service import ApiServer
from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.protocol import keys
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, produce, running

TOKEN = "parity-token"
AUTHORIZED = {"Authorization": f"Bearer {TOKEN}"}


@contextlib.asynccontextmanager
async def lagwatch(kafka, redis_server, **env):
    """Ingest, evaluator and api on the Kafka mock and Redis; yields (writer, store, api, _, http)."""
    kafka.create_topic("lagwatch.changes", 4)
    kafka.create_topic("lagwatch.status", 3)
    config = make_config(kafka.bootstrap, redis_server.url, EVALUATOR__SWEEP_INTERVAL="0.5", API__TOKEN=TOKEN, **env)
    redis = Redis.from_url(redis_server.url)
    async with (
        OffsetsTopicWriter(kafka.bootstrap) as writer,
        running(IngestWorker(config, CLUSTER)) as ingest,
        running(EvaluatorService(config, CLUSTER, http_port=0)) as evaluator,
        running(ApiServer(config, port=0)) as api,
        aiohttp.ClientSession() as http,
    ):
        await api.started.wait()
        await eventually(lambda: _assigned(ingest, evaluator))
        yield writer, WindowStore(redis, config.window()), api, evaluator, http
    await redis.aclose()


async def _assigned(ingest, evaluator):
    return bool(ingest.consumer.assigned) and evaluator.owned_partitions() is not None


async def log_ends_known(store, topic, ends):
    """Produce nothing; wait until lagwatch has polled these log ends ({partition: offset})."""
    tps = [(topic, p) for p in ends]

    async def known():
        return await store.reads.latest_broker_offsets(CLUSTER, tps) == {(topic, p): n for p, n in ends.items()}

    await eventually(known)


async def commit_history(writer, group, topic, partition, offsets, spacing_s=20):
    """Commits written together, the newest stamped now and each earlier one `spacing_s` before it."""
    now = int(time.time() * 1000)
    n = len(offsets)
    await writer.commits(
        [
            OffsetCommitSpec(group, topic, partition, off, timestamp=now - (n - 1 - i) * spacing_s * 1000)
            for i, off in enumerate(offsets)
        ]
    )


async def call(http, method, url, **kw):
    async with http.request(method, url, allow_redirects=False, **kw) as response:
        body = await response.json() if response.content_type == "application/json" else await response.text()
        return response.status, body, response.headers


async def lag(http, api, group):
    return await call(http, "GET", f"{api.url}/v3/kafka/{CLUSTER}/consumer/{group}/lag")


async def metrics(http, api):
    async with http.get(f"{api.url}/metrics") as response:
        text = await response.text()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def partition_labels(group, topic, partition):
    return tuple(
        sorted({"cluster": CLUSTER, "consumer_group": group, "topic": topic, "partition": str(partition)}.items())
    )


async def test_rewinds_never_committed_partitions_metrics_and_routes_as_in_burrow(kafka, redis_server):
    kafka.create_topic("t-back", 1)
    kafka.create_topic("t-rewind", 1)
    kafka.create_topic("t-wide", 4)
    async with lagwatch(kafka, redis_server, STORAGE__INTERVALS="4") as (writer, store, api, _, http):
        await produce(kafka.bootstrap, "t-back", {0: 120})
        await produce(kafka.bootstrap, "t-rewind", {0: 120})
        await produce(kafka.bootstrap, "t-wide", {p: 10 for p in range(4)})
        await log_ends_known(store, "t-back", {0: 120})
        await log_ends_known(store, "t-rewind", {0: 120})
        await log_ends_known(store, "t-wide", {p: 10 for p in range(4)})

        # 1. REWIND looks at the first drop only: Burrow's example is OK; a first drop never made good is REWIND
        await commit_history(writer, "g-back", "t-back", 0, [100, 90, 110, 105])
        await commit_history(writer, "g-rewind", "t-rewind", 0, [100, 90, 95, 80])
        # 6. g-wide commits on partition 0 of a 4-partition topic only
        await commit_history(writer, "g-wide", "t-wide", 0, [7, 8, 9, 10])

        async def evaluated(group):
            status, body, _ = await lag(http, api, group)
            return body["status"] if status == 200 and body["status"]["complete"] > 0 else None

        back = await eventually(lambda: evaluated("g-back"))
        assert (back["status"], [p["status"] for p in back["partitions"]]) == ("OK", ["OK"])
        assert back["partitions"][0]["end"]["offset"] == 105 and back["partitions"][0]["complete"] == 1.0
        rewound = await eventually(lambda: evaluated("g-rewind"))
        assert (rewound["status"], [p["status"] for p in rewound["partitions"]]) == ("ERR", ["REWIND"])

        # 6. the never-committed partitions are the group's too: OK, lag 0, complete 0, counted
        wide = await eventually(lambda: evaluated("g-wide"))
        assert (wide["partition_count"], wide["complete"], wide["totallag"]) == (4, 0.25, 0)
        never = [p for p in wide["partitions"] if p["partition"] != 0]
        assert [(p["partition"], p["status"], p["current_lag"], p["complete"], p["start"]) for p in never] == [
            (1, "OK", 0, 0.0, None),
            (2, "OK", 0, 0.0, None),
            (3, "OK", 0, 0.0, None),
        ]
        status, detail, _ = await call(http, "GET", f"{api.url}/v3/kafka/{CLUSTER}/consumer/g-wide")
        assert status == 200
        assert [len(p["offsets"]) for p in detail["topics"]["t-wide"]] == [4, 0, 0, 0]  # `offsets: []`, as Burrow

        # 2. Burrow's metric names; offsets and statuses for complete partitions only, lag for every partition
        async def scraped():
            found = await metrics(http, api)
            return found if ("burrow_kafka_consumer_status", _group_labels("g-wide")) in found else None

        found = await eventually(scraped)
        assert found[("burrow_kafka_consumer_status", _group_labels("g-back"))] == 1
        assert found[("burrow_kafka_consumer_status", _group_labels("g-rewind"))] == 3
        assert found[("burrow_kafka_topic_partition_status", partition_labels("g-rewind", "t-rewind", 0))] == 6
        assert found[("burrow_kafka_consumer_current_offset", partition_labels("g-wide", "t-wide", 0))] == 10
        assert found[("burrow_kafka_topic_partition_status", partition_labels("g-wide", "t-wide", 0))] == 1
        for p in (1, 2, 3):
            tp = partition_labels("g-wide", "t-wide", p)
            assert found[("burrow_kafka_consumer_partition_lag", tp)] == 0
            assert ("burrow_kafka_consumer_current_offset", tp) not in found
            assert ("burrow_kafka_topic_partition_status", tp) not in found

        # 4. routes: readiness, the consumers of a topic, trailing slashes redirected as Burrow's router does
        assert (await call(http, "GET", f"{api.url}/burrow/admin/ready"))[:2] == (200, "READY")
        base = f"{api.url}/v3/kafka/{CLUSTER}"
        status, body, _ = await call(http, "GET", f"{base}/topic/t-wide/consumers")
        assert (status, body["message"], body["consumers"]) == (200, "consumers of topic returned", ["g-wide"])
        assert (await call(http, "GET", f"{base}/topic/nothing/consumers"))[1]["consumers"] == []
        status, _, headers = await call(http, "GET", f"{base}/consumer/?x=1")
        assert (status, headers["Location"]) == (301, f"/v3/kafka/{CLUSTER}/consumer?x=1")
        status, _, headers = await call(http, "DELETE", f"{base}/consumer/g-wide/topic/t-wide/", headers=AUTHORIZED)
        assert (status, headers["Location"]) == (307, f"/v3/kafka/{CLUSTER}/consumer/g-wide/topic/t-wide")
        assert (await call(http, "GET", f"{base}/consumer/nobody/"))[0] == 301  # the redirect comes first
        assert (await call(http, "GET", f"{base}/nothing/here/"))[0] == 404

        # 4. + 5. DELETE of a group's only topic removes the group: NOTFOUND answered as Burrow does
        status, body, _ = await call(http, "DELETE", f"{base}/consumer/g-wide/topic/t-wide", headers=AUTHORIZED)
        assert (status, body["error"], body["message"]) == (200, False, "consumer group removed")
        await eventually(lambda: _no_consumers_of(http, base, "t-wide"))
        status, body, _ = await lag(http, api, "g-wide")
        assert (status, body["error"], body["message"]) == (404, False, "consumer status returned")
        assert (body["status"]["status"], body["status"]["complete"], body["status"]["partitions"]) == (
            "NOTFOUND",
            1.0,
            [],
        )
        status, body, _ = await call(http, "GET", f"{base}/consumer/g-wide")
        assert (status, body["error"], body["message"]) == (404, True, "cluster or consumer not found")
        # the listing is the evaluator's ready results: gone once it has judged the deletion (a moment after the
        # topic's consumers, which leave with the group's filled windows)
        await eventually(lambda: _not_listed(http, base, "g-wide"))


async def _not_listed(http, base, group):
    status, body, _ = await call(http, "GET", f"{base}/consumer")
    return status == 200 and group not in body["consumers"]


async def _no_consumers_of(http, base, topic):
    status, body, _ = await call(http, "GET", f"{base}/topic/{topic}/consumers")
    return status == 200 and body["consumers"] == []


def _group_labels(group):
    return tuple(sorted({"cluster": CLUSTER, "consumer_group": group}.items()))


async def test_a_group_whose_keys_redis_expired_leaves_the_group_index_and_the_listing(kafka, redis_server):
    """Redis expires an abandoned group's keys by itself; the evaluator then takes its name out of the index (before
    issue 14 it stayed there for good: listed, and evaluated by every sweep)."""
    kafka.create_topic("t-old", 1)
    redis = Redis.from_url(redis_server.url)
    index = keys.groups_index(CLUSTER)
    env = {"STORAGE__EXPIRE_GROUP": "3"}
    try:
        async with lagwatch(kafka, redis_server, **env) as (writer, store, api, _, http):
            await produce(kafka.bootstrap, "t-old", {0: 5})
            await log_ends_known(store, "t-old", {0: 5})
            await writer.commit("g-old", "t-old", 0, 5)
            base = f"{api.url}/v3/kafka/{CLUSTER}"

            async def listed():
                return "g-old" in (await call(http, "GET", f"{base}/consumer"))[1]["consumers"]

            await eventually(listed)
            assert await redis.zscore(index, "g-old") is not None

            async def unindexed():
                return await redis.zscore(index, "g-old") is None and not await listed()

            await eventually(unindexed, timeout=20)
            assert not await redis.exists(*keys.group_keys(CLUSTER, "g-old"))
            status, body, _ = await lag(http, api, "g-old")
            assert (status, body["status"]["status"]) == (404, "NOTFOUND")
    finally:
        await redis.aclose()


async def test_the_evaluator_takes_names_out_of_the_index_when_their_keys_are_already_gone(redis_server, redis):
    """The path no schedule covers: keys expired while no evaluator ran, names left in the index."""
    from tests.evaluated import evaluate

    config = make_config("127.0.0.1:1", redis_server.url, STORAGE__EXPIRE_GROUP="3")
    now = int(time.time() * 1000)
    index = keys.groups_index(CLUSTER)
    await redis.zadd(index, {"expired-long-ago": now - 10_000, "fresh": now})
    await redis.hset(keys.group_meta(CLUSTER, "fresh"), "last", now)
    await evaluate(redis, config, CLUSTER, ["expired-long-ago"], now)
    assert await redis.zrange(index, 0, -1) == [b"fresh"]
