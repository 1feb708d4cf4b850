"""`/api/v1/silences` on the api service: create (token), list with states, get, end (DELETE), validation; what
it writes is what the notifier reads (shared/notifications/subscriptions/silences.py)."""

import time

import pytest

from lagwatch.shared.notifications.subscriptions.silences import SilenceStore
from tests.services.api.test_subscriptions_api import TOKEN, config_for, serving

BASE = "/api/v1/silences"


@pytest.fixture
async def api(redis_server, redis):
    async with serving(config_for(redis_server.url)) as client:
        yield client


def new(**extra):
    return {
        "matchers": [{"name": "group", "value": "billing"}, {"name": "topic", "value": "orders-.*", "regex": True}],
        "ends-at": time.time() + 3600,
        "reason": "deploy of billing",
        "created-by": "alice",
        **extra,
    }


async def test_a_silence_is_created_listed_and_ended(api, redis):
    status, body = await api("POST", BASE, new())
    assert status == 201, body
    made = body["silence"]
    assert made["state"] == "active" and made["created-by"] == "alice" and made["reason"] == "deploy of billing"
    assert made["matchers"][1] == {"name": "topic", "value": "orders-.*", "regex": True}
    later = new(**{"starts-at": time.time() + 600, "ends-at": time.time() + 1200})
    status, body = await api("POST", BASE, later)
    assert status == 201 and body["silence"]["state"] == "pending"
    pending_id = body["silence"]["id"]

    status, body = await api("GET", BASE)
    assert status == 200 and [s["state"] for s in body["silences"]] == ["active", "pending"]
    status, body = await api("GET", BASE + "?state=pending")
    assert [s["id"] for s in body["silences"]] == [pending_id]
    assert (await api("GET", f"{BASE}/{made['id']}"))[1]["silence"]["id"] == made["id"]

    status, body = await api("DELETE", f"{BASE}/{made['id']}")
    assert status == 200 and body["silence"]["state"] == "expired" and body["silence"]["ends-at"] <= time.time()
    (stored,) = [s for s in await SilenceStore(redis).all() if s.id == made["id"]]
    assert stored.ends_at <= time.time()  # what the notifiers read
    assert (await api("GET", BASE + "?state=active"))[1]["silences"] == []
    assert (await api("DELETE", f"{BASE}/sil-nope"))[0] == 404
    assert (await api("GET", f"{BASE}/sil-nope"))[0] == 404


async def test_silences_need_the_token_and_valid_fields(api):
    assert (await api("POST", BASE, new(), headers={}))[0] == 401
    assert (await api("POST", BASE, new(), headers={"Authorization": f"Bearer {TOKEN}x"}))[0] == 401
    status, body = await api("POST", BASE, {"matchers": [{"name": "owner", "value": "x"}], "ends-at": 1})
    assert status == 400 and body["message"] == "invalid silence"
    assert set(body["errors"]) == {"matchers[0].name", "ends-at", "created-by"}
    assert (await api("POST", BASE, raw="[1]"))[0] == 400
    surrogate = (
        '{"matchers": [{"name": "group", "value": "\\ud800", "regex": true}], "ends-at": 2e9, "created-by": "a"}'
    )
    status, body = await api("POST", BASE, raw=surrogate)  # a lone surrogate is no text for the regex: 400, not 500
    assert status == 400 and "lone surrogate" in body["message"], body
    assert (await api("GET", BASE + "?state=soon"))[0] == 400
    assert (await api("GET", BASE))[1]["silences"] == []


async def test_the_cap_counts_silences_not_ended_and_the_record_of_ended_ones_stays_bounded(api, redis, monkeypatch):
    """Ended silences are kept for the record, but they neither block new ones (a token holder creating and ending
    silences could otherwise block every new one for a week) nor grow without bound."""
    from lagwatch.services.api import silence_routes
    from lagwatch.shared.notifications.subscriptions import silences

    monkeypatch.setattr(silence_routes, "MAX_SILENCES", 3)
    monkeypatch.setattr(silences, "MAX_SILENCES", 3)
    made = [(await api("POST", BASE, new()))[1]["silence"]["id"] for _ in range(3)]
    status, body = await api("POST", BASE, new())
    assert status == 409 and "pending or active" in body["message"]
    for _ in range(5):  # end one, make one: always room
        assert (await api("DELETE", f"{BASE}/{made.pop(0)}"))[0] == 200
        status, body = await api("POST", BASE, new())
        assert status == 201, body
        made.append(body["silence"]["id"])
    kept = await SilenceStore(redis).all()
    now = time.time()
    assert sum(s.ends_at > now for s in kept) == 3 and sum(s.ends_at <= now for s in kept) <= 3
