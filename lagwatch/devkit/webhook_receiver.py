"""A local stand-in for Slack and webhook endpoints, for the demo and its tests.

It receives the notifier's posts on `/webhook` (the status-change event as the body) and `/slack` (a Block Kit
message), checks each request as docs/webhooks.md tells receivers to (the raw body's HMAC signature, the timestamp's
age, the notification id for duplicates), keeps every accepted alert (`alerts`) and every refused request
(`rejected`), appends both to a JSON-lines file when given one, and hands each accepted alert to `on_alert` (the
demo prints its one-line `summary()`). `deliveries` keeps every authentic request as it arrived, repeats included
(what the notifier really sent, before this receiver's de-duplication), and `hold`, when set, is awaited before an
authentic request is acted on: the fault drills play a slow endpoint with it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from lagwatch.shared.notifications.delivery.signing import (
    EVENT_ID_HEADER,
    MALFORMED,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    SignatureError,
    verify_request,
)
from lagwatch.shared.runtime.printable import printable

CHANNELS = ("webhook", "slack")
VALID = "valid"
TOLERANCE_S = 300  # the timestamp's age a request may have


@dataclass(frozen=True)
class ReceivedAlert:
    """One request as received: `verdict` is VALID or why it was refused (a SignatureError code)."""

    received_at: float
    channel: str  # "webhook" or "slack"
    kind: str  # X-Lagwatch-Notification: open, update, repeat, close, status
    notification_id: str
    subscription: str
    timestamp: str
    signature: str
    verdict: str
    body: str  # raw, as signed

    def document(self) -> dict[str, Any]:
        return json.loads(self.body)

    def summary(self) -> str:
        """One line for a terminal: channel, kind, what happened, and the signature check (control characters in
        the names it quotes escaped: it is printed on the demo's console)."""
        try:
            doc = self.document()
        except ValueError:
            what = "(body is not JSON)"
        else:
            what = doc.get("text", "?") if self.channel == "slack" else _event_line(doc)
        tail = "signature ok" if self.verdict == VALID else f"REFUSED: {self.verdict}"
        return printable(f"{self.channel:<7} {self.kind:<6} {what}  [{tail}]")


def _event_line(event: dict[str, Any]) -> str:
    worst = ", ".join(_partition_line(p) for p in event.get("partitions") or [] if isinstance(p, dict))
    line = f"{event.get('group')} on {event.get('cluster')}: {_change(event)}"
    return f"{line}, total lag {event.get('totallag')}" + (f" ({worst})" if worst else "")


def _change(event: dict[str, Any]) -> str:
    """A status event's transition; a lag-threshold event has none: which alert, its threshold, whether it starts."""
    if event.get("kind") != "lag_threshold":
        return f"{event.get('previous_status')} -> {event.get('status')}"
    edge = "starts" if event.get("above") else "ends"
    alert = event.get("alert", "lag-seconds")
    return f"{alert} alert (threshold {event.get('threshold_seconds')} s) {edge}, status {event.get('status')}"


def _partition_line(partition: dict[str, Any]) -> str:
    """A status event's partition has a status; a lag-threshold event's has lag in seconds instead."""
    line = f"{partition.get('topic')}/{partition.get('partition')}"
    if "status" in partition:
        line += f" {partition['status']}"
    line += f" lag {partition.get('current_lag')}"
    if partition.get("lag_seconds") is not None:
        line += f" ({partition['lag_seconds']} s)"
    return line


class WebhookReceiver:
    """An aiohttp server on a free port of 127.0.0.1 verifying requests signed with `secret`."""

    def __init__(
        self,
        secret: str,
        *,
        record_file: Path | None = None,
        on_alert: Callable[[ReceivedAlert], None] | None = None,
    ) -> None:
        self.secret = secret
        self.port = 0  # chosen by start()
        self.record_file = record_file
        self.on_alert = on_alert
        self.alerts: list[ReceivedAlert] = []
        self.rejected: list[ReceivedAlert] = []
        self.deliveries: list[ReceivedAlert] = []  # every authentic request, duplicates included
        self.hold: Callable[[ReceivedAlert], Awaitable[None]] | None = None
        self.duplicates = 0
        self._seen: set[tuple[str, str]] = set()
        self._runner: web.AppRunner | None = None

    def url(self, channel: str) -> str:
        return f"http://127.0.0.1:{self.port}/{channel}"

    async def start(self) -> WebhookReceiver:
        app = web.Application()
        for channel in CHANNELS:
            app.router.add_post(f"/{channel}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> WebhookReceiver:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()  # the raw bytes: the signature covers them, not a re-encoding
        alert = ReceivedAlert(
            received_at=time.time(),
            channel=request.path.strip("/"),
            kind=request.headers.get("X-Lagwatch-Notification", ""),
            notification_id=request.headers.get(EVENT_ID_HEADER, ""),
            subscription=request.headers.get("X-Lagwatch-Subscription", ""),
            timestamp=request.headers.get(TIMESTAMP_HEADER, ""),
            signature=request.headers.get(SIGNATURE_HEADER, ""),
            verdict=self._verdict(request, body),
            body=body.decode("utf-8", errors="replace"),
        )
        if alert.verdict != VALID:
            self._keep(self.rejected, alert)
            status = 400 if alert.verdict == MALFORMED else 401
            return web.json_response({"error": alert.verdict}, status=status)
        self.deliveries.append(alert)
        if self.hold is not None:
            await self.hold(alert)
        # Each path is its own endpoint with its own memory: two subscriptions get the same event's id.
        seen = (alert.channel, alert.notification_id)
        if seen in self._seen:  # a retry after a lost answer, or a replay: acknowledge, don't act again
            self.duplicates += 1
            return web.json_response({"duplicate": True})
        self._seen.add(seen)
        self._keep(self.alerts, alert)
        if self.on_alert:
            self.on_alert(alert)
        return web.json_response({"ok": True})

    def _verdict(self, request: web.Request, body: bytes) -> str:
        try:
            verify_request(self.secret, request.headers, body, tolerance_s=TOLERANCE_S)
        except SignatureError as exc:
            return exc.code
        return VALID

    def _keep(self, into: list[ReceivedAlert], alert: ReceivedAlert) -> None:
        into.append(alert)
        if self.record_file is not None:
            with self.record_file.open("a") as f:
                f.write(json.dumps(asdict(alert)) + "\n")


def read_records(path: Path) -> list[ReceivedAlert]:
    """What a receiver appended to its `record_file` (accepted and refused requests)."""
    if not path.exists():
        return []
    return [ReceivedAlert(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
