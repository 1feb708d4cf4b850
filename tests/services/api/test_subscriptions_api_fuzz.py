"""Property-based: whatever JSON a token holder sends to `/api/v1/subscriptions`, the api answers 2xx or a 4xx JSON
error — never a 500 — and whatever it stores, a notifier can load and use."""

import asyncio
import json
import threading
import urllib.error
import urllib.request

import pytest
import redis as sync_redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lagwatch.services.api.service import ApiServer
from lagwatch.services.notifier.subscriptions import compile_subscription
from lagwatch.shared.notifications.subscriptions.documents import SOURCE_API
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.config import SubscriptionConfig, build_section
from tests.services.api.test_subscriptions_api import AUTH, BASE, config_for

OPTIONS = [
    "id",
    "type",
    "url",
    "secret",
    "method",
    "headers",
    "body_template",
    "url_template",
    "threshold",
    "send_close",
    "send_once",
    "send_interval",
    "lag_seconds_threshold",
    "group_allowlist",
    "group_denylist",
    "clusters",
    "extras",
    "source",
]
URLS = st.sampled_from(
    ["http://127.0.0.1:9/hook", "http://[::1]:9/", "https://93.184.216.34/x?sig=abc", "http://169.254.169.254/"]
)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | URLS
JSON = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
)
NESTED_LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{{ i }}{% endfor %}{% endfor %}"
CATASTROPHIC_REGEX = "^(a|aa)*$"  # exponential for a backtracking engine on "aaa...a!"
HOSTILE = ["{{ 2**99999 }}", NESTED_LOOPS, CATASTROPHIC_REGEX, "(?!x)a", "(a"]
VALUES = JSON | st.sampled_from(["WARN", "ERR", "slack", "webhook", "PUT", "{{ event.group }}", *HOSTILE])
# mostly valid documents with a few odd values (those reach the deepest checks), and anything at all
NEARLY_VALID = st.fixed_dictionaries({"url": URLS}, optional={name: VALUES for name in OPTIONS if name != "url"})
DOCUMENTS = NEARLY_VALID | st.dictionaries(st.sampled_from(OPTIONS) | st.text(max_size=8), VALUES, max_size=8) | JSON


@pytest.fixture(scope="module")
def api(_shared_redis_server):
    """The api in a thread of its own (hypothesis drives it from plain, synchronous test code)."""
    server = ApiServer(config_for(_shared_redis_server.url), port=0)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.run(),), daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(asyncio.wait_for(server.started.wait(), 30), loop).result(timeout=60)
    yield server.url, _shared_redis_server.url
    loop.call_soon_threadsafe(server.stopping.set)
    thread.join(timeout=30)


def call(url: str, method: str, body: bytes) -> tuple[int, dict]:
    headers = {**AUTH, "Content-Type": "application/json"}
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@example(doc={"url": "http://127.0.0.1:9/", "send_interval": float("inf")}, method="POST")  # issue 18, row 1
@example(doc={"url": "http://127.0.0.1:9/", "body_template": "{{ 2**100000 }}"}, method="PATCH")  # row 5
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=DOCUMENTS, method=st.sampled_from(["POST", "PUT", "PATCH"]))
def test_any_json_body_gets_2xx_or_a_4xx_json_error_and_what_is_stored_can_be_used(api, doc, method):
    api_url, redis_url = api
    store = sync_redis.Redis.from_url(redis_url)
    path = BASE if method == "POST" else f"{BASE}/fuzz"
    if method != "POST":
        call(api_url + BASE, "POST", json.dumps({"id": "fuzz", "url": "http://127.0.0.1:9/"}).encode())
    status, body = call(api_url + path, method, json.dumps(doc).encode())
    assert status < 500 and isinstance(body, dict) and body["error"] is (status >= 400), (status, body)
    for sub_id, text in store.hgetall(keys.SUBSCRIPTIONS).items():
        config = build_section(SubscriptionConfig, {k.replace("_", "-"): v for k, v in json.loads(text).items()})
        assert compile_subscription(config, SOURCE_API).id == sub_id.decode()
    store.delete(keys.SUBSCRIPTIONS)
