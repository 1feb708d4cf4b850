"""`/api/v1/subscriptions` on the api service: CRUD, the bearer token, validation (400 with every field error),
secret masking, SSRF refusals, and read-only subscriptions from the configuration file."""

import asyncio
import contextlib
import dataclasses
import json
import logging
import time

import aiohttp
import pytest

from lagwatch.services.api.service import ApiServer
from lagwatch.shared.notifications.subscriptions.store import SubscriptionStore
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.config import SubscriptionConfig, load_config
from tests.kafka_helpers import running
from tests.services.api.test_api import seed

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SLACK_URL = "http://127.0.0.1:9/services/T000/B000/XXXXXXXXXXXXXXXXXXXXabcd"
BASE = "/api/v1/subscriptions"


def config_for(redis_url, *, token=TOKEN, allow_private="true", subscriptions=()):
    config = load_config(
        env={
            "REDIS_URL": redis_url,
            "LAGWATCH__API__TOKEN": token,
            "LAGWATCH__NOTIFIER__ALLOW_PRIVATE_TARGETS": allow_private,
        }
    )
    return dataclasses.replace(config, subscriptions=list(subscriptions))


@contextlib.asynccontextmanager
async def serving(config):
    async with running(ApiServer(config, port=0)) as server, aiohttp.ClientSession() as http:
        await asyncio.wait_for(server.started.wait(), 10)
        yield Client(http, server.url)


@dataclasses.dataclass
class Client:
    http: aiohttp.ClientSession
    base: str

    async def __call__(self, method, path, body=None, *, headers=AUTH, raw=None):
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        async with self.http.request(method, self.base + path, data=data, headers=headers) as response:
            return response.status, await response.json()


@pytest.fixture
async def api(redis_server, redis):
    async with serving(config_for(redis_server.url)) as client:
        yield client


async def test_create_list_get_update_delete(api, redis):
    status, body = await api(
        "POST", BASE, {"type": "slack", "url": SLACK_URL, "threshold": "ERR", "send_interval": 600}
    )
    assert status == 201 and body["error"] is False and body["message"] == "subscription created"
    created = body["subscription"]
    sub_id = created["id"]
    assert sub_id.startswith("sub-") and created["source"] == "api"
    assert created["url"] == "http://127.0.0.1:9/****abcd"
    assert (created["threshold"], created["send_interval"], created["send_close"], created["send_once"]) == (
        "ERR",
        600.0,
        True,
        False,
    )
    stored = await SubscriptionStore(redis).get(sub_id)
    assert stored.url == SLACK_URL  # the real URL is kept

    status, body = await api("GET", BASE)
    assert status == 200 and [s["id"] for s in body["subscriptions"]] == [sub_id]
    status, body = await api("GET", f"{BASE}/{sub_id}", headers={})  # reads need no token
    assert status == 200 and body["subscription"] == created

    status, body = await api("PATCH", f"{BASE}/{sub_id}", {"threshold": "WARN", "url": created["url"]})
    assert status == 200 and body["subscription"]["threshold"] == "WARN"
    assert (await SubscriptionStore(redis).get(sub_id)).url == SLACK_URL  # masked value sent back: kept

    status, body = await api("PUT", f"{BASE}/{sub_id}", {"type": "webhook", "url": "http://127.0.0.1:9/new"})
    assert status == 200 and body["subscription"]["threshold"] == "WARN" and body["subscription"]["type"] == "webhook"
    status, body = await api("PUT", f"{BASE}/{sub_id}", {"type": "webhook"})  # PUT replaces: url is required
    assert status == 400 and body["errors"] == {"url": "required"}

    version = int(await redis.get(keys.SUBSCRIPTIONS_VERSION))
    status, body = await api("DELETE", f"{BASE}/{sub_id}")
    assert (status, body["message"]) == (200, "subscription deleted")
    assert int(await redis.get(keys.SUBSCRIPTIONS_VERSION)) == version + 1  # notifiers reload
    assert (await api("GET", f"{BASE}/{sub_id}"))[0] == 404
    assert (await api("DELETE", f"{BASE}/{sub_id}"))[0] == 404


async def test_a_chosen_id_must_be_free(api):
    doc = {"id": "team-a", "url": "http://127.0.0.1:9/x"}
    assert (await api("POST", BASE, doc))[0] == 201
    status, body = await api("POST", BASE, doc)
    assert status == 409 and body["message"] == "a subscription with id 'team-a' exists"
    status, body = await api("PUT", f"{BASE}/team-a", {**doc, "id": "team-b"})
    assert status == 400 and body["errors"] == {"id": "cannot be changed"}


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
async def test_mutations_need_the_bearer_token(api, method):
    path = BASE if method == "POST" else f"{BASE}/x"
    status, body = await api(method, path, {"url": "http://127.0.0.1:9/"}, headers={})
    assert (status, body["message"]) == (401, "a bearer token is required")
    status, _ = await api(method, path, {"url": "http://127.0.0.1:9/"}, headers={"Authorization": "Bearer wrong"})
    assert status == 401


async def test_mutations_are_refused_without_a_configured_token(redis_server, redis):
    async with serving(config_for(redis_server.url, token="")) as api:
        status, _ = await api("POST", BASE, {"url": "http://127.0.0.1:9/"})
    assert status == 403


async def test_validation_reports_every_field(api, redis):
    status, body = await api(
        "POST",
        BASE,
        {
            "type": "sms",
            "threshold": "STOP",
            "send_interval": -5,
            "send_close": "perhaps",
            "group_allowlist": "(",
            "method": "GET",
            "headers": ["x"],
            "colour": "red",
            "body_template": "{{ oops",
        },
    )
    assert status == 400 and body["error"] is True and body["message"] == "invalid subscription"
    assert set(body["errors"]) == {
        "type",
        "threshold",
        "send_interval",
        "send_close",
        "group_allowlist",
        "method",
        "headers",
        "colour",
        "url",
    }
    assert body["errors"]["url"] == "required" and body["errors"]["colour"] == "unknown option"
    status, body = await api("POST", BASE, {"url": "http://127.0.0.1:9/", "body_template": "{{ oops"})
    assert status == 400 and body["errors"]["body_template"].startswith("template does not compile")
    assert (await api("POST", BASE, raw="{not json"))[0] == 400
    assert (await api("POST", BASE, [1, 2]))[0] == 400
    assert await redis.hlen(keys.SUBSCRIPTIONS) == 0


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
        ("http://[fd00:ec2::254]/", "cloud metadata"),
        ("http://metadata.google.internal/computeMetadata/v1/", "cloud metadata"),
        ("http://169.254.1.1/", "link-local"),
        ("http://[fe80::1]/", "link-local"),
        ("gopher://127.0.0.1:6379/_FLUSHALL", "only http and https"),
        ("file:///etc/passwd", "only http and https"),
        ("http://10.0.0.5/hook", "private"),
        ("http://127.0.0.1:6379/", "private"),
        ("http://localhost:6379/", "private"),  # a name is resolved: 127.0.0.1
        ("http://[::1]:8080/", "private"),
        ("http://no-such-host.invalid/", "cannot resolve"),
        # look-alike digits: the client normalises them to the address, so the guard does first (issue 18 row 2)
        ("http://\uff11\uff12\uff17.\uff10.\uff10.\uff11:47001/", "127.0.0.1 is a private"),
        ("http://127\u30020\u30020\u30021/", "127.0.0.1 is a private"),
        ("http://\u2460\u2461\u2466.\u24ea.\u24ea.\u2460/", "127.0.0.1 is a private"),
        ("http://\uff11\uff16\uff19.\uff12\uff15\uff14.\uff11\uff16\uff19.\uff12\uff15\uff14/", "metadata"),
        # ranges that are not global unicast (row 12)
        ("http://[::127.0.0.1]/", "not a global unicast"),
        ("http://[::ffff:0:7f00:1]/", "not a global unicast"),
        ("http://[64:ff9b:1::a00:1]/", "not a global unicast"),
        ("http://[2002:a00:1::1]/", "not a global unicast"),
        ("http://198.18.0.1/", "not a global unicast"),
        ("http://192.0.0.170/", "not a global unicast"),
    ],
)
async def test_ssrf_targets_are_refused(redis_server, redis, url, problem):
    async with serving(config_for(redis_server.url, allow_private="false")) as api:
        status, body = await api("POST", BASE, {"url": url})
    assert status == 400 and problem in body["errors"]["url"], body


async def test_private_targets_are_allowed_only_by_config_and_metadata_never(api):
    assert (await api("POST", BASE, {"url": "http://127.0.0.1:8080/hook"}))[0] == 201
    status, body = await api("POST", BASE, {"url": "http://169.254.169.254/"})
    assert status == 400 and "metadata" in body["errors"]["url"]


async def test_secrets_are_masked_in_every_answer_and_kept_when_sent_back(api, redis):
    doc = {
        "id": "hook",
        "url": "http://user:pa55word@127.0.0.1:9/hook?token=abcdef123456&team=a",
        "secret": "hmac-key-0123456789",
        "headers": {"Authorization": "Bearer tok-0123456789", "X-Api-Key": "key-0123456789", "X-Team": "a"},
        "extras": {"api_token": "t-0123456789", "team": "payments"},
    }
    status, body = await api("POST", BASE, doc)
    shown = body["subscription"]
    assert shown["url"] == "http://****@127.0.0.1:9/****am=a"
    assert shown["secret"] == "****6789"
    assert shown["headers"] == {"Authorization": "****6789", "X-Api-Key": "****6789", "X-Team": "****"}
    assert shown["extras"] == {"api_token": "****6789", "team": "****"}
    for _, answer in [(status, body), await api("GET", BASE), await api("GET", f"{BASE}/hook")]:
        text = json.dumps(answer)
        assert all(secret not in text for secret in ("pa55word", "abcdef123456", "hmac-key", "tok-0", "key-0", "t-0"))
    status, body = await api("PUT", f"{BASE}/hook", {**shown, "threshold": "ERR"})  # what GET showed, edited
    assert status == 200, body
    stored = await SubscriptionStore(redis).get("hook")
    assert (stored.url, stored.secret, stored.headers, stored.extras) == (
        doc["url"],
        doc["secret"],
        doc["headers"],
        doc["extras"],
    )
    assert stored.threshold == "ERR"


async def test_configured_subscriptions_are_listed_read_only(redis_server, redis):
    from_file = SubscriptionConfig(id="ops", type="slack", url=SLACK_URL, secret="abcdefghijkl-secret")
    async with serving(config_for(redis_server.url, subscriptions=[from_file])) as api:
        status, body = await api("GET", BASE)
        assert [(s["id"], s["source"], s["url"]) for s in body["subscriptions"]] == [
            ("ops", "config", "http://127.0.0.1:9/****abcd")
        ]
        assert (await api("GET", f"{BASE}/ops"))[1]["subscription"]["secret"] == "****cret"
        for method in ("PUT", "PATCH", "DELETE"):
            status, body = await api(method, f"{BASE}/ops", {"url": "http://127.0.0.1:9/"})
            assert status == 409 and "configuration file" in body["message"]
        status, body = await api("POST", BASE, {"id": "ops", "url": "http://127.0.0.1:9/"})
        assert status == 409


@pytest.mark.parametrize(
    "raw",
    [
        '{"url": "http://127.0.0.1:9/", "send_interval": 1e400}',
        '{"url": "http://127.0.0.1:9/", "send_interval": Infinity}',
        '{"url": "http://127.0.0.1:9/", "send_interval": NaN}',
        '{"url": "http://127.0.0.1:9/", "send_interval": "inf"}',
        '{"url": "http://127.0.0.1:9/", "send_interval": 1' + "0" * 400 + "}",
        '{"url": "http://127.0.0.1:9/", "send_interval": 31622401}',
        '{"url": "http://127.0.0.1:9/", "lag_seconds_threshold": -Infinity}',
    ],
)
async def test_numbers_that_are_not_finite_or_beyond_a_year_are_refused(api, redis, raw):
    status, body = await api("POST", BASE, raw=raw)
    assert status == 400 and set(body["errors"]) <= {"send_interval", "lag_seconds_threshold"}, body
    assert await redis.hlen(keys.SUBSCRIPTIONS) == 0
    assert (await api("POST", BASE, {"id": "ok", "url": "http://127.0.0.1:9/", "send_interval": 60}))[0] == 201
    status, body = await api("PATCH", f"{BASE}/ok", raw=raw)
    assert status == 400 and (await SubscriptionStore(redis).get("ok")).send_interval == 60


async def test_an_unreadable_stored_subscription_is_skipped_in_lists_and_can_be_deleted(api, redis):
    await redis.hset(keys.SUBSCRIPTIONS, "old", '{"id": "old", "url": "http://127.0.0.1:9/", "send_interval": 1e400}')
    assert (await api("POST", BASE, {"id": "ok", "url": "http://127.0.0.1:9/"}))[0] == 201
    status, body = await api("GET", BASE)
    assert status == 200 and [s["id"] for s in body["subscriptions"]] == ["ok"]
    status, body = await api("GET", f"{BASE}/old")
    assert status == 404
    assert (await api("DELETE", f"{BASE}/old"))[0] == 200
    assert await redis.hkeys(keys.SUBSCRIPTIONS) == [b"ok"]


@pytest.mark.parametrize(
    ("template", "status", "problem"),
    [
        ('{{ "x"|center(100000000) }}', 400, "budget"),  # Jinja2 computes constants while compiling
        ("{{ 2**100000 }}", 201, None),  # compiles; refused when rendered (over 4096 bits), never computed here
        ("{{ 3**6000000 }}", 201, None),
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", 201, None),
    ],
)
async def test_templates_are_checked_in_a_bounded_worker_not_on_the_api(api, template, status, problem):
    answer_status, body = await api("POST", BASE, {"url": "http://127.0.0.1:9/", "body_template": template})
    assert answer_status == status, body
    if problem:
        assert problem in body["errors"]["body_template"]
    assert (await api("GET", BASE))[0] == 200


async def test_anonymous_readers_see_no_credential_bearing_part(api, redis):
    """Issue 18 row 7: paths, `sig=`/`code=` queries, `user@`, headers and extras with neutral names, templates."""
    doc = {
        "id": "hook",
        "url": "http://ops@127.0.0.1:9/hooks/T0123secretpath?sig=abcdef987654&code=zyxw1234",
        "headers": {"X-Team": "route-77-secret"},
        "extras": {"team": "extra-55-secret"},
        "body_template": "{{ 'tpl-33-secret' }} {{ event.group }}",
        "url_template": "http://127.0.0.1:9/hooks/{{ 'url-tpl-44-secret' }}",
    }
    assert (await api("POST", BASE, doc))[0] == 201
    secrets = ("secretpath", "abcdef987654", "zyxw", "ops", "route-77", "extra-55", "tpl-33", "url-tpl-44")
    for answer in (await api("GET", BASE, headers={}), await api("GET", f"{BASE}/hook", headers={})):
        assert answer[0] == 200 and not [s for s in secrets if s in json.dumps(answer[1])], answer
    _, body = await api("GET", f"{BASE}/hook")  # a token holder sees the templates he wrote
    assert (body["subscription"]["body_template"], body["subscription"]["url_template"]) == (
        doc["body_template"],
        doc["url_template"],
    )


async def test_credentials_stay_with_their_destination_when_the_url_moves(api, redis):
    """Issue 18 row 8: a PATCH of `url` to another host drops the stored secret, headers and extras."""
    doc = {
        "id": "hook",
        "url": "http://127.0.0.1:9/a",
        "secret": "hmac-key-0123456789",
        "headers": {"Authorization": "Bearer tok-0123456789"},
        "extras": {"api_key": "key-0123456789"},
    }
    assert (await api("POST", BASE, doc))[0] == 201
    assert (await api("PATCH", f"{BASE}/hook", {"url": "http://127.0.0.1:9/b"}))[0] == 200  # same host: kept
    stored = await SubscriptionStore(redis).get("hook")
    assert (stored.secret, stored.headers, stored.extras) == (doc["secret"], doc["headers"], doc["extras"])

    status, body = await api("PATCH", f"{BASE}/hook", {"url": "http://127.0.0.2:9/a"})
    assert status == 200 and body["subscription"]["headers"] == {} and body["subscription"]["secret"] == ""
    stored = await SubscriptionStore(redis).get("hook")
    assert (stored.url, stored.secret, stored.headers, stored.extras) == ("http://127.0.0.2:9/a", "", {}, {})

    await SubscriptionStore(redis).put(SubscriptionConfig(**doc), create=False)
    shown = (await api("GET", f"{BASE}/hook"))[1]["subscription"]
    status, body = await api("PUT", f"{BASE}/hook", {**shown, "url": "http://127.0.0.2:9/a"})  # masked, moved
    assert status == 400 and set(body["errors"]) == {"secret", "headers.Authorization", "extras.api_key"}
    assert (await SubscriptionStore(redis).get("hook")).url == doc["url"]
    new = {"url": "http://127.0.0.2:9/a", "headers": {"Authorization": "Bearer for-the-new-host"}}
    assert (await api("PATCH", f"{BASE}/hook", new))[0] == 200  # given again: kept
    assert (await SubscriptionStore(redis).get("hook")).headers == new["headers"]


async def test_a_chunked_body_is_held_to_the_same_limit(api, redis):
    """Issue 18 row 13: without a Content-Length the 256 KiB limit holds too."""

    async def chunks():
        yield b'{"url": "http://127.0.0.1:9/", "extras": {"x": "'
        for _ in range(20):
            yield b"a" * 32 * 1024
        yield b'"}}'

    async with api.http.post(api.base + BASE, data=chunks(), headers=AUTH) as response:
        assert response.status == 413 and (await response.json())["error"] is True
    assert await redis.hlen(keys.SUBSCRIPTIONS) == 0


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        (b'{"url": "http://127.0.0.1:9/"}', "application/json; charset=bogus", None),  # JSON is UTF-8 anyway
        (b'{"url": "http://127.0.0.1:9/\xff"}', "application/json", "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "application/json", "nested too deeply"),
        (b'{"url": "http://127.0.0.1:9/", "secret": "\\ud800"}', "application/json", "lone surrogate"),
        (b'{"url": "http://127.0.0.1:9/", "group_allowlist": "\\udfff"}', "application/json", "lone surrogate"),
        (b'{"url": "http://127.0.0.1:9/", "headers": {"\\ud800": "x"}}', "application/json", "lone surrogate"),
    ],
)
async def test_bad_encodings_are_400_not_500(api, body, content_type, message, caplog):
    """Issue 18 row 14: a JSON answer, and no traceback in the log."""
    headers = {**AUTH, "Content-Type": content_type}
    with caplog.at_level(logging.INFO):
        async with api.http.post(api.base + BASE, data=body, headers=headers) as response:
            answer = await response.json()
    if message is None:
        assert response.status == 201, answer
    else:
        assert response.status == 400 and message in answer["message"], answer
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], caplog.text[:2000]


async def test_the_number_of_subscriptions_is_capped(api, redis):
    """Issue 18 row 13: at most 10,000 through the api (filled here straight into Redis, as 10,000 POSTs would)."""
    doc = '{"id": "%s", "url": "http://127.0.0.1:9/"}'
    await redis.hset(keys.SUBSCRIPTIONS, mapping={f"s{i}": doc % f"s{i}" for i in range(1, 10_000)})
    assert (await api("POST", BASE, {"id": "s0", "url": "http://127.0.0.1:9/"}))[0] == 201  # the 10,000th
    status, body = await api("POST", BASE, {"id": "s10000", "url": "http://127.0.0.1:9/"})
    assert status == 409 and "10000 subscriptions already" in body["message"], body
    assert await redis.hlen(keys.SUBSCRIPTIONS) == 10_000
    assert (await api("PATCH", f"{BASE}/s0", {"threshold": "ERR"}))[0] == 200  # changes are still allowed


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"id": "team-a\n", "url": "http://127.0.0.1:9/x"}, "id"),
        ({"type": "pagerduty", "url": "http://127.0.0.1:9/x", "routing_key": "R0UT1NGKEY0123\n"}, "routing_key"),
        ({"type": "email", "smtp_host": "127.0.0.1", "from": "lw@example.com\n", "to": ["ops@example.com"]}, "from"),
        ({"type": "email", "smtp_host": "127.0.0.1", "from": "lw@example.com", "to": ["ops@example.com\n"]}, "to"),
    ],
)
async def test_a_value_ending_in_a_newline_is_refused(api, redis, doc, field):
    # a `^...$` pattern lets one trailing newline through: the id would then break the Location and
    # X-Lagwatch-Subscription headers, the address an email's headers
    status, body = await api("POST", BASE, doc)
    assert status == 400 and field in body["errors"], body
    assert await redis.hlen(keys.SUBSCRIPTIONS) == 0


async def test_a_refused_value_is_quoted_short_not_sent_back_whole(api, redis):
    status, body = await api("POST", BASE, {"url": "http://127.0.0.1:9/", "send_close": ["x" * 100_000]})
    assert status == 400 and body["errors"]["send_close"].startswith("expected true or false, got [")
    assert len(body["errors"]["send_close"]) < 300 and "characters)" in body["errors"]["send_close"]


async def test_a_write_says_how_many_known_groups_it_covers_and_when_none(api, redis):
    """A typo in a regex would cover no group, and nothing would say so before the incident nobody hears of."""
    await seed(redis, int(time.time() * 1000))  # billing and audit, with their statuses
    doc = {"type": "webhook", "url": "http://127.0.0.1:9/hook", "group_allowlist": "^billing$"}
    status, body = await api("POST", BASE, doc)
    assert (status, body["message"], body["coverage"]) == (201, "subscription created", {"groups": 1, "known": 2})

    status, body = await api("POST", BASE, {**doc, "group_allowlist": "^biling$"})
    assert (status, body["coverage"]) == (201, {"groups": 0, "known": 2})
    assert body["message"] == (
        "subscription created; it covers none of the 2 consumer groups known now"
        " (see its clusters, group-allowlist and group-denylist)"
    )
    status, body = await api("PATCH", f"{BASE}/{body['subscription']['id']}", {"group_allowlist": "bill|aud"})
    assert (status, body["message"], body["coverage"]) == (200, "subscription updated", {"groups": 2, "known": 2})
    status, body = await api("PATCH", f"{BASE}/{body['subscription']['id']}", {"group_denylist": "audit"})
    assert body["coverage"] == {"groups": 1, "known": 2}
