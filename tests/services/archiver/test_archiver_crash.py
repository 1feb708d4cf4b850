"""Consuming that dies of something unforeseen (not Kafka away, not a write failure) says so on `/healthz`, then ends
the archiver with an error, through the Service base's crash watch."""

import asyncio

import aiohttp
import pytest

from lagwatch.services.archiver.service import Archiver
from lagwatch.shared.runtime import service_lifecycle
from tests.kafka_helpers import CLUSTER, eventually, make_config


async def test_consuming_that_died_is_dead_on_healthz_then_an_error(kafka, redis_server, tmp_path, monkeypatch):
    monkeypatch.setattr(service_lifecycle, "DEAD_WORK_GRACE_S", 1.0)
    config = make_config(kafka.bootstrap, redis_server.url, HISTORY__PATH=str(tmp_path), HISTORY__HTTP_PORT="0")
    archiver = Archiver(config, CLUSTER, http_port=0)

    async def broken() -> None:
        raise ValueError("a bug")

    monkeypatch.setattr(archiver, "_consume", broken)
    running = asyncio.create_task(archiver.run())
    async with aiohttp.ClientSession() as http:
        status, body = await eventually(lambda: _healthz(http, archiver), timeout=10)
    assert (status, body["dead"]) == (503, ["consumer"])
    with pytest.raises(RuntimeError, match=f"archiver {CLUSTER}: consuming failed: ValueError\\('a bug'\\)"):
        await asyncio.wait_for(running, 10)


async def _healthz(http: aiohttp.ClientSession, archiver: Archiver) -> tuple[int, dict] | None:
    if not archiver.started.is_set():
        return None
    async with http.get(f"{archiver.health.url}/healthz") as response:
        return (response.status, await response.json()) if response.status == 503 else None
