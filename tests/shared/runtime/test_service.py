"""The one Service base (shared/runtime/service.py): health and readiness over real HTTP and a real Redis, the
presence entry, background tasks, a client started with retries, the crash watch and the ordered stop."""

import asyncio

import aiohttp
import pytest
from redis.asyncio import Redis

from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime import service_lifecycle
from lagwatch.shared.runtime.service import Service


class Sample(Service):
    def __init__(self, redis: Redis | None, *, announce: bool = True) -> None:
        self.own_ok = True
        self.died: str | None = None
        self.steps: list[str] = []
        super().__init__("sample", "c1", host="127.0.0.1", port=0, redis=redis, announce=announce)

    def readiness(self):
        async def own() -> bool:
            return self.own_ok

        return {"own": own}

    def liveness(self):
        return {"loop": lambda: self.died is None}

    def dead_work(self) -> str | None:
        return self.died

    async def start_work(self) -> None:
        self.steps.append("start")
        self.background = self.spawn(asyncio.sleep(3600))

    async def stop_work(self) -> None:
        self.steps.append(f"stop (background cancelled: {self.background.cancelled()})")


async def _get(url: str) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        return response.status, await response.json()


async def _until(condition, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


async def test_a_service_reports_its_checks_announces_itself_and_stops_in_order(redis_server):
    service = Sample(Redis.from_url(redis_server.url))
    running = asyncio.create_task(service.run())
    await _until(lambda: service.steps == ["start"])
    assert await _get(f"{service.health.url}/readyz") == (
        200,
        {"service": "sample", "ready": True, "checks": {"redis": True, "own": True}},
    )
    service.own_ok = False
    status, body = await _get(f"{service.health.url}/readyz")
    assert status == 503 and body["checks"] == {"redis": True, "own": False}
    observer = Redis.from_url(redis_server.url)
    await _until(lambda: service.presence is not None and service.presence._running is not None)
    await asyncio.sleep(0.1)
    assert await observer.zcard(keys.instances("c1", "sample")) == 1
    service.stopping.set()
    await asyncio.wait_for(running, 5)
    assert service.steps == ["start", "stop (background cancelled: True)"]
    assert await observer.zcard(keys.instances("c1", "sample")) == 0  # withdrawn at the stop
    await observer.aclose()
    with pytest.raises(aiohttp.ClientConnectionError):  # the health server is down
        await _get(f"{service.health.url}/healthz")


async def test_work_that_died_says_so_on_healthz_then_ends_the_process_with_an_error(monkeypatch):
    monkeypatch.setattr(service_lifecycle, "DEAD_WORK_GRACE_S", 0.5)
    service = Sample(None, announce=False)
    running = asyncio.create_task(service.run())
    await _until(lambda: service.steps == ["start"])
    assert (await _get(f"{service.health.url}/readyz"))[1]["checks"] == {"own": True}  # no Redis, no Redis check
    service.died = "consumer failed"
    status, body = await _get(f"{service.health.url}/healthz")
    assert status == 503 and body["dead"] == ["loop"]
    with pytest.raises(RuntimeError, match="sample c1: consumer failed"):
        await asyncio.wait_for(running, 5)
    assert service.steps[-1] == "stop (background cancelled: True)"


async def test_a_client_is_started_with_retries_until_it_starts_or_a_stop_is_asked(monkeypatch):
    service = Sample(None, announce=False)
    tries = []

    async def start() -> None:
        tries.append(1)
        if len(tries) < 3:
            raise ConnectionError("Kafka not up yet")

    assert await service.start_with_retries(start, "the producer") is True
    assert len(tries) == 3

    async def never() -> None:
        raise ConnectionError("down")

    asyncio.get_running_loop().call_later(0.3, service.stopping.set)
    assert await asyncio.wait_for(service.start_with_retries(never, "the producer"), 5) is False
