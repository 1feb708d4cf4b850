"""A lag-seconds threshold through the api's `/api/v1/subscriptions`: validated, shown, and indexed in Redis for the
evaluators (`lw:n:{notify}:lag-thresholds`) as the subscription is created, changed and deleted."""

import json

from lagwatch.shared.protocol import keys
from tests.services.api.test_subscriptions_api import BASE, api  # noqa: F401 (the fixture)

HOOK = "http://127.0.0.1:9/hook"


async def test_the_threshold_is_validated_shown_and_indexed_for_the_evaluators(api, redis):  # noqa: F811
    status, body = await api("POST", BASE, {"id": "slow", "url": HOOK, "lag_seconds_threshold": -5})
    assert status == 400 and body["errors"] == {"lag_seconds_threshold": "must be >= 0, got -5"}
    status, body = await api("POST", BASE, {"id": "slow", "url": HOOK, "lag_seconds_threshold": 300})
    assert status == 201 and body["subscription"]["lag_seconds_threshold"] == 300
    assert json.loads(await redis.hget(keys.LAG_THRESHOLDS, "slow")) == {"seconds": 300.0, "clusters": []}
    status, _ = await api("POST", BASE, {"id": "slow", "url": HOOK, "lag_seconds_threshold": 60})
    assert status == 409  # the refused create leaves the index alone
    assert json.loads(await redis.hget(keys.LAG_THRESHOLDS, "slow"))["seconds"] == 300.0
    status, _ = await api("PATCH", f"{BASE}/slow", {"lag_seconds_threshold": 90, "clusters": ["prod"]})
    assert status == 200
    assert json.loads(await redis.hget(keys.LAG_THRESHOLDS, "slow")) == {"seconds": 90.0, "clusters": ["prod"]}
    status, _ = await api("PATCH", f"{BASE}/slow", {"lag_seconds_threshold": 0})
    assert status == 200 and await redis.hlen(keys.LAG_THRESHOLDS) == 0  # 0 = off
    await api("PATCH", f"{BASE}/slow", {"lag_seconds_threshold": 30})
    status, _ = await api("DELETE", f"{BASE}/slow")
    assert status == 200 and await redis.hlen(keys.LAG_THRESHOLDS) == 0


async def test_a_retention_risk_threshold_is_validated_and_indexed_beside_the_lag_threshold(api, redis):  # noqa: F811
    status, body = await api("POST", BASE, {"id": "risky", "url": HOOK, "retention_risk_threshold": -1})
    assert status == 400 and body["errors"] == {"retention_risk_threshold": "must be >= 0, got -1"}
    status, body = await api("POST", BASE, {"id": "risky", "url": HOOK, "retention_risk_threshold": 3600})
    assert status == 201 and body["subscription"]["retention_risk_threshold"] == 3600
    entry = json.loads(await redis.hget(keys.LAG_THRESHOLDS, "risky"))
    assert entry == {"seconds": 0.0, "retention_seconds": 3600.0, "clusters": []}
    status, _ = await api("PATCH", f"{BASE}/risky", {"retention_risk_threshold": 0})
    assert status == 200 and await redis.hlen(keys.LAG_THRESHOLDS) == 0  # 0 = off
