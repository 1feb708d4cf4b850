"""The one Service base (shared/runtime/service.py): health and readiness over real HTTP and a real Redis, the
presence entry, background tasks, a client started with retries, the crash watch and the ordered stop."""

import asyncio

import aiohttp
import pytest
from aiohttp import web
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


class WithOwnApp(Service):
    """A service serving its own application (as the api): the probes are mounted on it, beside its routes."""

    def __init__(self, redis: Redis) -> None:
        app = web.Application()
        app.router.add_get("/own", self._own)
        super().__init__("own-app", host="127.0.0.1", port=0, redis=redis, app=app)

    def readiness(self):
        async def answers() -> bool:  # replaces the base's check of the same name
            return False

        return {"redis": answers}

    def reports(self):
        async def kafka() -> dict:
            return {"c1": False}

        return {"kafka": kafka}

    async def _own(self, _: web.Request) -> web.Response:
        return web.json_response({"own": True})

    async def start_work(self) -> None:
        pass


async def test_a_service_with_its_own_app_serves_the_probes_on_it_and_reports_beside_its_checks(redis_server):
    service = WithOwnApp(Redis.from_url(redis_server.url))
    assert service.label == "own-app"  # a service of every cluster
    running = asyncio.create_task(service.run())
    await asyncio.wait_for(service.started.wait(), 5)
    assert await _get(f"{service.health.url}/own") == (200, {"own": True})
    assert await _get(f"{service.health.url}/healthz") == (200, {"service": "own-app", "status": "alive"})
    assert await _get(f"{service.health.url}/readyz") == (
        503,
        {"service": "own-app", "ready": False, "checks": {"redis": False}, "kafka": {"c1": False}},
    )
    async with aiohttp.ClientSession() as http, http.get(f"{service.health.url}/metrics") as response:
        assert response.status == 404  # the app serves its own /metrics, or none
    running.cancel()  # a stop from outside sets `stopping`, so work watching it ends too
    with pytest.raises(asyncio.CancelledError):
        await running
    assert service.stopping.is_set()
