"""Burrow's `/v3/config...` and `/v3/admin/loglevel` routes (services/api/config_routes.py): Burrow's shapes and
messages, from lagwatch's configuration; no secret shown; the log level set only with the token."""

import dataclasses
import logging

import pytest

from lagwatch.shared.notifications.subscriptions.store import SubscriptionStore
from lagwatch.shared.runtime.config import SubscriptionConfig
from tests.services.api.test_api import api_config, call, envelope, get, serving

TOKEN = "config-routes-token-123"
SLACK_SECRET = "T000/B000/XXXXSECRETXXXX"


@pytest.fixture
async def api(redis_server, redis):
    config = api_config(redis_server.url, API__TOKEN=TOKEN, API__ACCESS_CONTROL_ALLOW_ORIGIN="https://dash.example.com")
    hook = SubscriptionConfig(id="hook", url="https://alerts.example.com/burrow?key=abcdefgh", threshold="ERR")
    config = dataclasses.replace(config, subscriptions=[hook])
    await SubscriptionStore(redis).put(
        SubscriptionConfig(id="ops", type="slack", url=f"https://hooks.slack.com/services/{SLACK_SECRET}"), create=True
    )
    async with serving(config) as server:
        yield server


async def test_the_main_config_in_burrows_shape(api, http):
    status, body = await get(http, f"{api.url}/v3/config")
    assert status == 200 and body["message"] == "main config returned" and body["error"] is False
    assert body["general"] == {
        "pidfile": "",
        "stdout-logfile": "",
        "access-control-allow-origin": "https://dash.example.com",
    }
    # the configured address, as Burrow shows its own (this test's server took a free port instead)
    assert body["httpserver"] == {"default": {"address": "127.0.0.1:8000", "tls": "", "timeout": 30}}
    assert body["zookeeper"] == {"servers": [], "timeout": 0, "root-path": ""}
    assert set(body["logging"]) == {
        "filename", "max-size", "max-backups", "max-age", "use-local-time", "use-compression", "level"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("coordinator", "modules"),
    [("storage", ["default"]), ("evaluator", ["default"]), ("cluster", ["local"]), ("consumer", ["local"]),
     ("notifier", ["hook", "ops"])],
)  # fmt: skip
async def test_each_coordinator_lists_its_modules(api, http, coordinator, modules):
    path = f"/v3/config/{coordinator}"
    assert await get(http, f"{api.url}{path}") == (
        200,
        envelope(path, "module list returned", coordinator=coordinator, modules=modules),
    )


async def test_module_details(api, http):
    status, storage = await get(http, f"{api.url}/v3/config/storage/default")
    assert (status, storage["message"]) == (200, "storage module detail returned")
    assert storage["module"] == {
        "class-name": "redis", "intervals": 3, "min-distance": 0, "group-allowlist": "", "expire-group": 604800
    }  # fmt: skip
    _, consumer = await get(http, f"{api.url}/v3/config/consumer/local")
    assert {k: consumer["module"][k] for k in ("class-name", "cluster", "offsets-topic", "start-latest")} == {
        "class-name": "kafka", "cluster": "local", "offsets-topic": "__consumer_offsets", "start-latest": False
    }  # fmt: skip
    _, cluster = await get(http, f"{api.url}/v3/config/cluster/local")
    assert cluster["module"] == (await get(http, f"{api.url}/v3/kafka/local"))[1]["module"]  # one handler, as Burrow


async def test_notifiers_are_the_subscriptions_in_burrows_shapes_masked(api, http):
    _, hook = await get(http, f"{api.url}/v3/config/notifier/hook")
    assert (hook["module"]["class-name"], hook["module"]["threshold"]) == ("http", 3)  # ERR, in Burrow's numbers
    assert hook["module"]["url-open"].startswith("https://alerts.example.com/") and "abcdefgh" not in str(hook)
    status, slack = await get(http, f"{api.url}/v3/config/notifier/ops")
    assert status == 200 and slack["module"]["class-name"] == "slack" and SLACK_SECRET not in str(slack)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/v3/config/storage/other", "storage module not found"),
        ("/v3/config/evaluator/x", "evaluator module not found"),
        ("/v3/config/consumer/nope", "consumer module not found"),
        ("/v3/config/notifier/nope", "notifier module not found"),
        ("/v3/config/cluster/nope", "cluster module not found"),
    ],
)
async def test_an_unknown_module_is_burrows_404(api, http, path, message):
    status, body = await get(http, f"{api.url}{path}")
    assert (status, body["error"], body["message"]) == (404, True, message)


async def test_the_log_level_is_read_and_set_with_the_token_only(api, http):
    root = logging.getLogger()
    before = root.level
    try:
        root.setLevel(logging.INFO)
        assert (await get(http, f"{api.url}/v3/admin/loglevel"))[1]["level"] == "info"
        status, _, _ = await call(http, "POST", f"{api.url}/v3/admin/loglevel", json={"level": "debug"})
        assert status == 401 and root.level == logging.INFO
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        status, body, _ = await call(
            http, "POST", f"{api.url}/v3/admin/loglevel", json={"level": "loud"}, headers=bearer
        )
        assert status == 400 and "level must be one of debug, info, warn, error" in body["message"]
        status, body, _ = await call(
            http, "POST", f"{api.url}/v3/admin/loglevel", json={"level": "debug"}, headers=bearer
        )
        assert (status, body["message"]) == (200, "set log level") and root.level == logging.DEBUG
        assert (await get(http, f"{api.url}/v3/admin/loglevel"))[1]["level"] == "debug"
    finally:
        root.setLevel(before)
