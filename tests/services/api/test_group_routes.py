"""A consumer group's routes with its name in a JSON body (services/api/group_routes.py, burrow_routes.py), on a real
api over real Redis: a group named with 10 kB, which Kafka allows but no request line takes, can be read and removed,
and every answer is the one Burrow's route gives for a group it can name."""

import json

import pytest
from yarl import URL

from lagwatch.services.api.group_routes import MAX_GROUP_BYTES
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Commit
from tests.evaluated import evaluate
from tests.kafka_helpers import CLUSTER
from tests.services.api.test_api import SECOND, TOKEN, api_config, call, envelope, get, now_ms, seed, serving

LONG = "payments-" + "x" * 10_000  # 10 kB: over an HTTP request line's 8 kB, far under Kafka's 32,767 bytes
BASE = "/api/v1/consumer-groups"
AUTHORIZED = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def api(redis_server, redis):
    """billing (STALL on orders/1, so ERR) and audit as in test_api.py; LONG commits on orders/0 and payments/0."""
    now = now_ms()
    store = await seed(redis, now)
    commits = [
        Commit(LONG, "orders", 0, 60, now - 30 * SECOND, 11, now - 30 * SECOND),
        Commit(LONG, "orders", 0, 80, now - SECOND, 12, now - SECOND),
        Commit(LONG, "payments", 0, 7, now - SECOND, 13, now - SECOND),
    ]
    await store.writes.add_commits(CLUSTER, commits, now_ms=now)
    await evaluate(redis, api_config(redis_server.url), CLUSTER, [LONG], now)
    async with serving(api_config(redis_server.url, API__TOKEN=TOKEN)) as server:
        yield server


async def post(http, url, doc, **kwargs):
    return await call(http, "POST", url, data=json.dumps(doc), **kwargs)


def timeless(value):
    """An answer without what moves with the clock between two requests (lags in seconds, the explanation that
    names them) and without the request's own url."""
    if isinstance(value, dict):
        moving = ("request", "explanation")
        return {k: timeless(v) for k, v in value.items() if "seconds" not in k and k not in moving}
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value


async def test_burrows_routes_cannot_name_the_group_the_body_routes_can(api, http):
    """The path route never reaches its handler (the request line is refused), and one a little shorter says where
    to go; the body route answers."""
    async with http.get(URL(f"{api.url}/v3/kafka/{CLUSTER}/consumer/{LONG}/lag")) as response:
        assert response.status == 400
    status, body = await get(http, f"{api.url}/v3/kafka/{CLUSTER}/consumer/{LONG[:2000]}/lag")
    assert status == 400 and body["message"].endswith(
        f"(POST {BASE}/{{status,lag,detail,delete}} take the name in a JSON body)"
    )
    status, body, _ = await post(http, f"{api.url}{BASE}/lag", {"cluster": CLUSTER, "group": LONG})
    assert status == 200 and body["error"] is False and body["message"] == "consumer status returned"
    answer = body["status"]
    assert (answer["cluster"], answer["group"], answer["status"]) == (CLUSTER, LONG, "OK")
    parts = {(p["topic"], p["partition"]): p for p in answer["partitions"]}
    assert set(parts) == {("orders", 0), ("orders", 1), ("orders", 2), ("payments", 0)}  # orders' uncommitted too
    assert (parts["orders", 0]["current_lag"], parts["payments", 0]["current_lag"]) == (20, 0)
    assert answer["totallag"] == 20 and answer["maxlag"]["topic"] == "orders"
    assert body["request"]["url"] == f"{BASE}/lag"


@pytest.mark.parametrize(
    ("route", "burrow"),
    [("status", "/status"), ("lag", "/lag"), ("detail", "")],
)
async def test_each_read_answers_what_burrows_route_answers(api, http, route, burrow):
    """Same status code, same body, for a group both can name and for one nobody knows (Burrow's 404)."""
    answered = []
    for group in ("billing", "ghost"):
        expected_status, expected = await get(http, f"{api.url}/v3/kafka/{CLUSTER}/consumer/{group}{burrow}")
        status, body, _ = await post(http, f"{api.url}{BASE}/{route}", {"cluster": CLUSTER, "group": group})
        assert (status, timeless(body)) == (expected_status, timeless(expected)), (route, group)
        answered.append(status)
    assert answered == [200, 404]


async def test_the_detail_of_the_long_named_group(api, http):
    status, body, _ = await post(http, f"{api.url}{BASE}/detail", {"cluster": CLUSTER, "group": LONG})
    assert (status, body["message"]) == (200, "consumer detail returned")
    assert sorted(body["topics"]) == ["orders", "payments"]
    assert [e["offset"] for e in body["topics"]["orders"][0]["offsets"] if e] == [60, 80]


async def test_the_dashboard_opens_the_long_named_group_by_its_body_route(api, http):
    status, body, _ = await post(http, f"{api.url}/dashboard/api/group", {"cluster": CLUSTER, "group": LONG})
    assert status == 200 and body["status"]["group"] == LONG
    windows = {(p["topic"], p["partition"]): p["window"] for p in body["status"]["partitions"]}
    assert [e["offset"] for e in windows["orders", 0] if e] == [60, 80]
    assert [e["offset"] for e in windows["payments", 0] if e] == [7]
    status, body, _ = await post(http, f"{api.url}/dashboard/api/group", {"cluster": CLUSTER, "group": "ghost"})
    assert (status, body["message"]) == (404, "consumer group not found")


async def test_delete_needs_the_token_and_removes_the_long_named_group(api, http, redis):
    url, doc = f"{api.url}{BASE}/delete", {"cluster": CLUSTER, "group": LONG}
    status, body, _ = await post(http, url, doc)
    assert (status, body["message"]) == (401, "a bearer token is required")
    status, body, _ = await post(http, url, doc, headers={"Authorization": "Bearer nope"})
    assert (status, body["message"]) == (401, "invalid bearer token")
    assert await redis.exists(keys.group_windows(CLUSTER, LONG))

    status, body, _ = await post(http, url, doc, headers=AUTHORIZED)
    assert (status, body) == (200, envelope(f"{BASE}/delete", "consumer group removed"))
    assert not await redis.exists(keys.group_windows(CLUSTER, LONG))
    assert not await redis.hexists(keys.group_results(CLUSTER), LONG)
    assert (await get(http, f"{api.url}/v3/kafka/{CLUSTER}/consumer"))[1]["consumers"] == ["audit", "billing"]
    status, body, _ = await post(http, f"{api.url}{BASE}/lag", doc)
    assert (status, body["status"]["status"]) == (404, "NOTFOUND")
    status, body, _ = await post(http, url, doc, headers=AUTHORIZED)
    assert (status, body["message"]) == (200, "consumer group removed")  # Burrow's answer, gone or not


async def test_delete_of_one_topic_keeps_the_group_on_its_others(api, http, redis):
    doc = {"cluster": CLUSTER, "group": LONG, "topic": "payments"}
    status, body, _ = await post(http, f"{api.url}{BASE}/delete", doc, headers=AUTHORIZED)
    assert (status, body["message"]) == (200, "consumer group removed")
    status, body, _ = await post(http, f"{api.url}{BASE}/lag", {"cluster": CLUSTER, "group": LONG})
    assert status == 200 and {p["topic"] for p in body["status"]["partitions"]} == {"orders"}


async def test_delete_in_an_unknown_cluster_is_a_404_and_without_a_token_configured_a_403(redis_server, redis, http):
    await seed(redis, now_ms())
    async with serving(api_config(redis_server.url, API__TOKEN=TOKEN)) as api:
        doc = {"cluster": "nowhere", "group": "billing"}
        status, body, _ = await post(http, f"{api.url}{BASE}/delete", doc, headers=AUTHORIZED)
        assert (status, body["message"]) == (404, "cluster not found")
    async with serving(api_config(redis_server.url)) as api:
        doc = {"cluster": CLUSTER, "group": "billing"}
        status, body, _ = await post(http, f"{api.url}{BASE}/delete", doc, headers=AUTHORIZED)
        assert (status, body["message"]) == (403, "mutations are disabled: no api.token is configured")
    assert await redis.exists(keys.group_windows(CLUSTER, "billing"))


@pytest.mark.parametrize(
    ("route", "doc", "errors"),
    [
        ("lag", {"cluster": CLUSTER}, {"group": "required"}),
        ("lag", {"group": "billing"}, {"cluster": "required"}),
        ("status", {"cluster": CLUSTER, "group": ""}, {"group": "must be a non-empty string"}),
        ("detail", {"cluster": CLUSTER, "group": ["billing"]}, {"group": "must be a non-empty string"}),
        (
            "lag",
            {"cluster": CLUSTER, "group": "g" * (MAX_GROUP_BYTES + 1)},
            {"group": "longer than Kafka allows a group's name (32,767 bytes in UTF-8)"},
        ),
        (
            "lag",
            {"cluster": CLUSTER, "group": "é" * (MAX_GROUP_BYTES // 2 + 1)},  # few characters, too many bytes
            {"group": "longer than Kafka allows a group's name (32,767 bytes in UTF-8)"},
        ),
        (
            "lag",
            {"cluster": CLUSTER, "group": "billing", "topic": "orders"},
            {"topic": "not a field of this request (its fields: cluster, group)"},
        ),
        (
            "delete",  # a misspelt topic must not remove the whole group
            {"cluster": CLUSTER, "group": "billing", "topics": "orders"},
            {"topics": "not a field of this request (its fields: cluster, group, topic)"},
        ),
        (
            "delete",
            {"cluster": CLUSTER, "group": "billing", "topic": "t" * 250},
            {"topic": "longer than Kafka allows a topic's name (249)"},
        ),
        (
            "delete",
            {"cluster": "no such/cluster", "group": 5},
            {"cluster": "'no such/cluster' is not a cluster name", "group": "must be a non-empty string"},
        ),
    ],
)
async def test_a_body_that_names_no_group_is_a_400_listing_every_problem(api, http, redis, route, doc, errors):
    status, body, _ = await post(http, f"{api.url}{BASE}/{route}", doc, headers=AUTHORIZED)
    assert (status, body["error"], body["message"]) == (400, True, "invalid request")
    assert {field: problem[: len(errors[field])] for field, problem in body["errors"].items()} == errors
    assert await redis.exists(keys.group_windows(CLUSTER, "billing"))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"cluster=local&group=billing", "request body is not valid JSON"),
        (b'["local", "billing"]', "request body must be a JSON object"),
        (b"", "request body is not valid JSON"),
    ],
)
async def test_a_body_that_is_no_json_object_is_a_400(api, http, data, message):
    status, body, _ = await call(http, "POST", f"{api.url}{BASE}/status", data=data)
    assert (status, body["message"]) == (400, message)


async def test_the_routes_take_posts_only(api, http):
    status, body, headers = await call(http, "GET", f"{api.url}{BASE}/status")
    assert (status, body["message"], headers["Allow"]) == (405, "method GET not allowed (allowed: POST)", "POST")
    status, _, headers = await call(http, "DELETE", f"{api.url}{BASE}/delete", headers=AUTHORIZED)
    assert (status, headers["Allow"]) == (405, "POST")
