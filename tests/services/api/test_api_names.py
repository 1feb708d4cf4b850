"""Consumer group names as Kafka allows them (any characters) on every route that takes one: Burrow's router
matches a name up to the next '/', whatever it holds."""

import pytest
from yarl import URL

from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Commit
from tests.evaluated import evaluate
from tests.kafka_helpers import CLUSTER
from tests.services.api.test_api import SECOND, TOKEN, api_config, call, get, now_ms, seed, serving

BRACED = "team-{env}"  # an unrendered template in a consumer's config: a legal group name
ENCODED = "team-%7Benv%7D"


@pytest.fixture
async def braced(redis_server, redis):
    now = now_ms()
    store = await seed(redis, now)
    await store.writes.add_commits(CLUSTER, [Commit(BRACED, "orders", 0, 100, now - SECOND, 9, now)], now_ms=now)
    await evaluate(redis, api_config(redis_server.url), CLUSTER, [BRACED], now)
    async with serving(api_config(redis_server.url, API__TOKEN=TOKEN)) as api:
        yield api


@pytest.mark.parametrize("route", ["lag", "status"])
async def test_a_group_name_with_braces_has_its_status(braced, http, route):
    status, body = await get(http, URL(f"{braced.url}/v3/kafka/local/consumer/{ENCODED}/{route}", encoded=True))
    assert (status, body["status"]["group"], body["status"]["status"]) == (200, BRACED, "OK")


async def test_a_group_name_with_braces_has_its_detail_and_dashboard_page(braced, http):
    status, body = await get(http, URL(f"{braced.url}/v3/kafka/local/consumer/{ENCODED}", encoded=True))
    assert (status, list(body["topics"])) == (200, ["orders"])
    status, body = await get(http, URL(f"{braced.url}/dashboard/api/group/local/{ENCODED}", encoded=True))
    assert (status, body["status"]["group"]) == (200, BRACED)


async def test_a_group_name_with_braces_can_be_deleted(braced, http, redis):
    url = URL(f"{braced.url}/v3/kafka/local/consumer/{ENCODED}", encoded=True)
    status, body, _ = await call(http, "DELETE", url, headers={"Authorization": f"Bearer {TOKEN}"})
    assert (status, body["message"]) == (200, "consumer group removed")
    assert not await redis.exists(keys.group_windows(CLUSTER, BRACED))
