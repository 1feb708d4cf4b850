"""A Redis that answers but cannot take writes, as during a failover (the api's connections still on the old
primary, now a replica): a 503 the client may retry, as for a Redis down, not a 500 "internal server error"."""

import pytest
from redis.asyncio import Redis

from lagwatch.devkit.redis_server import RedisServer
from lagwatch.shared.protocol import keys
from tests.kafka_helpers import CLUSTER
from tests.net_helpers import free_port
from tests.services.api.test_api import TOKEN, api_config, call, envelope, now_ms, seed, serving

AUTHORIZED = {"Authorization": f"Bearer {TOKEN}"}
UNAVAILABLE = "storage unavailable: Redis cannot be reached"


@pytest.fixture
async def replica():
    """An api over a Redis holding the windows that became a replica of a primary it cannot reach."""
    with RedisServer() as own_redis:
        own_redis.start()
        client = Redis.from_url(own_redis.url)
        try:
            await seed(client, now_ms())
            async with serving(api_config(own_redis.url, API__TOKEN=TOKEN)) as api:
                await client.replicaof("127.0.0.1", free_port())
                yield api, client
        finally:
            await client.aclose()


async def test_a_write_to_a_read_only_replica_is_a_503(replica, http):
    api, client = replica
    path = "/v3/kafka/local/consumer/billing"
    status, body, _ = await call(http, "DELETE", api.url + path, headers=AUTHORIZED)
    assert (status, body) == (503, envelope(path, UNAVAILABLE, error=True))
    assert await client.exists(keys.group_windows(CLUSTER, "billing"))  # nothing was deleted
    doc = {"matchers": [{"name": "group", "value": "billing"}], "ends-at": now_ms() / 1000 + 600, "created-by": "a"}
    status, body, _ = await call(http, "POST", api.url + "/api/v1/silences", json=doc, headers=AUTHORIZED)
    assert (status, body["message"]) == (503, UNAVAILABLE)
