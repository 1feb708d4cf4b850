"""The destination types beyond Slack and webhooks, each delivered by the notifier's delivery loop (outbox ->
Dispatcher) to the real thing or a real server standing in for it: a real Alertmanager routing to a local webhook
receiver, a local HTTP server as PagerDuty's Events API and as a Teams workflow, and a local aiosmtpd SMTP server
with STARTTLS and AUTH."""

import asyncio
import contextlib
import json
import shutil
import ssl
import subprocess
import time
from datetime import datetime
from email import message_from_bytes
from email.policy import default as default_policy

import aiohttp
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from lagwatch.services.notifier.channels import SendFailure
from lagwatch.services.notifier.channels import email as email_channel
from lagwatch.services.notifier.dlq import read_dead_letters
from lagwatch.services.notifier.outbox import Delivery
from lagwatch.shared.notifications.delivery import signing
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.config import SubscriptionConfig
from tests.kafka_helpers import eventually
from tests.net_helpers import free_port
from tests.services.notifier.test_notifier_delivery import (
    DLQ,
    config_for,
    dispatching,
    enqueue,
    open_event,
    outbox_empty,
)
from tests.services.notifier.test_notifier_support import Receiver, Timeline, notification, typed

ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def incident():
    """open (ERR), update (ERR -> WARN), close (OK): the events of one incident."""
    t = Timeline("billing", start_ms=int(time.time() * 1000) - 600_000)  # a minute between events, all past
    t.to("OK")
    return t.to("ERR", (500, 0)), t.to("WARN", (40, 0)), t.to("OK")


# --- alertmanager ---------------------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def alertmanager(tmp_path, receiver_url):
    config = tmp_path / "alertmanager.yml"
    config.write_text(
        json.dumps(  # YAML is a superset of JSON
            {
                "route": {
                    "receiver": "hook",
                    "group_by": ["cluster", "group"],
                    "group_wait": "100ms",
                    "group_interval": "500ms",
                    "repeat_interval": "1h",
                },
                "receivers": [{"name": "hook", "webhook_configs": [{"url": receiver_url, "send_resolved": True}]}],
            }
        )
    )
    port = free_port()
    process = subprocess.Popen(
        [
            ALERTMANAGER,
            f"--config.file={config}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:

            async def ready():
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"{url}/-/ready") as response:
                        return response.status == 200
                assert process.poll() is None, process.stderr.read().decode()
                return False

            await eventually(ready, timeout=30)
            yield url, http
    finally:
        process.terminate()
        process.wait(10)


async def test_alertmanager_gets_the_alert_firing_on_open_and_resolved_on_close(tmp_path, redis_server, redis, kafka):
    assert ALERTMANAGER, "prometheus-alertmanager is missing: scripts/install-system-deps.sh installs it"
    opened, updated, closed = incident()
    async with Receiver() as receiver, alertmanager(tmp_path, receiver.url("/am")) as (am_url, http):
        config = config_for(kafka, redis_server, [{"id": "am", "type": "alertmanager", "url": am_url}])
        async with dispatching(config, dead_letters=False) as (outbox, _):
            await enqueue(outbox, opened, "am", "open")
            firing = (await receiver.wait_for(1, timeout=20))[0].json()
            async with http.get(f"{am_url}/api/v2/alerts") as response:
                held = await response.json()
            await enqueue(outbox, updated, "am", "update")
            await eventually(lambda: _alert_statuses(receiver, "WARN", "firing"), timeout=5)
            await enqueue(outbox, closed, "am", "close")
            await eventually(lambda: _alert_statuses(receiver, "WARN", "resolved"))
            await eventually(lambda: outbox_empty(redis))
    assert firing["status"] == "firing" and len(firing["alerts"]) == 1
    alert = firing["alerts"][0]
    assert alert["labels"] == {
        "alertname": "KafkaConsumerGroupStatus",
        "cluster": "local",
        "group": "billing",
        "status": "ERR",
        "severity": "critical",
    }
    assert alert["annotations"]["summary"] == "ERR: billing on local"
    assert alert["annotations"]["incident_id"] == opened["incident_id"]
    assert "Total lag: 500" in alert["annotations"]["description"]
    assert [a["labels"]["status"] for a in held] == ["ERR"] and held[0]["status"]["state"] == "active"
    ends_at = datetime.fromisoformat(held[0]["endsAt"].replace("Z", "+00:00")).timestamp()
    assert ends_at > time.time() + 23 * 3600  # no send-interval: it holds until the close (or a day)
    last = receiver.requests[-1].json()
    assert last["status"] == "resolved"
    assert {a["labels"]["status"]: a["status"] for a in last["alerts"]} == {"ERR": "resolved", "WARN": "resolved"}


async def test_two_subscriptions_to_one_alertmanager_keep_their_own_alerts(tmp_path, redis_server, redis, kafka):
    """A group leaves subscription b (its close, "unsubscribed") while a still has it open: a's alert stays firing.
    Named by the group alone, both subscriptions' alerts were one, and b's close resolved a's too."""
    opened, _, _ = incident()
    await redis.set(keys.NOTIFY_IDENTITY_SINCE, 0)  # every incident begun since: named per subscription
    async with Receiver() as receiver, alertmanager(tmp_path, receiver.url("/am")) as (am_url, http):
        subs = [{"id": sub, "type": "alertmanager", "url": am_url} for sub in ("a", "b")]
        async with dispatching(config_for(kafka, redis_server, subs), dead_letters=False) as (outbox, _):

            async def firing():
                async with http.get(f"{am_url}/api/v2/alerts") as response:
                    return sorted(str(a["labels"].get("subscription")) for a in await response.json())

            await enqueue(outbox, opened, "a", "open")
            await enqueue(outbox, opened, "b", "open")
            await eventually(lambda: outbox_empty(redis))
            before = await firing()
            gone = Delivery(f"{opened['event_id']}.b.x", "b", "close", typed(opened), "x", now_ms())
            gone.reason = "unsubscribed"
            assert await outbox.enqueue(gone)
            await eventually(lambda: outbox_empty(redis))
            await asyncio.sleep(1)  # (Alertmanager applies a POST at once: this is only a margin)
            after = await firing()
    assert (before, after) == (["a", "b"], ["a"])  # named by the group alone: (["None"], []), a's alert resolved too


async def _alert_statuses(receiver, status, state):
    """The receiver's last notification has the alert of `status` in `state` (and the ERR one resolved)."""
    if not receiver.requests:
        return False
    alerts = {a["labels"]["status"]: a["status"] for a in receiver.requests[-1].json()["alerts"]}
    return alerts.get(status) == state and alerts.get("ERR") == "resolved"


# --- pagerduty ------------------------------------------------------------------------------------------------------


async def in_turn(outbox, receiver, notifications):
    """Each (event, subscription, kind) sent once the one before it arrived."""
    for sent, (event, sub, kind) in enumerate(notifications, 1):
        await enqueue(outbox, event, sub, kind)
        await receiver.wait_for(sent)


async def test_pagerduty_triggers_and_resolves_with_the_incident_id_as_dedup_key(redis_server, redis, kafka):
    """An incident begun before the first notifier naming alerts per subscription (this one, started after the
    Timeline's events) keeps the incident id as its dedup_key: as an earlier version opened it."""
    opened, updated, closed = incident()
    async with Receiver(default=(202, {})) as events_api:
        sub = {"id": "pd", "type": "pagerduty", "url": events_api.url("/v2/enqueue"), "routing_key": "R0UT1NGKEY0123"}
        config = config_for(kafka, redis_server, [sub], NOTIFIER__DASHBOARD_URL="https://lw.example/{group}")
        async with dispatching(config, dead_letters=False) as (outbox, _):
            await in_turn(
                outbox, events_api, [(opened, "pd", "open"), (updated, "pd", "update"), (closed, "pd", "close")]
            )
    trigger, update, resolve = (r.json() for r in events_api.requests)
    assert {r.path for r in events_api.requests} == {"/v2/enqueue"}
    assert trigger["event_action"] == update["event_action"] == "trigger" and resolve["event_action"] == "resolve"
    assert trigger["dedup_key"] == update["dedup_key"] == resolve["dedup_key"] == opened["incident_id"]
    assert {trigger["routing_key"], resolve["routing_key"]} == {"R0UT1NGKEY0123"}
    payload = trigger["payload"]
    assert (payload["summary"], payload["severity"], payload["source"], payload["component"]) == (
        "ERR: billing on local",
        "critical",
        "local",
        "billing",
    )
    assert update["payload"]["severity"] == "warning" and "payload" not in resolve
    assert (
        payload["custom_details"]["Total lag"] == "500" and trigger["links"][0]["href"] == "https://lw.example/billing"
    )


async def test_pagerduty_names_new_incidents_per_subscription(redis_server, redis, kafka):
    """Two subscriptions sending to one PagerDuty service trigger two PagerDuty incidents, and one's resolve leaves
    the other's open; an incident begun before the first notifier naming them so keeps the incident id (above)."""
    opened, _, closed = incident()
    await redis.set(keys.NOTIFY_IDENTITY_SINCE, 0)
    async with Receiver(default=(202, {})) as events_api:
        subs = [
            {"id": sub, "type": "pagerduty", "url": events_api.url("/v2/enqueue"), "routing_key": "R0UT1NGKEY0123"}
            for sub in ("a", "b")
        ]
        async with dispatching(config_for(kafka, redis_server, subs), dead_letters=False) as (outbox, _):
            await in_turn(outbox, events_api, [(opened, "a", "open"), (opened, "b", "open"), (closed, "b", "close")])
    sent = [(r.json()["event_action"], r.json()["dedup_key"]) for r in events_api.requests]
    incident_id = opened["incident_id"]
    assert sent == [("trigger", f"{incident_id}/a"), ("trigger", f"{incident_id}/b"), ("resolve", f"{incident_id}/b")]


async def test_pagerduty_url_defaults_to_the_events_api():
    config = SubscriptionConfig(id="pd", type="pagerduty", routing_key="R0UT1NGKEY0123")
    from lagwatch.shared.notifications.subscriptions.destinations import endpoint, problems

    assert endpoint(config) == "https://events.pagerduty.com/v2/enqueue" and problems(config) == {}
    assert problems(SubscriptionConfig(id="pd", type="pagerduty"))["routing_key"].startswith("required")


# --- msteams --------------------------------------------------------------------------------------------------------


async def test_msteams_posts_an_adaptive_card_to_the_workflow(redis_server, redis, kafka):
    opened, _, closed = incident()
    async with Receiver(default=(202, {})) as workflow:
        sub = {"id": "teams", "type": "msteams", "url": workflow.url("/workflows/abc/triggers/manual?sig=s3cr3t")}
        config = config_for(kafka, redis_server, [sub], NOTIFIER__DASHBOARD_URL="https://lw.example/{group}")
        async with dispatching(config, dead_letters=False) as (outbox, _):
            await enqueue(outbox, opened, "teams", "open")
            await enqueue(outbox, closed, "teams", "close")
            await workflow.wait_for(2)
    by_kind = {r.headers["X-Lagwatch-Notification"]: r.json() for r in workflow.requests}
    message = by_kind["open"]
    assert message["type"] == "message"
    (attachment,) = message["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert card["type"] == "AdaptiveCard" and card["version"] == "1.4"
    title, facts, *rest = card["body"]
    assert (title["text"], title["color"]) == ("ERR: billing on local", "Attention")
    assert {"title": "Total lag", "value": "500"} in facts["facts"]
    assert "orders / 0: STALL, lag 500" in rest[-1]["text"]
    assert card["actions"][0]["url"] == "https://lw.example/billing"
    close_title = by_kind["close"]["attachments"][0]["content"]["body"][0]
    assert (close_title["text"], close_title["color"]) == ("Resolved: billing on local is OK again", "Good")


# --- email ----------------------------------------------------------------------------------------------------------


class Mailbox:
    """aiosmtpd's handler: keeps what it is sent; `refuse` answers DATA with that reply instead."""

    def __init__(self) -> None:
        self.envelopes = []
        self.refuse: str | None = None

    async def handle_DATA(self, server, session, envelope):
        if self.refuse:
            return self.refuse
        self.envelopes.append(envelope)
        return "250 OK"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 and localhost."""
    where = tmp_path_factory.mktemp("smtp-tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@contextlib.contextmanager
def smtp_server(certificate, *, password="pa55word-0123"):
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    mailbox = Mailbox()

    def authenticate(server, session, envelope, mechanism, auth_data):
        ok = isinstance(auth_data, LoginPassword) and (auth_data.login, auth_data.password) == (
            b"lagwatch",
            password.encode(),
        )
        return AuthResult(success=ok, handled=False)  # (handled=True would leave the client without a reply)

    controller = Controller(
        mailbox,
        hostname="127.0.0.1",
        port=free_port(),
        tls_context=context,
        require_starttls=True,  # nothing but EHLO, STARTTLS and QUIT before TLS
        auth_required=True,
        auth_require_tls=True,
        authenticator=authenticate,
    )
    controller.start()
    try:
        yield controller.port, mailbox
    finally:
        controller.stop()


def email_subscription(port, **extra):
    return {
        "id": "mail",
        "type": "email",
        "smtp_host": "127.0.0.1",
        "smtp_port": port,
        "from_": "lagwatch@example.com",
        "to": ["ops@example.com", "oncall@example.com"],
        "username": "lagwatch",
        "password": "pa55word-0123",
        **extra,
    }


async def test_email_is_sent_over_starttls_with_auth_to_every_recipient(certificate, redis_server, redis, kafka):
    opened, _, closed = incident()
    with smtp_server(certificate) as (port, mailbox):
        ca = certificate[0].read_text()  # the server's self-signed certificate, trusted as a private CA would be
        config = config_for(kafka, redis_server, [email_subscription(port, secret="k" * 16, extra_ca=ca)])
        async with dispatching(config, dead_letters=False) as (outbox, _):
            await enqueue(outbox, opened, "mail", "open")
            await enqueue(outbox, closed, "mail", "close")
            await eventually(lambda: _count(mailbox, 2))
            await eventually(lambda: outbox_empty(redis))
    by_kind = {}
    for envelope in mailbox.envelopes:
        message = message_from_bytes(envelope.content, policy=default_policy)
        by_kind[message["X-Lagwatch-Notification"]] = (envelope, message)
    envelope, message = by_kind["open"]
    assert envelope.mail_from == "lagwatch@example.com"
    assert envelope.rcpt_tos == ["ops@example.com", "oncall@example.com"]
    assert message["Subject"] == "[lagwatch] ERR: billing on local"
    assert message["X-Lagwatch-Event-Id"] == opened["event_id"]
    signing.verify_request("k" * 16, message, message.get_content().replace("\r\n", "\n"))  # the text, LF ends
    text = message.get_content()
    assert "Total lag: 500" in text and "orders / 0: STALL, lag 500" in text
    assert by_kind["close"][1]["Subject"] == "[lagwatch] Resolved: billing on local is OK again"


async def _count(mailbox, n):
    return len(mailbox.envelopes) >= n


async def test_a_refused_email_login_is_dead_lettered_at_once(certificate, monkeypatch, redis_server, redis, kafka):
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    kafka.create_topic(DLQ, 1)
    with smtp_server(certificate, password="another-password") as (port, mailbox):
        config = config_for(kafka, redis_server, [email_subscription(port)])
        async with dispatching(config) as (outbox, _):
            await enqueue(outbox, open_event(), "mail", "open")
            (letter,) = await eventually(lambda: read_dead_letters({"bootstrap_servers": kafka.bootstrap}, DLQ))
    assert mailbox.envelopes == []
    assert letter["attempts"] == 1 and letter["error"].startswith("SMTP 535")
    assert "pa55word" not in json.dumps(letter)


async def test_a_temporary_smtp_refusal_is_retried(certificate, monkeypatch, redis_server, redis, kafka):
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    with smtp_server(certificate) as (port, mailbox):
        mailbox.refuse = "451 try again later"
        config = config_for(kafka, redis_server, [email_subscription(port)], NOTIFIER__MAX_ATTEMPTS="50")
        async with dispatching(config, dead_letters=False) as (outbox, _):
            await enqueue(outbox, open_event(), "mail", "open")
            await asyncio.sleep(0.3)
            assert mailbox.envelopes == []
            mailbox.refuse = None
            await eventually(lambda: _count(mailbox, 1))
    (envelope,) = mailbox.envelopes
    assert int(message_from_bytes(envelope.content)["X-Lagwatch-Attempt"]) > 1


async def test_an_untrusted_smtp_certificate_fails_the_attempt(certificate):
    with smtp_server(certificate) as (port, _):  # SSL_CERT_FILE not set: the self-signed certificate is not trusted
        config = SubscriptionConfig(**email_subscription(port))
        mail = _mail(config)
        with pytest.raises(SendFailure) as failure:
            await email_channel.send(mail, timeout_s=5, allow_private=True)
    assert failure.value.retryable and "CERTIFICATE_VERIFY_FAILED" in str(failure.value)


async def test_the_smtp_host_is_judged_by_the_address_guard_when_connecting():
    config = SubscriptionConfig(**email_subscription(25, smtp_host="localhost"))
    mail = _mail(config)
    with pytest.raises(SendFailure) as failure:
        await email_channel.send(mail, timeout_s=5, allow_private=False)
    assert not failure.value.retryable and "target refused" in str(failure.value)
    assert "private address" in str(failure.value)


def _mail(config):
    note = notification(open_event(), "open", config=config, notification_id="n")
    return email_channel.build(note, email_channel.text(note).decode())


# --- the api: validation, masking, the address guard ------------------------------------------------------------------


async def test_the_api_checks_each_types_options_and_masks_their_secrets(redis_server, redis):
    from tests.services.api.test_subscriptions_api import BASE, serving
    from tests.services.api.test_subscriptions_api import config_for as api_config

    async with serving(api_config(redis_server.url)) as api:
        pd = {"id": "pd", "type": "pagerduty", "routing_key": "R0UT1NGKEY0123456", "url": "http://127.0.0.1:9/"}
        status, body = await api("POST", BASE, pd)  # (no DNS here: the Events API's name cannot be checked)
        assert status == 201, body
        shown = body["subscription"]
        assert shown["routing_key"] == "****3456"
        status, body = await api("GET", f"{BASE}/pd")
        assert "R0UT1NGKEY0123456" not in json.dumps(body)
        status, body = await api("PUT", f"{BASE}/pd", {**shown, "send_interval": 60})  # what GET showed, edited
        assert status == 200, body
        stored = json.loads(await redis.hget("lw:n:{notify}:subs", "pd"))
        assert stored["routing_key"] == "R0UT1NGKEY0123456" and stored["send_interval"] == 60

        mail = {**email_subscription(2525, password="pa55word-0123456"), "id": "mail"}
        mail["from"] = mail.pop("from_")
        status, body = await api("POST", BASE, mail)
        assert status == 201, body
        assert body["subscription"]["password"] == "****3456" and body["subscription"]["from"] == "lagwatch@example.com"
        moved = {**body["subscription"], "smtp_host": "127.0.0.2"}  # another server: the password stays behind
        status, body = await api("PUT", f"{BASE}/mail", moved)
        assert status == 400 and "masked value" in body["errors"]["password"]

        status, body = await api("POST", BASE, {**mail, "id": "meta", "smtp_host": "169.254.169.254"})
        assert status == 400 and "metadata" in body["errors"]["smtp_host"]
        status, body = await api("POST", BASE, {"id": "x", "type": "email", "to": ["not an address"]})
        assert status == 400 and set(body["errors"]) >= {"smtp_host", "from", "to"}
        status, body = await api("POST", BASE, {"id": "y", "url": "http://127.0.0.1:9/", "routing_key": "R0UT1NGKEY01"})
        assert status == 400 and body["errors"]["routing_key"] == "an option of pagerduty subscriptions, not webhook"
        teams = {"id": "t", "type": "msteams", "url": "http://127.0.0.1:9/", "method_close": "DELETE"}
        status, body = await api("POST", BASE, teams)
        assert status == 400 and body["errors"]["method_close"] == "msteams sends closes as the others"
        status, body = await api("POST", BASE, {"id": "z", "type": "alertmanager"})
        assert status == 400 and body["errors"]["url"].startswith("required")


async def test_a_configured_email_subscription_refuses_a_password_in_clear(tmp_path):
    from lagwatch.services.notifier.subscriptions import from_config
    from lagwatch.shared.runtime.config import ConfigError, load_config

    path = tmp_path / "lagwatch.yml"
    path.write_text(
        "subscriptions:\n"
        "  - {id: m, type: email, smtp-host: mail.example.com, from: a@example.com, to: [b@example.com],"
        " username: u, password: p, starttls: false}\n"
    )
    with pytest.raises(ConfigError) as err:
        from_config(load_config(path, env={}))
    assert err.value.key == "subscriptions[0].starttls"


async def test_templates_replace_each_types_body_as_for_webhooks(certificate, monkeypatch, redis_server, redis, kafka):
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    opened, _, _ = incident()
    template = "{{ notification.kind }} {{ event.group }} {{ event.status }} {{ extras.team }}"
    with smtp_server(certificate) as (port, mailbox):
        async with Receiver(default=(202, {})) as http_receiver:
            subscriptions = [
                {"id": "teams", "type": "msteams", "url": http_receiver.url("/teams"), "body_template": template,
                 "extras": {"team": "payments"}, "secret": "k" * 16},
                {"id": "pd", "type": "pagerduty", "url": http_receiver.url("/pd"), "routing_key": "R0UT1NGKEY0123",
                 "body_template": '{"routing_key": "{{ extras.key }}", "dedup_key": "{{ incident.id }}"}',
                 "extras": {"key": "R0UT1NGKEY0123"}},
                email_subscription(port, body_template=template, extras={"team": "payments"}),
            ]  # fmt: skip
            config = config_for(kafka, redis_server, subscriptions)
            async with dispatching(config, dead_letters=False) as (outbox, _):
                for sub_id in ("teams", "pd", "mail"):
                    await enqueue(outbox, opened, sub_id, "open")
                await http_receiver.wait_for(2)
                await eventually(lambda: _count(mailbox, 1))
    by_path = {r.path: r for r in http_receiver.requests}
    assert by_path["/teams"].body == b"open billing ERR payments"
    signing.verify_request("k" * 16, by_path["/teams"].headers, by_path["/teams"].body)
    assert by_path["/pd"].json() == {"routing_key": "R0UT1NGKEY0123", "dedup_key": opened["incident_id"]}
    message = message_from_bytes(mailbox.envelopes[0].content, policy=default_policy)
    assert message.get_content() == "open billing ERR payments\r\n"  # (SMTP's line ends)
    assert message["Subject"] == "[lagwatch] ERR: billing on local"
