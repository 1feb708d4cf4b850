"""Issue 18 row 4: a readable commit with a timestamp of 2^62 is counted and skipped, never stored as a float.

Stored, it left `last` as float text ("4.6116860184273879e+18"): from then on every read of its group answered 500.
The ingest now counts such a commit as `decode_error:out-of-range`; the store's own write path (`add_commits`, the
Lua script lagwatch's own group goes through) refuses it before writing anything.
"""

import asyncio
import contextlib
import time

import pytest

from lagwatch.devkit.offsets_topic_writer import OffsetsTopicWriter
from lagwatch.services.api.service import ApiServer
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Commit
from lagwatch.shared.windows.ingest_totals import read_totals
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, eventually, make_config, running

HUGE = 2**62


@contextlib.asynccontextmanager
async def api_serving(config):
    async with running(ApiServer(config, port=0)) as server:
        await asyncio.wait_for(server.started.wait(), 10)
        yield server


async def read_all(http, api_url, group):
    """{path: status} of every v3 read of `group` (and the listings holding it); each must answer JSON."""
    base = f"{api_url}/v3/kafka/{CLUSTER}"
    answers = {}
    for path in (
        "",
        "/consumer",
        "/topic",
        f"/consumer/{group}",
        f"/consumer/{group}/status",
        f"/consumer/{group}/lag",
    ):
        async with http.get(base + path) as response:
            body = await response.json()  # JSON whatever the status (a ContentTypeError otherwise)
            answers[path] = response.status
            # Burrow answers a NOTFOUND group's status with 404 and `error: false` ("consumer status returned")
            burrow_notfound = path.endswith(("/status", "/lag")) and body.get("message") == "consumer status returned"
            assert body["error"] is (response.status >= 400 and not burrow_notfound), (path, body)
    async with http.get(f"{api_url}/dashboard/api/group/{CLUSTER}/{group}") as response:
        answers["dashboard"] = response.status
    return answers


def now_ms():
    return int(time.time() * 1000)


async def test_a_commit_timestamped_2_to_the_62_is_counted_and_every_read_of_its_group_answers(
    kafka, redis_server, redis, http
):
    kafka.create_topic("orders", 1)
    config = make_config(kafka.bootstrap, redis_server.url)
    store = WindowStore(redis, config.window())
    async with (
        OffsetsTopicWriter(kafka.bootstrap) as writer,
        running(IngestWorker(config, CLUSTER)),
        api_serving(config) as api,
    ):
        await writer.commit("billing", "orders", 0, 5, timestamp=now_ms())
        await eventually(lambda: store.reads.get_group(CLUSTER, "billing"))
        await writer.commit("billing", "orders", 0, 6, timestamp=HUGE)  # readable, but no real time
        await writer.commit("poisoned", "orders", 0, 1, timestamp=HUGE)  # a group with nothing else
        await eventually(lambda: _out_of_range(redis, 2))

        billing = await store.reads.get_group(CLUSTER, "billing")
        assert [e.offset for p in billing.partitions for e in p.entries] == [5]
        assert (await redis.hget(keys.group_meta(CLUSTER, "billing"), "last")).isdigit()
        assert await read_all(http, api.url, "billing") == {
            "": 200, "/consumer": 200, "/topic": 200, "/consumer/billing": 200,
            "/consumer/billing/status": 200, "/consumer/billing/lag": 200, "dashboard": 200,
        }  # fmt: skip
        answers = await read_all(http, api.url, "poisoned")
        assert answers == {**answers, "/consumer/poisoned": 404, "/consumer/poisoned/lag": 404}
        assert all(status in (200, 404) for status in answers.values()), answers


async def _out_of_range(redis, n):
    return (await read_totals(redis, CLUSTER)).get("decode_error:out-of-range") == n


@pytest.mark.parametrize(
    "field, value",
    [
        ("timestamp", HUGE),
        ("timestamp", 2**53),
        ("offset", 2**63 - 1),
        ("offset", -2),
        ("order", HUGE),
        ("timestamp", 1.5),
    ],
)
async def test_the_stores_script_path_refuses_numbers_it_cannot_store_exactly_and_writes_nothing(
    redis_server, redis, http, field, value
):
    """`add_commits` (lagwatch's own group, tools): the Lua script's numbers are doubles; refused at its entry."""
    config = make_config("127.0.0.1:1", redis_server.url)
    store = WindowStore(redis, config.window())
    now = now_ms()
    good = Commit("lagwatch-local", "__consumer_offsets", 0, 10, now, 10, now)
    bad = good._replace(**{field: value})
    with pytest.raises(ValueError, match=field):
        await store.writes.add_commits(CLUSTER, [good, bad], now, broker_offsets={("__consumer_offsets", 0): 20})
    assert await redis.keys("*") == []  # the whole batch refused: nothing half-written
    async with api_serving(config) as api:
        answers = await read_all(http, api.url, "lagwatch-local")
    assert set(answers.values()) <= {200, 404}, answers
