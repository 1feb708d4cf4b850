"""Helpers for the notifier tests: HTTP receivers standing in for Slack and webhook endpoints, and status-change
events built with the evaluator's own `build_event`. (Imported by the other test_notifier*.py modules.)"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from aiohttp import web

from lagwatch.services.notifier.channels import Notification
from lagwatch.shared.events.status_event import Incident, StatusEvent, build_event, next_incident
from lagwatch.shared.notifications.subscriptions.notification_policy import Event, event_from_json
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import GroupStatus, OffsetEntry, PartitionStatus, Status

CLUSTER = "local"


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    def json(self):
        return json.loads(self.body)


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1 recording every request. `script` holds responses used in order, each a status
    code, a (status, headers) pair or "hang"; after it runs out every request gets `default`."""

    script: list = field(default_factory=list)
    default: object = 200
    requests: list[Received] = field(default_factory=list)
    port: int = 0

    async def start(self) -> Receiver:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        self._hangs: list[asyncio.Event] = []
        return self

    def release(self) -> None:
        """Answer the requests held by "hang" (200)."""
        for event in self._hangs:
            event.set()

    async def stop(self) -> None:
        self.release()
        await self._runner.cleanup()

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
        await self.stop()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(
            Received(request.method, request.path_qs, dict(request.headers), await request.read(), time.monotonic())
        )
        answer = self.script.pop(0) if self.script else self.default
        if answer == "hang":
            event = asyncio.Event()
            self._hangs.append(event)
            await event.wait()
            answer = 200
        status, headers = answer if isinstance(answer, tuple) else (answer, {})
        return web.Response(status=status, headers=headers, text="ok" if status < 300 else f"error {status}")

    async def wait_for(self, n: int, timeout: float = 15.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while len(self.requests) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"wanted {n} requests, got {len(self.requests)}: {self.requests}")
            await asyncio.sleep(0.01)
        return self.requests


class Timeline:
    """A group's successive status-change events, with seq and incident ids as the evaluator assigns them."""

    def __init__(self, group: str, cluster: str = CLUSTER, start_ms: int | None = None) -> None:
        self.cluster, self.group = cluster, group
        self.seq = 0
        self.status = Status.NOTFOUND
        self.incident = Incident(None, None)
        self.now = int(time.time() * 1000) if start_ms is None else start_ms

    def to(self, status: str, lags: tuple[int, ...] = (0, 0), *, step_ms: int = 60_000) -> dict:
        """The next event as the JSON object the notifier reads (what deliveries and receivers see)."""
        return self.next(status, lags, step_ms=step_ms).as_dict()

    def next(self, status: str, lags: tuple[int, ...] = (0, 0), *, step_ms: int = 60_000) -> StatusEvent:
        """The next event, typed (what the notifier's rules take)."""
        self.seq += 1
        self.now += step_ms
        new = Status[status]
        carried, self.incident = next_incident(
            self.status, new, self.incident, self.cluster, self.group, self.seq, self.now
        )
        event = build_event(
            cluster=self.cluster,
            group=self.group,
            seq=self.seq,
            previous=self.status,
            group_status=None if new == Status.NOTFOUND else group_status(self.cluster, self.group, new, lags),
            incident=carried,
            evaluated_at=self.now,
        )
        self.status = new
        return event


def typed(event: dict) -> Event:
    """An event's JSON object (status-change or lag-threshold) as the typed event the notifier handles."""
    return event_from_json(event)


def notification(event: dict, kind: str, **fields) -> Notification:
    """A notification of `kind` carrying `event` (its JSON object), as a channel renders it."""
    return Notification(typed(event), kind, **fields)


def group_status(cluster: str, group: str, status: Status, lags: tuple[int, ...]) -> GroupStatus:
    bad = {Status.OK: Status.OK, Status.WARN: Status.WARN, Status.ERR: Status.STALL}[status]
    parts = tuple(
        PartitionStatus(
            "orders",
            i,
            bad if lag else Status.OK,
            OffsetEntry(1000 + i, 1_700_000_000_000),
            OffsetEntry(2000 + i, 1_700_000_060_000),
            lag,
            1.0,
            f"/10.0.0.{i + 1}",
            f"{group}-{i}",
        )
        for i, lag in enumerate(lags)
    )
    worst = max(parts, key=lambda p: p.current_lag) if parts else None
    return GroupStatus(cluster, group, status, 1.0, parts, worst, sum(lags))


async def test_the_receiver_answers_as_scripted():
    import aiohttp

    async with Receiver(script=[500, (429, {"Retry-After": "1"})]) as r, aiohttp.ClientSession() as http:
        codes = []
        for _ in range(3):
            async with http.post(r.url(), data=b"x") as resp:
                codes.append(resp.status)
        assert codes == [500, 429, 200] and [q.body for q in r.requests] == [b"x"] * 3


def test_timelines_carry_incidents_like_the_evaluator():
    t = Timeline("billing")
    opened, worse, closed, later = t.to("WARN", (5, 0)), t.to("ERR", (9, 1)), t.to("OK"), t.to("WARN", (3, 0))
    assert opened["incident_id"] and opened["incident_id"] == worse["incident_id"] == closed["incident_id"]
    assert later["incident_id"] not in (None, opened["incident_id"]) and [e["seq"] for e in (opened, later)] == [1, 4]


async def handled(service, n):
    return service.events_handled >= n


async def outbox_empty(redis):
    return await redis.hlen(keys.OUTBOX_DELIVERIES) == 0


async def mailed(mailbox):
    return len(mailbox.envelopes) >= 1
