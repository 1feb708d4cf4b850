"""Burrow's HTTP notifier options on real receivers: `url-close` / `method-close` for closes, basic auth
(`username` / `password`), a subscription's own `timeout`, and TLS trust (`extra-ca`, `noverify`) against an HTTPS
receiver whose certificate only a test CA vouches for. And through the api: the password and url-close are masked,
a password does not follow a moved URL, url-close keeps url's host, and extra-ca paths are refused."""

import asyncio
import base64
import ssl
from pathlib import Path

import pytest
from aiohttp import web

from lagwatch.services.notifier import subscriptions
from lagwatch.services.notifier.outbox import Delivery
from lagwatch.shared.events.status_event import encode
from lagwatch.shared.notifications.subscriptions.store import SubscriptionStore
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.config import load_config
from tests.services.api.test_subscriptions_api import BASE, serving
from tests.services.api.test_subscriptions_api import config_for as api_config
from tests.services.notifier.test_notifier_delivery import config_for as delivery_config
from tests.services.notifier.test_notifier_delivery import dispatching, enqueue, open_event, outbox_empty
from tests.services.notifier.test_notifier_support import Receiver, Timeline, typed
from tests.tls_helpers import make_ca


def close_event(group="billing"):
    t = Timeline(group)
    t.to("OK")
    opened = t.to("ERR", (500, 0))
    return opened, t.to("OK")


async def enqueue_kind(outbox, event, kind, sub_id="hook"):
    d = Delivery(f"{event['event_id']}.{sub_id}.{kind}", sub_id, kind, typed(event), event["event_id"], now_ms())
    assert await outbox.enqueue(d)


async def test_closes_go_to_url_close_with_method_close_and_opens_to_url(redis_server, redis, kafka):
    async with Receiver() as receiver:
        sub = {"id": "hook", "url": receiver.url("/v1/event"), "url_close": receiver.url("/v1/event/close"),
               "method_close": "DELETE"}  # fmt: skip
        opened, closed = close_event()
        async with dispatching(delivery_config(kafka, redis_server, [sub])) as (outbox, _):
            await enqueue_kind(outbox, opened, "open")
            await receiver.wait_for(1)
            await enqueue_kind(outbox, closed, "close")
            await receiver.wait_for(2)
            await asyncio.wait_for(_empty(redis), 10)
    first, second = receiver.requests
    assert (first.method, first.path, first.headers["X-Lagwatch-Notification"]) == ("POST", "/v1/event", "open")
    assert (second.method, second.path, second.headers["X-Lagwatch-Notification"]) == (
        "DELETE",
        "/v1/event/close",
        "close",
    )
    assert second.body == encode(closed)  # Burrow sends its close template's body with the DELETE too


async def test_basic_auth_is_sent_as_gos_set_basic_auth_does(redis_server, redis, kafka):
    async with Receiver() as receiver:
        sub = {"id": "hook", "url": receiver.url(), "username": "burrow", "password": "pässwörd:1"}
        async with dispatching(delivery_config(kafka, redis_server, [sub])) as (outbox, _):
            await enqueue(outbox, open_event())
            (request,) = await receiver.wait_for(1)
    scheme, _, encoded = request.headers["Authorization"].partition(" ")
    assert scheme == "Basic"
    assert base64.b64decode(encoded).decode("utf-8") == "burrow:pässwörd:1"  # UTF-8, as Go sends the bytes


async def test_a_subscriptions_own_timeout_cuts_a_hanging_receiver_short(redis_server, redis, kafka):
    async with Receiver(script=["hang"]) as receiver:
        sub = {"id": "hook", "url": receiver.url(), "timeout": 0.3}
        config = delivery_config(kafka, redis_server, [sub], NOTIFIER__REQUEST_TIMEOUT="20")
        async with dispatching(config) as (outbox, _):
            started = asyncio.get_running_loop().time()
            await enqueue(outbox, open_event())
            await receiver.wait_for(2)  # the first attempt timed out after 0.3 s (not 20 s) and was retried
            elapsed = asyncio.get_running_loop().time() - started
    assert elapsed < 10, elapsed


# --- TLS --------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def test_ca(tmp_path_factory) -> dict[str, Path]:
    """A CA and a server certificate for 127.0.0.1 it signed (made with the openssl command)."""
    return make_ca(tmp_path_factory.mktemp("tls"))


class TlsReceiver(Receiver):
    """The recording receiver, over HTTPS."""

    def __init__(self, cert: Path, key: Path, **kwargs) -> None:
        super().__init__(**kwargs)
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(cert, key)

    async def start(self):
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.context).start()
        self.port = self._runner.addresses[0][1]
        self._hangs = []
        return self

    def url(self, path: str = "/hook") -> str:
        return f"https://127.0.0.1:{self.port}{path}"


@pytest.mark.parametrize("trust", ["extra-ca-pem", "extra-ca-file", "noverify"])
async def test_https_to_a_private_ca_works_with_extra_ca_or_noverify(redis_server, redis, kafka, test_ca, trust):
    async with TlsReceiver(test_ca["cert"], test_ca["key"]) as receiver:
        options = {
            "extra-ca-pem": {"extra_ca": test_ca["ca"].read_text()},
            "extra-ca-file": {"extra_ca": str(test_ca["ca"])},
            "noverify": {"noverify": True},
        }[trust]
        async with dispatching(
            delivery_config(kafka, redis_server, [{"id": "hook", "url": receiver.url(), **options}])
        ) as (
            outbox,
            _,
        ):
            event = open_event()
            await enqueue(outbox, event)
            (request,) = await receiver.wait_for(1)
            await asyncio.wait_for(_empty(redis), 10)
    assert request.body == encode(event)


async def test_https_to_a_private_ca_fails_without_it(redis_server, redis, kafka, test_ca, caplog):
    async with TlsReceiver(test_ca["cert"], test_ca["key"]) as receiver:
        config = delivery_config(kafka, redis_server, [{"id": "hook", "url": receiver.url()}])
        async with dispatching(config) as (outbox, _):
            await enqueue(outbox, open_event())
            await asyncio.sleep(1.5)  # attempts fail in the TLS handshake: nothing reaches the handler
    assert receiver.requests == []
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text or "certificate verify failed" in caplog.text


def test_a_configured_extra_ca_that_is_no_certificate_names_its_key(tmp_path):
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    path = tmp_path / "lagwatch.yaml"
    path.write_text(
        "notifier: {allow-private-targets: true}\n"
        f"subscriptions:\n  - {{id: hook, url: 'https://127.0.0.1:9/x', extra-ca: '{bad}'}}\n"
    )
    with pytest.raises(Exception, match=r"subscriptions\[0\]\.extra-ca"):
        subscriptions.from_config(load_config(path, env={}))


# --- the api ----------------------------------------------------------------------------------------------------


async def test_the_api_masks_the_password_and_url_close_and_keeps_them_when_sent_back(redis_server, redis):
    async with serving(api_config(redis_server.url)) as api:
        doc = {"id": "b", "url": "http://127.0.0.1:9/v1/event", "url_close": "http://127.0.0.1:9/v1/close/abcd1234",
               "method_close": "DELETE", "username": "burrow", "password": "a-long-basic-auth-password"}  # fmt: skip
        status, body = await api("POST", BASE, doc)
        assert status == 201, body
        shown = body["subscription"]
        assert shown["password"] == "****word" and "a-long" not in str(shown)
        assert shown["url_close"] == "http://127.0.0.1:9/****1234"
        assert (shown["username"], shown["method_close"]) == ("burrow", "DELETE")
        status, body = await api("PUT", f"{BASE}/b", {**shown, "threshold": "ERR"})  # what GET showed, sent back
        assert status == 200, body
        stored = await SubscriptionStore(redis).get("b")
        assert (stored.password, stored.url_close) == ("a-long-basic-auth-password", doc["url_close"])


async def test_a_password_does_not_follow_a_url_to_another_host(redis_server, redis):
    async with serving(api_config(redis_server.url)) as api:
        doc = {"id": "b", "url": "http://127.0.0.1:9/hook", "username": "burrow", "password": "basic-auth-password"}
        assert (await api("POST", BASE, doc))[0] == 201
        status, body = await api("PATCH", f"{BASE}/b", {"url": "http://127.0.0.2:9/hook"})
        assert status == 200, body
        stored = await SubscriptionStore(redis).get("b")
        assert (stored.username, stored.password) == ("", "")
        shown = body["subscription"]
        status, body = await api("PATCH", f"{BASE}/b", {"password": shown["password"] or "****word"})
        assert status == 400  # a masked value is never sent as a password


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        ({"url_close": "http://127.0.0.2:9/close"}, "url_close", "must keep url's scheme, host and port"),
        ({"url_close": "http://169.254.169.254/latest"}, "url_close", "metadata"),
        ({"extra_ca": "/etc/passwd"}, "extra_ca", "PEM text"),
        ({"extra_ca": "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n"}, "extra_ca", "no usable"),
        ({"username": "a:b", "password": "x"}, "username", "cannot contain ':'"),
        ({"username": "a", "headers": {"Authorization": "Bearer x"}}, "username", "either"),
        ({"method_close": "GET"}, "method_close", "must be one of"),
        ({"timeout": 301}, "timeout", "must be <= 300"),
    ],
)
async def test_the_api_refuses_unsafe_or_contradictory_burrow_options(redis_server, redis, change, field, problem):
    async with serving(api_config(redis_server.url)) as api:
        status, body = await api("POST", BASE, {"url": "http://127.0.0.1:9/hook", **change})
    assert status == 400, body
    assert problem in body["errors"][field], body["errors"]


async def _empty(redis):
    while not await outbox_empty(redis):
        await asyncio.sleep(0.02)
