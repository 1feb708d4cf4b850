"""HTTPS on the api's listener (services/api/listener_tls.py): served with the configured certificate, plain HTTP
refused; a certificate renewed on disk is served from the next connection, a half-written one never; a missing or
mismatched file stops `lagwatch run api` with one line, and `lagwatch config check` says so beforehand."""

import asyncio
import shutil
import socket
import ssl

import aiohttp
import pytest

from lagwatch.services.api import listener_tls
from tests.lagwatch.test_cli import lagwatch, one_line_error
from tests.services.api.test_api import api_config, serving
from tests.tls_helpers import make_ca, server_certificate


@pytest.fixture
def tls(tmp_path):
    """The CA, and the certificate and key the api is configured with (copies: a test may renew them)."""
    made = make_ca(tmp_path)
    shutil.copy(made["cert"], tmp_path / "api.pem")
    shutil.copy(made["key"], tmp_path / "api.key")
    return {**made, "cert": tmp_path / "api.pem", "key": tmp_path / "api.key"}


def tls_config(redis_url, tls):
    return api_config(redis_url, API__TLS_CERT_FILE=str(tls["cert"]), API__TLS_KEY_FILE=str(tls["key"]))


def served_serial(port: int, ca) -> str:
    """The serial number of the certificate the api presents to a new connection, verified against the CA."""
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as conn,
    ):
        return conn.getpeercert()["serialNumber"]


async def test_the_api_serves_https_with_its_certificate_and_refuses_plain_http(redis_server, redis, tls):
    async with serving(tls_config(redis_server.url, tls)) as api:
        assert api.url.startswith("https://127.0.0.1:")
        trusted = aiohttp.TCPConnector(ssl=ssl.create_default_context(cafile=str(tls["ca"])))
        async with aiohttp.ClientSession(connector=trusted) as https, https.get(f"{api.url}/v3/kafka") as response:
            assert response.status == 200 and (await response.json())["clusters"] == ["local"]
        async with aiohttp.ClientSession() as plain:
            with pytest.raises(aiohttp.ClientError):
                async with plain.get(f"http://127.0.0.1:{api.port}/v3/kafka") as response:
                    await response.read()


async def test_a_renewed_certificate_is_served_from_the_next_connection_and_a_broken_one_never(
    redis_server, redis, tls, monkeypatch
):
    monkeypatch.setattr(listener_tls, "RELOAD_CHECK_S", 0.1)
    async with serving(tls_config(redis_server.url, tls)) as api:
        first = await asyncio.to_thread(served_serial, api.port, tls["ca"])
        tls["cert"].write_text("-----BEGIN CERTIFICATE-----\nhalf-writ")  # caught while it is written
        await asyncio.sleep(0.5)
        assert await asyncio.to_thread(served_serial, api.port, tls["ca"]) == first  # the one in use stays
        cert, key = server_certificate(tls["ca"].parent, "renewed")
        shutil.copy(key, tls["key"])
        shutil.copy(cert, tls["cert"])
        for _ in range(50):
            renewed = await asyncio.to_thread(served_serial, api.port, tls["ca"])
            if renewed != first:
                break
            await asyncio.sleep(0.1)
    assert renewed != first


def test_run_api_with_a_missing_certificate_says_so_in_one_line(tmp_path, redis_server):
    env = {"REDIS_URL": redis_server.url, "LAGWATCH__API__TLS_CERT_FILE": str(tmp_path / "nope.pem")}
    result = lagwatch("run", "api", "--http-port", "0", env=env)
    assert result.returncode == 2
    assert f"api.tls-cert-file: {tmp_path / 'nope.pem'}: no such file" in one_line_error(result)


def test_config_check_finds_a_key_that_is_not_the_certificates(tmp_path, tls):
    _, other_key = server_certificate(tls["ca"].parent, "other")
    path = tmp_path / "lagwatch.yaml"
    path.write_text(f"api: {{tls-cert-file: {tls['cert']}, tls-key-file: {other_key}}}\n")
    result = lagwatch("config", "check", "--config", str(path))
    assert result.returncode == 2
    assert "api.tls-cert-file: not a PEM certificate with its private key" in result.stderr


def test_a_key_without_its_certificate_is_refused_as_the_file_loads(tmp_path):
    path = tmp_path / "lagwatch.yaml"
    path.write_text("api: {tls-key-file: /etc/lagwatch/api.key}\n")
    result = lagwatch("config", "check", "--config", str(path))
    assert result.returncode == 2
    assert "api.tls-key-file: needs tls-cert-file" in one_line_error(result)
