"""Property-based (issue 18, "Done when"): whatever JSON bodies token holders send to `/api/v1/subscriptions`, a
running notifier is never stuck: after them, a new subscription still gets its alerts.

The notifier runs as `lagwatch run notifier` (Faust on the Kafka mock, real Redis), the api and an HTTP receiver
on an event loop in a thread; hypothesis sends arbitrary documents (hostile templates, catastrophic regexes and
unusable numbers among the values) and the api keeps whatever it accepts. Then a plain and a templated
subscription are created and two groups go from OK to ERR — one named so that a backtracking regex engine would
spin on it for days — and both subscriptions must be told of both, while `/healthz` stays "alive".
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lagwatch.services.api.service import ApiServer
from tests.kafka_helpers import make_config
from tests.services.api.test_subscriptions_api import BASE, TOKEN
from tests.services.api.test_subscriptions_api_fuzz import CATASTROPHIC_REGEX, DOCUMENTS, NESTED_LOOPS, call
from tests.services.notifier.test_notifier_service import STATUS_TOPIC, publish
from tests.services.notifier.test_notifier_support import Receiver, Timeline

SPINNING_GROUP = "a" * 64 + "!"  # any Kafka client may name its group so (a backtracking `re`: days)
PARKED = "http://127.0.0.1:9/"  # nothing listens: deliveries there fail and are retried
NOTIFIER = {
    "allow-private-targets": True,
    "backoff-base": 0.05,
    "backoff-cap": 0.1,
    "request-timeout": 0.5,
    "lease": 1,
    "poll-interval": 0.05,
    "max-attempts": 2,
}


class Stack:
    """`lagwatch run notifier` in a process of its own; the receiver and the api on a loop in a thread (hypothesis
    drives the api from synchronous code)."""

    def __init__(self, kafka, redis_url: str, tmp_path: Path) -> None:
        self.config = make_config(kafka.bootstrap, redis_url, API__TOKEN=TOKEN, NOTIFIER__ALLOW_PRIVATE_TARGETS="true")
        self.bootstrap = kafka.bootstrap
        self.config_path = tmp_path / "lagwatch.yaml"
        self.config_path.write_text(json.dumps({"notifier": NOTIFIER}))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("LAGWATCH")}
        self.env.update(REDIS_URL=redis_url, KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap)
        self.env.update(LAGWATCH__INGEST__SESSION_TIMEOUT="3")
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> Stack:
        self.thread.start()
        self.receiver = self.run(Receiver().start())
        self.api = self.run(self._api())
        self.api_task = asyncio.run_coroutine_threadsafe(self.api.run(), self.loop)
        self.run(asyncio.wait_for(self.api.started.wait(), 30))
        with socket.socket() as probe:  # a free port for the notifier's health server
            probe.bind(("127.0.0.1", 0))
            self.health_port = probe.getsockname()[1]
        lagwatch = Path(sys.executable).parent / "lagwatch"
        self.notifier = subprocess.Popen(
            [str(lagwatch), "run", "notifier", "--config", str(self.config_path), "--http-port", str(self.health_port)],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        return self

    def __exit__(self, *exc) -> None:
        self.notifier.send_signal(signal.SIGTERM)
        try:
            self.output, _ = self.notifier.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.notifier.kill()
            self.output, _ = self.notifier.communicate()
        self.loop.call_soon_threadsafe(self.api.stopping.set)
        self.api_task.result(timeout=30)
        self.run(self.receiver.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)

    async def _api(self) -> ApiServer:  # its Kafka probe wants this loop
        return ApiServer(self.config, port=0)

    def run(self, coroutine, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def send(self, method: str, path: str, doc=None) -> tuple[int, dict]:
        return call(self.api.url + path, method, None if doc is None else json.dumps(doc).encode())

    def health(self) -> tuple[int, dict]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=10) as answer:
            return answer.status, json.loads(answer.read())

    def opened(self, path: str) -> set[str]:
        return {
            r.json()["group"]
            for r in self.receiver.requests
            if r.path == path and r.headers.get("X-Lagwatch-Notification") == "open"
        }


@pytest.fixture
def stack(kafka, redis_server, tmp_path):
    kafka.create_topic(STATUS_TOPIC, 1)
    with Stack(kafka, redis_server.url, tmp_path) as stack:
        yield stack


def test_after_any_subscription_bodies_a_running_notifier_still_delivers_every_alert(stack):
    @example(doc={"id": "spin", "url": PARKED, "group_allowlist": CATASTROPHIC_REGEX}, method="POST")
    @example(doc={"id": "loops", "url": PARKED, "body_template": NESTED_LOOPS}, method="POST")
    @example(doc={"url": PARKED, "send_interval": float("inf")}, method="POST")  # row 1
    @example(doc={"url": PARKED, "send_interval": 0.2, "send_close": True}, method="PATCH")
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(doc=DOCUMENTS, method=st.sampled_from(["POST", "PUT", "PATCH"]))
    def any_body(doc, method):
        status, body = stack.send(method, BASE if method == "POST" else f"{BASE}/fuzz", doc)
        assert status < 500 and isinstance(body, dict) and body["error"] is (status >= 400), (status, body)
        kept.append(status)

    kept: list[int] = []
    assert stack.send("POST", BASE, {"id": "fuzz", "url": PARKED})[0] == 201
    any_body()
    assert any(status < 300 for status in kept)
    assert [stack.send("GET", f"{BASE}/{sub_id}")[0] for sub_id in ("spin", "loops")] == [200, 200]  # still there
    for sub_id, extra in (("canary", {}), ("canary-templated", {"body_template": '{"group": "{{ event.group }}"}'})):
        stack.send("DELETE", f"{BASE}/{sub_id}")  # in case hypothesis made one of that name
        doc = {"id": sub_id, "url": stack.receiver.url(f"/{sub_id}"), "threshold": "WARN", **extra}
        assert stack.send("POST", BASE, doc)[0] == 201

    events = []
    for group in ("billing", SPINNING_GROUP):
        timeline = Timeline(group)
        events += [timeline.to("OK"), timeline.to("ERR", (10,))]
    stack.run(publish(stack.bootstrap, *events))
    deadline = time.monotonic() + 90
    while not stack.opened("/canary") == stack.opened("/canary-templated") == {"billing", SPINNING_GROUP}:
        assert time.monotonic() < deadline and stack.notifier.poll() is None, "the notifier is stuck or gone"
        time.sleep(0.1)
    assert stack.health() == (200, {"service": "notifier", "status": "alive"})
    assert stack.send("GET", "/v3/kafka")[0] == 200  # the api answers as well
