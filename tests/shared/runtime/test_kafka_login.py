"""Logins managed Kafka needs (shared/runtime/kafka_login.py, shared/runtime/kafka_client.py): OAUTHBEARER tokens from a
real OIDC token endpoint (an aiohttp server in the test), MSK IAM tokens signed by the AWS signer library with
credentials from the environment or a profile (no network), Kerberos where the client library has it, and the same login
in every Kafka client lagwatch builds: aiokafka, librdkafka, Faust and Spark's Java client."""

import asyncio
import base64
import dataclasses
import json
import os
import re
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import faust
import pytest
from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError
from confluent_kafka import Producer
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth
from prometheus_client import REGISTRY

from lagwatch import cli
from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OFFSETS_TOPIC, OffsetsTopicWriter
from lagwatch.services.evaluator.service import EvaluatorService
from lagwatch.services.ingest.service import IngestWorker
from lagwatch.shared.runtime import kafka_client, kafka_login
from lagwatch.shared.runtime.config import ConfigError, load_config
from lagwatch.shared.runtime.faust_kafka import faust_broker_settings
from lagwatch.shared.runtime.kafka_client import client_kwargs, java_client_options, librdkafka_config
from lagwatch.shared.runtime.kafka_login import LoginError, MskIamTokens, OidcClientCredentials
from lagwatch.shared.windows.changes import ChangePublisher
from lagwatch.shared.windows.store import WindowStore
from tests import paths
from tests.kafka_helpers import CLUSTER, consume_and_commit, eventually, make_config, produce, running
from tests.sasl_gateway import SaslGateway, sasl_kafka
from tests.services.evaluator.test_evaluator import StatusTopic, commits
from tests.services.notifier.test_notifier_burrow_options import test_ca  # noqa: F401 (a fixture: a CA and a certificate for 127.0.0.1)

CLIENT_ID, SECRET = "lagwatch", "s3cret-value"
EXTENSIONS = {"logicalCluster": "lkc-1"}


def jwt(claims: dict) -> str:
    part = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJub25lIn0.{part}.c2ln"


class TokenEndpoint:
    """An OIDC provider's token endpoint: client-credentials grant, client authenticated with HTTP basic auth."""

    def __init__(self, lifetime: int = 100) -> None:
        self.lifetime = lifetime
        self.requests: list[dict] = []
        self.issued: list[str] = []
        self.url = ""
        self.html = False  # answer like a misconfigured proxy or a login page
        self.refuse = False  # refuse every client, as an identity provider in trouble

    async def handle(self, request: web.Request) -> web.Response:
        form = dict(await request.post())
        self.requests.append({"form": form, "authorization": request.headers.get("Authorization", "")})
        expected = "Basic " + base64.b64encode(f"{CLIENT_ID}:{SECRET}".encode()).decode()
        if request.headers.get("Authorization") != expected or self.refuse:
            return web.json_response({"error": "invalid_client", "error_description": "bad credentials"}, status=401)
        if self.html:
            return web.Response(text="<html>sign in</html>", content_type="text/html")
        if form.get("grant_type") != "client_credentials":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        token = jwt({"sub": "svc-lagwatch", "n": len(self.requests)})
        self.issued.append(token)
        return web.json_response({"access_token": token, "token_type": "Bearer", "expires_in": self.lifetime})


@pytest.fixture
def endpoint():
    """The token endpoint on an event loop of its own thread, as a real IdP is elsewhere: clients that fetch a token
    synchronously (librdkafka's constructors) do not wait on the test's loop."""
    server, loop = TokenEndpoint(), asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def serve() -> web.AppRunner:
        app = web.Application()
        app.router.add_post("/oauth2/token", server.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner

    runner = asyncio.run_coroutine_threadsafe(serve(), loop).result(10)
    server.url = f"http://127.0.0.1:{runner.addresses[0][1]}/oauth2/token"
    yield server
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def oauth_env(url: str, secret: str = SECRET, **extra: str) -> dict[str, str]:
    return {
        "LAGWATCH__CLUSTERS__cloud__BOOTSTRAP_SERVERS": "broker-1:9093",
        "LAGWATCH__CLUSTERS__cloud__TLS__ENABLED": "true",
        "LAGWATCH__CLUSTERS__cloud__SASL__MECHANISM": "OAUTHBEARER",
        "LAGWATCH__CLUSTERS__cloud__SASL__OAUTH__TOKEN_ENDPOINT_URL": url,
        "LAGWATCH__CLUSTERS__cloud__SASL__OAUTH__CLIENT_ID": CLIENT_ID,
        "LAGWATCH__CLUSTERS__cloud__SASL__OAUTH__CLIENT_SECRET": secret,
        "LAGWATCH__CLUSTERS__cloud__SASL__OAUTH__SCOPE": "kafka.read",
        **extra,
    }


def oauth_cluster(url: str, secret: str = SECRET):
    return load_config(env=oauth_env(url, secret)).cluster("cloud")


@pytest.fixture(autouse=True)
def fresh_providers(monkeypatch):
    """Each test gets its own providers (the process keeps one per cluster)."""
    monkeypatch.setattr(kafka_login, "_providers", {})


# OAUTHBEARER from an OIDC token endpoint


async def test_a_token_is_fetched_with_the_client_credentials_grant(endpoint):
    provider = OidcClientCredentials(oauth_cluster(endpoint.url).sasl.oauth)
    token = await provider.token()
    assert token == jwt({"sub": "svc-lagwatch", "n": 1})
    [request] = endpoint.requests
    assert request["form"] == {"grant_type": "client_credentials", "scope": "kafka.read"}
    assert request["authorization"].startswith("Basic ")


async def test_the_token_is_cached_until_it_is_due_and_refreshed_before_it_expires(endpoint):
    clock = Clock()
    provider = OidcClientCredentials(oauth_cluster(endpoint.url).sasl.oauth, clock=clock)
    first = await provider.token()
    clock.now += 79  # a 100 s token is refreshed after 80 s, 20 s before it expires
    assert await provider.token() == first
    assert len(endpoint.requests) == 1
    clock.now += 2
    second = await provider.token()
    assert second != first and len(endpoint.requests) == 2
    assert provider.current().expires_at == pytest.approx(clock.now + 100, abs=2)
    endpoint.lifetime = 10  # a short-lived token is kept for 8 s too, not fetched anew for every connection
    clock.now += 81
    third = await provider.token()
    clock.now += 7
    assert await provider.token() == third and len(endpoint.requests) == 3


async def test_concurrent_connections_share_one_fetch(endpoint):
    provider = OidcClientCredentials(oauth_cluster(endpoint.url).sasl.oauth)
    tokens = await asyncio.gather(*(provider.token() for _ in range(8)))
    assert len(set(tokens)) == 1 and len(endpoint.requests) == 1


async def test_a_bad_secret_is_a_clear_error_that_does_not_show_the_secret(endpoint):
    provider = OidcClientCredentials(oauth_cluster(endpoint.url, secret="wrong-secret").sasl.oauth)
    with pytest.raises(LoginError) as err:
        await asyncio.to_thread(provider.current)
    message = str(err.value)
    assert "HTTP 401" in message and "invalid_client (bad credentials)" in message
    assert endpoint.url in message and "client-id lagwatch" in message and "wrong-secret" not in message


async def test_aiokafka_sees_a_failed_login_as_a_connection_error_and_retries(endpoint):
    """aiokafka retries KafkaConnectionError as it does an unreachable broker; any other error would escape."""
    clock = Clock()
    provider = OidcClientCredentials(oauth_cluster(endpoint.url, secret="wrong-secret").sasl.oauth, clock=clock)
    with pytest.raises(KafkaConnectionError, match=r"SASL login: .*HTTP 401"):
        await provider.token()
    with pytest.raises(KafkaConnectionError):  # within RETRY_S: the same answer, the endpoint is left alone
        await provider.token()
    assert len(endpoint.requests) == 1
    clock.now += kafka_login.RETRY_S
    with pytest.raises(KafkaConnectionError):
        await provider.token()
    assert len(endpoint.requests) == 2


async def test_logins_are_counted_per_cluster_for_metrics(endpoint):
    def count(outcome: str) -> float:
        return REGISTRY.get_sample_value("lagwatch_kafka_logins_total", {"cluster": "cloud", "outcome": outcome}) or 0

    before = count("ok"), count("failed")
    await kafka_login.token_provider(oauth_cluster(endpoint.url), "cloud").token()
    with pytest.raises(KafkaConnectionError):
        await kafka_login.token_provider(oauth_cluster(endpoint.url, secret="wrong-secret"), "cloud").token()
    assert (count("ok"), count("failed")) == (before[0] + 1, before[1] + 1)


async def test_an_answer_without_a_token_is_a_clear_error(endpoint):
    endpoint.html = True
    provider = OidcClientCredentials(oauth_cluster(endpoint.url).sasl.oauth)
    with pytest.raises(LoginError, match="answered without an access_token"):
        await asyncio.to_thread(provider.current)


async def test_an_unreachable_endpoint_is_a_clear_error():
    provider = OidcClientCredentials(oauth_cluster("http://127.0.0.1:9/token").sasl.oauth)
    with pytest.raises(LoginError, match="unreachable"):
        await asyncio.to_thread(provider.current)


async def test_a_librdkafka_client_is_built_while_the_login_fails_and_keeps_asking(endpoint):
    """confluent-kafka fails a client's constructor when `oauth_cb` raises: librdkafka gets a placeholder token that
    lapses within RETRY_S instead, and the failure is logged."""
    config = librdkafka_config(oauth_cluster(endpoint.url, secret="wrong-secret"), "cloud")
    producer = await asyncio.to_thread(Producer, {**config, "bootstrap.servers": "127.0.0.1:9"})
    assert len(endpoint.requests) == 1
    provider = config["oauth_cb"].__self__
    assert provider.failures == 1
    token, expires_at, _, _ = config["oauth_cb"]("")
    assert token == kafka_login.LOGIN_FAILED and expires_at <= time.time() + kafka_login.RETRY_S
    await asyncio.to_thread(producer.flush, 0)


async def test_librdkafka_keeps_the_last_token_while_a_refresh_fails(endpoint):
    clock = Clock()
    provider = OidcClientCredentials(oauth_cluster(endpoint.url).sasl.oauth, clock=clock)
    good, expires_at, _, _ = await asyncio.to_thread(provider.oauth_cb, "")
    clock.now += 81  # due for refresh; the endpoint now refuses
    provider.oauth = dataclasses.replace(provider.oauth, client_secret="rotated-away")
    token, retry_at, _, _ = await asyncio.to_thread(provider.oauth_cb, "")
    assert token == good and retry_at == clock.now + kafka_login.RETRY_S < expires_at
    assert len(endpoint.requests) == 2


async def test_librdkafka_gets_token_expiry_principal_and_extensions_from_the_same_provider(endpoint, tmp_path):
    path = tmp_path / "lagwatch.yaml"  # extensions' names keep their case in a file (the environment folds it)
    path.write_text("clusters: {cloud: {sasl: {oauth: {extensions: {logicalCluster: lkc-1}}}}}\n")
    config = librdkafka_config(load_config(path, env=oauth_env(endpoint.url)).cluster("cloud"), "cloud")
    assert (config["security.protocol"], config["sasl.mechanism"]) == ("sasl_ssl", "OAUTHBEARER")
    token, expires_at, principal, extensions = await asyncio.to_thread(config["oauth_cb"], "")
    assert token == jwt({"sub": "svc-lagwatch", "n": 1})
    assert expires_at == pytest.approx(time.time() + 100, abs=5)
    assert (principal, extensions) == ("svc-lagwatch", {"logicalCluster": "lkc-1"})


async def test_a_librdkafka_client_logs_in_with_the_provider_when_it_is_built(endpoint):
    """confluent-kafka calls `oauth_cb` as it creates the client: the token endpoint sees the login."""
    config = librdkafka_config(oauth_cluster(endpoint.url), "cloud")
    producer = await asyncio.to_thread(Producer, {**config, "bootstrap.servers": "127.0.0.1:9"})
    assert len(endpoint.requests) == 1
    await asyncio.to_thread(producer.flush, 0)


async def test_aiokafka_faust_and_librdkafka_clients_share_one_provider(endpoint):
    cluster = oauth_cluster(endpoint.url)
    kwargs = client_kwargs(cluster, "cloud")
    assert kwargs["security_protocol"] == "SASL_SSL" and kwargs["sasl_mechanism"] == "OAUTHBEARER"
    provider = kwargs["sasl_oauth_token_provider"]
    consumer = AIOKafkaConsumer(**kwargs)  # aiokafka accepts it (an AbstractTokenProvider)
    assert consumer._client._sasl_oauth_token_provider is provider
    credentials = faust_broker_settings(cluster, "cloud")["broker_credentials"]
    assert isinstance(credentials, faust.OAuthCredentials) and credentials.oauth_cb is provider
    auth = credentials_to_aiokafka_auth(credentials)
    assert (auth["security_protocol"], auth["sasl_oauth_token_provider"]) == ("SASL_SSL", provider)
    assert librdkafka_config(cluster, "cloud")["oauth_cb"].__self__ is provider
    await provider.token()
    await asyncio.to_thread(librdkafka_config(cluster, "cloud")["oauth_cb"], "")
    assert len(endpoint.requests) == 1


async def produce_with_both_libraries(cluster, name: str) -> None:
    """One record through librdkafka, then one through aiokafka, each client built from the cluster's config."""
    producer = await asyncio.to_thread(Producer, librdkafka_config(cluster, name))
    producer.produce("orders", b"from librdkafka")
    assert await asyncio.to_thread(producer.flush, 15) == 0
    async with AIOKafkaProducer(**client_kwargs(cluster, name)) as aio:
        await aio.send_and_wait("orders", b"from aiokafka")


def gateway_cluster(endpoint: TokenEndpoint, gateway: SaslGateway, secret: str = SECRET, file: Path | None = None):
    env = oauth_env(endpoint.url, secret, LAGWATCH__CLUSTERS__cloud__TLS__ENABLED="false")
    env["LAGWATCH__CLUSTERS__cloud__BOOTSTRAP_SERVERS"] = f"127.0.0.1:{gateway.port}"
    return load_config(file, env=env).cluster("cloud")


async def test_librdkafka_and_aiokafka_clients_log_in_over_the_wire_with_one_token(endpoint, tmp_path):
    """Through a SASL/OAUTHBEARER gateway in front of the Kafka mock: both libraries authenticate every connection
    with the endpoint's token and the configured SASL extensions, then produce and consume."""
    file = tmp_path / "lagwatch.yaml"
    file.write_text("clusters: {cloud: {sasl: {oauth: {extensions: {logicalCluster: lkc-1}}}}}\n")
    with sasl_kafka(lambda token, ext: token in endpoint.issued and ext == EXTENSIONS) as (kafka, gateway):
        kafka.create_topic("orders", 1)
        cluster = gateway_cluster(endpoint, gateway, file=file)
        await produce_with_both_libraries(cluster, "cloud")
        consumer = AIOKafkaConsumer(**client_kwargs(cluster, "cloud"), auto_offset_reset="earliest")
        deadline = time.monotonic() + 15
        await consumer.start()
        try:
            consumer.assign([TopicPartition("orders", 0)])
            values = []
            while len(values) < 2 and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=1000)
                values += [record.value for records in batches.values() for record in records]
        finally:
            await consumer.stop()
    assert values == [b"from librdkafka", b"from aiokafka"]
    assert len(endpoint.issued) == 1 and gateway.unauthenticated_requests == 0
    assert len(gateway.logins) >= 4
    assert all(login == (endpoint.issued[0], EXTENSIONS, True) for login in gateway.logins), gateway.logins


async def test_clients_whose_login_fails_stay_up_and_deliver_nothing(endpoint):
    with sasl_kafka(lambda token, _: token in endpoint.issued) as (kafka, gateway):
        kafka.create_topic("orders", 1)
        cluster = gateway_cluster(endpoint, gateway, secret="wrong-secret")
        producer = await asyncio.to_thread(Producer, librdkafka_config(cluster, "cloud"))
        producer.produce("orders", b"lost")
        assert await asyncio.to_thread(producer.flush, 3) == 1  # still queued: no broker took it
        aio = AIOKafkaProducer(**client_kwargs(cluster, "cloud"))
        with pytest.raises(KafkaConnectionError):
            await aio.start()
        await aio.stop()
    assert gateway.logins and all(login == (kafka_login.LOGIN_FAILED, {}, False) for login in gateway.logins)
    assert endpoint.issued == []


async def test_clients_pick_up_a_login_that_starts_working_without_a_restart(endpoint, monkeypatch):
    """The identity provider refuses, then recovers: librdkafka asks again when its placeholder lapses and delivers
    what it held; a new aiokafka connection gets the token once the failure is no longer remembered."""
    monkeypatch.setattr(kafka_login, "RETRY_S", 1.0)
    endpoint.refuse = True
    with sasl_kafka(lambda token, _: token in endpoint.issued) as (kafka, gateway):
        kafka.create_topic("orders", 1)
        cluster = gateway_cluster(endpoint, gateway)
        producer = await asyncio.to_thread(Producer, librdkafka_config(cluster, "cloud"))
        producer.produce("orders", b"held while refused")
        assert await asyncio.to_thread(producer.flush, 2) == 1
        aio = AIOKafkaProducer(**client_kwargs(cluster, "cloud"))
        with pytest.raises(KafkaConnectionError):
            await aio.start()
        await aio.stop()
        endpoint.refuse = False
        assert await asyncio.to_thread(producer.flush, 15) == 0
        async with AIOKafkaProducer(**client_kwargs(cluster, "cloud")) as aio:
            await aio.send_and_wait("orders", b"after the recovery")
    assert len(endpoint.issued) == 1 and (endpoint.issued[0], {}, True) in gateway.logins


def test_spark_gets_kafkas_java_oidc_login():
    props = java_client_options(oauth_cluster("https://idp.example.com/oauth2/token"), "cloud")
    assert props["sasl.mechanism"] == "OAUTHBEARER" and props["security.protocol"] == "SASL_SSL"
    assert props["sasl.oauthbearer.token.endpoint.url"] == "https://idp.example.com/oauth2/token"
    assert props["sasl.login.callback.handler.class"].endswith("oauthbearer.OAuthBearerLoginCallbackHandler")
    assert props["sasl.jaas.config"] == (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"
        ' clientId="lagwatch" clientSecret="s3cret-value" scope="kafka.read";'
    )


@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({"LAGWATCH__CLUSTERS__cloud__SASL__OAUTH__CLIENT_SECRET": ""}, "clusters.cloud.sasl.oauth.client-secret"),
        ({"LAGWATCH__CLUSTERS__cloud__SASL__OAUTH__TOKEN_ENDPOINT_URL": "idp/token"}, "clusters.cloud.sasl.oauth"),
        ({"LAGWATCH__CLUSTERS__cloud__SASL__MECHANISM": "PLAIN"}, "clusters.cloud.sasl.username"),
        (
            {"LAGWATCH__CLUSTERS__cloud__SASL__MECHANISM": "PLAIN", "LAGWATCH__CLUSTERS__cloud__SASL__USERNAME": "u"},
            "clusters.cloud.sasl.oauth",
        ),
        ({"LAGWATCH__CLUSTERS__cloud__SASL__MECHANISM": "OAuth"}, "clusters.cloud.sasl.mechanism"),
    ],
)
def test_a_login_missing_or_mixing_options_fails_at_start_up_naming_the_key(env, key):
    with pytest.raises(ConfigError) as err:
        load_config(env={**oauth_env("https://idp.example.com/token"), **env})
    assert err.value.key.startswith(key)


# AWS MSK IAM


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """Fake credentials in the environment, no shared files and no instance metadata: signing stays offline."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ROLE_ARN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEKEY123456")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return tmp_path


def msk_env(**extra: str) -> dict[str, str]:
    return {
        "LAGWATCH__CLUSTERS__msk__BOOTSTRAP_SERVERS": "b-1.msk.example:9098",
        "LAGWATCH__CLUSTERS__msk__TLS__ENABLED": "true",
        "LAGWATCH__CLUSTERS__msk__SASL__MECHANISM": "AWS_MSK_IAM",
        **extra,
    }


def signed_url(token: str) -> tuple[str, dict]:
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    parsed = urlparse(url)
    return f"{parsed.scheme}://{parsed.netloc}{parsed.path}", parse_qs(parsed.query)


def test_msk_iam_signs_a_connect_token_with_the_environments_credentials(aws_env, monkeypatch):
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    cluster = load_config(env=msk_env()).cluster("msk")
    token, expires_at, _, _ = librdkafka_config(cluster, "msk")["oauth_cb"]("")
    url, query = signed_url(token)
    assert url == "https://kafka.eu-west-1.amazonaws.com/"
    assert query["Action"] == ["kafka-cluster:Connect"]
    assert query["X-Amz-Credential"][0].startswith("AKIAEXAMPLEKEY123456/")
    assert query["X-Amz-Credential"][0].endswith("/eu-west-1/kafka-cluster/aws4_request")
    assert len(query["X-Amz-Signature"][0]) == 64
    assert expires_at == pytest.approx(time.time() + 900, abs=5)


def test_msk_iam_reads_a_named_profile_and_its_region(aws_env):
    (aws_env / "credentials").write_text(
        "[msk-reader]\naws_access_key_id = AKIAPROFILEKEY000001\naws_secret_access_key = profile-secret\n"
    )
    (aws_env / "config").write_text("[profile msk-reader]\nregion = us-east-2\n")
    cluster = load_config(env=msk_env(LAGWATCH__CLUSTERS__msk__SASL__AWS__PROFILE="msk-reader")).cluster("msk")
    provider = client_kwargs(cluster, "msk")["sasl_oauth_token_provider"]
    assert isinstance(provider, MskIamTokens) and provider.region == "us-east-2"
    url, query = signed_url(provider.current().value)
    assert url == "https://kafka.us-east-2.amazonaws.com/"
    assert query["X-Amz-Credential"][0].startswith("AKIAPROFILEKEY000001/")


def test_msk_iam_without_credentials_is_a_clear_error(aws_env, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    cluster = load_config(env=msk_env(LAGWATCH__CLUSTERS__msk__SASL__AWS__REGION="eu-west-1")).cluster("msk")
    provider = kafka_login.token_provider(cluster, "msk")
    with pytest.raises(LoginError, match="MSK IAM: no AWS credentials found"):
        provider.current()


def test_msk_iam_without_a_region_names_the_option(aws_env):
    cluster = load_config(env=msk_env()).cluster("msk")
    with pytest.raises(ConfigError) as err:
        client_kwargs(cluster, "msk")
    assert err.value.key == "clusters.msk.sasl.aws.region" and "AWS_REGION" in str(err.value)


@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({"LAGWATCH__CLUSTERS__msk__TLS__ENABLED": "false"}, "clusters.msk.tls.enabled"),
        (
            {
                "LAGWATCH__CLUSTERS__msk__SASL__AWS__PROFILE": "p",
                "LAGWATCH__CLUSTERS__msk__SASL__AWS__ROLE_ARN": "arn:aws:iam::123456789012:role/lagwatch",
            },
            "clusters.msk.sasl.aws.role-arn",
        ),
        ({"LAGWATCH__CLUSTERS__msk__SASL__USERNAME": "someone"}, "clusters.msk.sasl.username"),
    ],
)
def test_the_config_that_selects_msk_iam_is_validated(env, key):
    with pytest.raises(ConfigError) as err:
        load_config(env=msk_env(**env))
    assert err.value.key == key


async def test_msk_iam_tokens_reach_the_broker_over_tls_from_both_libraries(aws_env, monkeypatch, test_ca):  # noqa: F811
    """SASL_SSL, as MSK's IAM listener: each connection carries a presigned kafka-cluster:Connect request for the
    cluster's region, signed with the environment's key."""
    monkeypatch.setenv("AWS_REGION", "eu-west-1")

    def accept(token: str, extensions: dict[str, str]) -> bool:
        url, query = signed_url(token)
        credential = query["X-Amz-Credential"][0]
        return (url, query["Action"], extensions) == (
            "https://kafka.eu-west-1.amazonaws.com/",
            ["kafka-cluster:Connect"],
            {},
        ) and credential.startswith("AKIAEXAMPLEKEY123456/")

    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(test_ca["cert"], test_ca["key"])
    with sasl_kafka(accept, tls=server) as (kafka, gateway):
        kafka.create_topic("orders", 1)
        env = msk_env(LAGWATCH__CLUSTERS__msk__TLS__CA_FILE=str(test_ca["ca"]))
        env["LAGWATCH__CLUSTERS__msk__BOOTSTRAP_SERVERS"] = f"127.0.0.1:{gateway.port}"
        cluster = load_config(env=env).cluster("msk")
        await produce_with_both_libraries(cluster, "msk")
    assert len(gateway.logins) >= 2 and all(accepted for _, _, accepted in gateway.logins), gateway.logins


def test_spark_gets_the_msk_iam_login_module():
    cluster = load_config(env=msk_env(LAGWATCH__CLUSTERS__msk__SASL__AWS__PROFILE="p")).cluster("msk")
    props = java_client_options(cluster, "msk")
    assert props["sasl.mechanism"] == "AWS_MSK_IAM" and props["security.protocol"] == "SASL_SSL"
    assert props["sasl.jaas.config"] == 'software.amazon.msk.auth.iam.IAMLoginModule required awsProfileName="p";'
    assert props["sasl.client.callback.handler.class"] == "software.amazon.msk.auth.iam.IAMClientCallbackHandler"


def test_the_spark_job_reads_a_configured_clusters_history_topic_with_its_login():
    from lagwatch.spark.inputs import kafka_options

    config = load_config(env=msk_env(LAGWATCH__CLUSTERS__msk__SASL__AWS__REGION="eu-west-1"))
    by_name = kafka_options("kafka://msk/lagwatch.history", config)
    assert by_name == kafka_options("kafka://b-1.msk.example:9098/lagwatch.history", config)
    assert by_name["bootstrap.servers"] == "b-1.msk.example:9098" and by_name["sasl.mechanism"] == "AWS_MSK_IAM"
    assert kafka_options("kafka://other:9092/lagwatch.history", config) == {"bootstrap.servers": "other:9092"}


# Kerberos (GSSAPI)


def kerberos_env(**extra: str) -> dict[str, str]:
    return {
        "LAGWATCH__CLUSTERS__corp__SASL__MECHANISM": "GSSAPI",
        "LAGWATCH__CLUSTERS__corp__SASL__KERBEROS__PRINCIPAL": "lagwatch@EXAMPLE.COM",
        **extra,
    }


def test_the_wheels_librdkafka_is_probed_for_kerberos_and_a_missing_one_is_a_clear_error(monkeypatch):
    assert isinstance(kafka_client.librdkafka_has_gssapi(), bool)
    monkeypatch.setattr(kafka_client, "librdkafka_has_gssapi", lambda: False)
    with pytest.raises(ConfigError, match="has no Kerberos") as err:
        librdkafka_config(load_config(env=kerberos_env()).cluster("corp"), "corp")
    assert err.value.key == "clusters.corp.sasl.mechanism"


def test_a_librdkafka_with_kerberos_gets_service_principal_and_keytab(monkeypatch, tmp_path):
    monkeypatch.setattr(kafka_client, "librdkafka_has_gssapi", lambda: True)
    keytab = tmp_path / "lagwatch.keytab"
    env = kerberos_env(LAGWATCH__CLUSTERS__corp__SASL__KERBEROS__KEYTAB=str(keytab))
    config = librdkafka_config(load_config(env=env).cluster("corp"), "corp")
    assert config["security.protocol"] == "sasl_plaintext"
    assert (config["sasl.mechanism"], config["sasl.kerberos.service.name"]) == ("GSSAPI", "kafka")
    assert (config["sasl.kerberos.principal"], config["sasl.kerberos.keytab"]) == ("lagwatch@EXAMPLE.COM", str(keytab))


def test_aiokafka_kerberos_needs_the_gssapi_package(monkeypatch):
    monkeypatch.setattr(kafka_client, "gssapi_installed", lambda: False)
    with pytest.raises(ConfigError, match="needs the `gssapi` package"):
        client_kwargs(load_config(env=kerberos_env()).cluster("corp"), "corp")


def test_aiokafka_and_faust_kerberos_use_the_keytab_as_the_client_keytab(monkeypatch, tmp_path):
    monkeypatch.setattr(kafka_client, "gssapi_installed", lambda: True)
    monkeypatch.delenv("KRB5_CLIENT_KTNAME", raising=False)
    keytab = tmp_path / "lagwatch.keytab"
    keytab.write_bytes(b"\x05\x02")
    env = kerberos_env(
        LAGWATCH__CLUSTERS__corp__SASL__KERBEROS__KEYTAB=str(keytab),
        LAGWATCH__CLUSTERS__corp__SASL__KERBEROS__SERVICE_NAME="kafka-corp",
    )
    cluster = load_config(env=env).cluster("corp")
    kwargs = client_kwargs(cluster, "corp")
    assert (kwargs["sasl_mechanism"], kwargs["sasl_kerberos_service_name"]) == ("GSSAPI", "kafka-corp")
    assert os.environ["KRB5_CLIENT_KTNAME"] == str(keytab)
    credentials = faust_broker_settings(cluster, "corp")["broker_credentials"]
    assert isinstance(credentials, faust.GSSAPICredentials) and credentials.kerberos_service_name == "kafka-corp"
    props = java_client_options(cluster, "corp")
    assert props["sasl.jaas.config"] == (
        'com.sun.security.auth.module.Krb5LoginModule required useKeyTab="true" storeKey="true"'
        f' keyTab="{keytab}" principal="lagwatch@EXAMPLE.COM";'
    )


def test_an_unreadable_keytab_names_the_option(monkeypatch, tmp_path):
    monkeypatch.setattr(kafka_client, "gssapi_installed", lambda: True)
    env = kerberos_env(LAGWATCH__CLUSTERS__corp__SASL__KERBEROS__KEYTAB=str(tmp_path / "missing.keytab"))
    with pytest.raises(ConfigError) as err:
        client_kwargs(load_config(env=env).cluster("corp"), "corp")
    assert err.value.key == "clusters.corp.sasl.kerberos.keytab"


# PLAIN and SCRAM keep working


def test_password_logins_are_unchanged_for_every_client():
    env = {
        "LAGWATCH__CLUSTERS__hub__SASL__MECHANISM": "PLAIN",
        "LAGWATCH__CLUSTERS__hub__SASL__USERNAME": "$ConnectionString",
        "LAGWATCH__CLUSTERS__hub__SASL__PASSWORD": 'Endpoint=sb://ns/;SharedAccessKey="k"',
        "LAGWATCH__CLUSTERS__hub__TLS__ENABLED": "true",
    }
    cluster = load_config(env=env).cluster("hub")
    assert client_kwargs(cluster, "hub")["sasl_plain_username"] == "$ConnectionString"
    assert librdkafka_config(cluster, "hub")["sasl.password"] == 'Endpoint=sb://ns/;SharedAccessKey="k"'
    assert java_client_options(cluster, "hub")["sasl.jaas.config"] == (
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
        ' username="$ConnectionString" password="Endpoint=sb://ns/;SharedAccessKey=\\"k\\"";'
    )


# docs/managed-kafka.md


def managed_kafka_examples() -> list[str]:
    """The YAML blocks of docs/managed-kafka.md; a block that starts indented replaces the `sasl` of a cluster."""
    doc = (paths.DOCS / "managed-kafka.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", doc, re.S)
    return [b if b.startswith("clusters:") else "clusters:\n  x:\n    tls: {enabled: true}\n" + b for b in blocks]


@pytest.mark.parametrize("example", managed_kafka_examples())
def test_every_configuration_in_the_managed_kafka_guide_loads(example, tmp_path, aws_env, monkeypatch):
    monkeypatch.setattr(kafka_client, "gssapi_installed", lambda: True)
    monkeypatch.setattr(kafka_client, "librdkafka_has_gssapi", lambda: True)
    monkeypatch.delenv("KRB5_CLIENT_KTNAME", raising=False)
    ca_file = ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt"  # any readable CA file
    path = tmp_path / "lagwatch.yaml"
    path.write_text(example.replace("/etc/ssl/corp-ca.pem", ca_file))
    config = load_config(path, env={})
    for name, cluster in config.clusters.items():
        if cluster.sasl.kerberos.keytab:  # the guide's keytab is not on this machine
            monkeypatch.setattr(os, "access", lambda *_: True)
        assert librdkafka_config(cluster, name)["security.protocol"].startswith("sasl_")
        assert java_client_options(cluster, name)["sasl.mechanism"] == cluster.sasl.mechanism


def test_the_guide_shows_each_service_and_mechanism():
    examples = "\n".join(managed_kafka_examples())
    for mechanism in ("PLAIN", "SCRAM-SHA-256", "OAUTHBEARER", "AWS_MSK_IAM", "GSSAPI"):
        assert f"mechanism: {mechanism}" in examples, mechanism
    assert examples.count("offsets-source: admin") == 2  # Confluent Cloud and Event Hubs


# every service: the ingest reads commits over an OAUTHBEARER login


def local_login(endpoint: TokenEndpoint) -> dict[str, str]:
    """The OAUTHBEARER login of `oauth_env`, for make_config's cluster `local` (keys without LAGWATCH__)."""
    sasl = {k: v for k, v in oauth_env(endpoint.url).items() if "__SASL__" in k}
    return {k.replace("LAGWATCH__CLUSTERS__cloud__", f"CLUSTERS__{CLUSTER}__"): v for k, v in sasl.items()}


async def test_the_ingest_logs_in_with_oauthbearer_and_stores_a_groups_commits(endpoint, redis_server, redis):
    """The ingest's librdkafka consumer (offsets topic) and its aiokafka clients (log ends, change notices) all log
    in through the gateway; the test's own helpers (a consumer group, the offsets-topic writer) need not."""
    with sasl_kafka(
        lambda token, _: token in endpoint.issued, require_login=lambda client_id: client_id.startswith("lagwatch")
    ) as (kafka, gateway):
        kafka.create_topic(OFFSETS_TOPIC, DEFAULT_PARTITIONS)
        kafka.create_topic("orders", 1)
        bootstrap = f"127.0.0.1:{gateway.port}"
        await produce(bootstrap, "orders", {0: 12})
        login = local_login(endpoint)
        config = make_config(bootstrap, redis_server.url, **login)
        store = WindowStore(redis, config.window())
        async with OffsetsTopicWriter(bootstrap) as writer, running(IngestWorker(config, CLUSTER)):
            order = await writer.commit("billing", "orders", 0, 10)

            async def window():
                stored = await store.reads.get_group(CLUSTER, "billing")
                return stored and stored.partitions[0].entries

            entries = await eventually(window, timeout=30)
            assert [(e.offset, e.order, e.lag) for e in entries] == [(10, order, 2)]
    assert gateway.logged_in_clients == {"lagwatch"} and gateway.unauthenticated_requests == 0
    assert gateway.plain_connections > 0  # the helpers' connections, which did not log in
    assert len(endpoint.issued) == 1 and all(accepted for _, _, accepted in gateway.logins)
    assert len(gateway.logins) >= 2  # the librdkafka consumer's and the aiokafka clients' connections


async def test_the_evaluators_faust_app_logs_in_with_oauthbearer_and_publishes_a_status(endpoint, redis_server, redis):
    """Faust's consumer (on its own thread and event loop) and the evaluator's status publisher share the token."""
    with sasl_kafka(
        lambda token, _: token in endpoint.issued, require_login=lambda client_id: client_id.startswith("lagwatch")
    ) as (kafka, gateway):
        kafka.create_topic("lagwatch.status", 1)
        kafka.create_topic("lagwatch.changes", 1)
        bootstrap = f"127.0.0.1:{gateway.port}"
        login = local_login(endpoint)
        config = make_config(bootstrap, redis_server.url, EVALUATOR__SWEEP_INTERVAL="3600", **login)
        store = WindowStore(redis, config.window())
        notices = ChangePublisher({"bootstrap.servers": bootstrap}, "lagwatch.changes")
        await notices.start()
        try:
            async with StatusTopic(bootstrap) as topic, running(EvaluatorService(config, CLUSTER, http_port=0)) as ev:

                async def owns_the_changes_partition():
                    return ev.owned_partitions() == {0}

                await eventually(owns_the_changes_partition, timeout=30)
                now = int(time.time() * 1000)
                await store.writes.add_broker_offsets(CLUSTER, "orders", [100], sampled_at=now)
                await store.writes.add_commits(CLUSTER, commits("billing", [100], now - 1000), now_ms=now)
                await notices.publish(CLUSTER, [("billing", "commits")])
                assert await topic.until("billing", 1, timeout=20) == [("NOTFOUND", "OK")]
        finally:
            await notices.stop()
    assert {"lagwatch", "lagwatch-evaluator"} <= gateway.logged_in_clients
    assert gateway.unauthenticated_requests == 0 and len(endpoint.issued) == 1
    assert all(accepted for _, _, accepted in gateway.logins)


# `lagwatch check-kafka` and start-up errors


def check_kafka(monkeypatch, env: dict[str, str], *args: str) -> int:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return cli.main(["check-kafka", *args])


def test_check_kafka_logs_in_and_reports_what_lagwatch_sees(endpoint, monkeypatch, capsys):
    with sasl_kafka(lambda token, _: token in endpoint.issued) as (kafka, gateway):
        kafka.create_topic(OFFSETS_TOPIC, 3)
        env = oauth_env(endpoint.url, LAGWATCH__CLUSTERS__cloud__TLS__ENABLED="false")
        env["LAGWATCH__CLUSTERS__cloud__BOOTSTRAP_SERVERS"] = f"127.0.0.1:{gateway.port}"
        assert check_kafka(monkeypatch, env) == 0
    report = json.loads(capsys.readouterr().out)
    cluster_id = report.pop("cluster_id")  # Kafka's own, which the ingest records (kafka_identity.py)
    assert isinstance(cluster_id, str) and cluster_id
    assert report == {
        "cluster": "cloud",
        "login": "OAUTHBEARER",
        "principal": "svc-lagwatch",
        "brokers": [f"127.0.0.1:{gateway.port}"],
        "topics": 1,
        "offsets_topic_visible": True,
        "offsets_source": "topic",
    }


def test_check_kafka_names_a_refused_login(endpoint, monkeypatch, capsys):
    assert check_kafka(monkeypatch, oauth_env(endpoint.url, secret="wrong-secret")) == 1
    err = capsys.readouterr().err
    assert "cluster cloud: login failed" in err and "HTTP 401: invalid_client" in err and "wrong-secret" not in err


def test_check_kafka_names_a_cluster_that_does_not_answer(monkeypatch, capsys):
    env = {"LAGWATCH__CLUSTERS__down__BOOTSTRAP_SERVERS": "127.0.0.1:9"}
    assert check_kafka(monkeypatch, env, "--timeout", "1") == 1
    assert "cluster down: no answer within 1 s" in capsys.readouterr().err


def test_a_service_whose_login_cannot_be_built_stops_with_one_line_naming_the_key(aws_env):
    """No region anywhere for MSK IAM: `lagwatch run` says so in one line (exit 2), not with a traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAGWATCH")}
    env.update(msk_env(), REDIS_URL="redis://127.0.0.1:1/0")
    result = subprocess.run(
        [sys.executable, "-m", "lagwatch.cli", "run", "evaluator", "--http-port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "lagwatch: config clusters.msk.sasl.aws.region: no region: set it, $AWS_REGION, or a region in the AWS profile"
    )


async def test_the_ingest_in_admin_mode_logs_in_and_polls_a_groups_commits(endpoint, redis_server, redis):
    """Confluent Cloud's case: no offsets topic to read, an OAuth login; the ingest's admin client (librdkafka) logs
    in and fetches the committed offsets of a group named in `admin-groups`."""
    with sasl_kafka(
        lambda token, _: token in endpoint.issued, require_login=lambda client_id: client_id.startswith("lagwatch")
    ) as (kafka, gateway):
        kafka.create_topic("orders", 1)
        bootstrap = f"127.0.0.1:{gateway.port}"
        await produce(bootstrap, "orders", {0: 12})
        admin = {f"CLUSTERS__{CLUSTER}__OFFSETS_SOURCE": "admin", f"CLUSTERS__{CLUSTER}__ADMIN_GROUPS": "billing"}
        config = make_config(bootstrap, redis_server.url, **admin, **local_login(endpoint))
        store = WindowStore(redis, config.window())
        committed = await consume_and_commit(bootstrap, "billing", "orders", 12)
        async with running(IngestWorker(config, CLUSTER)):

            async def window():
                stored = await store.reads.get_group(CLUSTER, "billing")
                return stored and stored.partitions[0].entries

            entries = await eventually(window, timeout=30)
    assert committed == {0: 12} and [(e.offset, e.lag) for e in entries] == [(12, 0)]
    assert gateway.logged_in_clients == {"lagwatch"} and gateway.unauthenticated_requests == 0
    assert len(endpoint.issued) == 1 and all(accepted for _, _, accepted in gateway.logins)


async def test_an_event_hubs_style_plain_login_works_over_the_wire_for_both_libraries():
    """SASL PLAIN with `$ConnectionString` and a connection string as the password, as Event Hubs takes it."""
    secret = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=lagwatch;SharedAccessKey=k="

    def accept(user: str, extra: dict[str, str]) -> bool:
        return (user, extra) == ("$ConnectionString", {"password": secret})

    with sasl_kafka(accept, mechanism="PLAIN") as (kafka, gateway):
        kafka.create_topic("orders", 1)
        env = {
            "LAGWATCH__CLUSTERS__hub__BOOTSTRAP_SERVERS": f"127.0.0.1:{gateway.port}",
            "LAGWATCH__CLUSTERS__hub__SASL__MECHANISM": "PLAIN",
            "LAGWATCH__CLUSTERS__hub__SASL__USERNAME": "$ConnectionString",
            "LAGWATCH__CLUSTERS__hub__SASL__PASSWORD": secret,
        }
        cluster = load_config(env=env).cluster("hub")
        await produce_with_both_libraries(cluster, "hub")
    assert len(gateway.logins) >= 2 and all(accepted for _, _, accepted in gateway.logins)
    assert gateway.unauthenticated_requests == 0
