"""`lagwatch dev up` (what `make run` runs) end to end: Redis, the Kafka mock, the four services as processes, the
local webhook receiver and the demo workload. Every scenario's status sequence appears on `lagwatch.status`, the
matching notifications reach the receiver with signatures that verify, the healthy and idle groups raise nothing,
and Ctrl-C stops every process. Also: the receiver refuses forged, stale and malformed requests."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import yaml

from lagwatch.devkit.demo_scenarios import scenarios
from lagwatch.devkit.demo_system import ALERTS_FILE, CONFIG_FILE, DemoTimings
from lagwatch.devkit.webhook_receiver import VALID, WebhookReceiver, read_records
from lagwatch.shared.notifications.delivery import signing
from tests.kafka_helpers import eventually
from tests.services.evaluator.test_evaluator import StatusTopic

SCENARIOS = scenarios(DemoTimings().intervals)


def start_demo(state_dir: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "lagwatch.cli", "dev", "up", "--state-dir", str(state_dir), "--api-port", "0"],
        stdout=(state_dir.parent / "demo-output.txt").open("w"),
        stderr=subprocess.STDOUT,
        env={k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS")},
    )


async def demo_env(state_dir: Path, proc: subprocess.Popen) -> dict[str, str]:
    """The addresses, written once every service is ready."""

    async def written():
        assert proc.poll() is None, output(state_dir)
        path = state_dir / "env"
        return path.exists() and dict(line.split("=", 1) for line in path.read_text().splitlines())

    return await eventually(written, timeout=180, interval=0.5)


def output(state_dir: Path) -> str:
    return (state_dir.parent / "demo-output.txt").read_text()


def descendants(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found |= {int(child)} | descendants(int(child))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_demo_scenarios_reach_the_status_topic_and_the_receiver(tmp_path):
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    proc = start_demo(state_dir)
    children: set[int] = set()
    try:
        env = await demo_env(state_dir, proc)
        children = descendants(proc.pid)
        async with StatusTopic(env["KAFKA_BOOTSTRAP_SERVERS"]) as topic:
            for s in SCENARIOS:
                assert await topic.until(s.group, len(s.expected), timeout=90) == list(s.expected), s.group
            await asyncio.sleep(4)  # a few more ticks and sweeps: nothing else may happen
            await topic.read()
        for s in SCENARIOS:
            assert topic.transitions(s.group) == list(s.expected), s.group
            if s.bad_partition:
                opening = next(e for e in topic.events if e["group"] == s.group and e["previous_status"] == "OK")
                assert [(p["topic"], p["status"]) for p in opening["partitions"]] == [(s.topic, s.bad_partition)]

        alerts = state_dir / ALERTS_FILE
        # each to the webhook and the Slack subscription
        wanted = sum(2 * (len(s.notifications) + len(s.alerts)) for s in SCENARIOS)
        await eventually(lambda: _count(alerts, wanted), timeout=30)
        await asyncio.sleep(2)  # anything more would be a notification too many
        records = read_records(alerts)
        secret = yaml.safe_load((state_dir / CONFIG_FILE).read_text())["subscriptions"][0]["secret"]
        for r in records:
            assert r.verdict == VALID, r
            signing.verify_signature(
                secret, r.timestamp, r.notification_id, r.kind, r.body.encode(), r.signature, tolerance_s=3600
            )
        events_by_id = {e["event_id"]: e for e in topic.events}
        for s in SCENARIOS:
            hooks = [r for r in records if r.channel == "webhook" and r.document()["group"] == s.group]
            statuses = [r for r in hooks if not r.kind.startswith("lag-")]  # the others: lag-threshold alerts
            assert [r.kind for r in statuses] == list(s.notifications), s.group
            assert all(r.document() == events_by_id[r.notification_id] for r in statuses), s.group  # the event
            alerts = [f"{r.document()['alert']} {r.kind}" for r in hooks if r.kind.startswith("lag-")]
            assert alerts == list(s.alerts), s.group
            slack = [r for r in records if r.channel == "slack" and s.group in r.document()["text"]]
            assert [r.kind for r in slack if not r.kind.startswith("lag-")] == list(s.notifications), s.group
            assert len([r for r in slack if r.kind.startswith("lag-")]) == len(s.alerts), s.group

        async with aiohttp.ClientSession() as http:  # the addresses printed for people work
            async with http.get(f"{env['API_URL']}/v3/kafka/local/consumer/demo-stalled/status") as response:
                status = (await response.json())["status"]
            assert (status["status"], [p["status"] for p in status["partitions"]]) == ("ERR", ["STALL"])
            async with http.get(env["DASHBOARD_URL"]) as response:
                assert response.status == 200 and "text/html" in response.content_type
            # a Slack alert's button opens its group on the dashboard (filtered for it: far down a big cluster too)
            opened = next(r for r in records if r.channel == "slack" and "demo-stalled" in r.document()["text"])
            link = _button_url(opened.document())
            assert link == f"{env['API_URL']}/dashboard?cluster=local&q=demo-stalled&group=demo-stalled", link
            async with http.get(link) as response:
                assert response.status == 200 and "text/html" in response.content_type
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0, output(state_dir)
    out = output(state_dir)
    assert "Dashboard:" in out and "lagwatch.status" in out and "ALERT webhook open" in out, out
    assert children and not [pid for pid in children if alive(pid)], "processes left behind"
    assert not (state_dir / "env").exists()


def _button_url(message: dict) -> str:
    """The URL of the Slack message's button (its attachment's actions block)."""
    blocks = [b for a in message.get("attachments", []) for b in a["blocks"]] + message["blocks"]
    return next(e["url"] for b in blocks if b["type"] == "actions" for e in b["elements"])


async def _count(path: Path, n: int) -> bool:
    return len(read_records(path)) >= n


async def test_receiver_refuses_forgeries_and_acknowledges_duplicates(tmp_path):
    seen = []
    async with (
        WebhookReceiver("s3cret", record_file=tmp_path / "alerts.jsonl", on_alert=seen.append) as receiver,
        aiohttp.ClientSession() as http,
    ):
        body = json.dumps({"group": "g", "cluster": "c", "previous_status": "OK", "status": "WARN", "totallag": 3})

        async def post(secret: str, ts: int, event_id: str = "n-1", signature: str | None = None, to="webhook"):
            headers = {
                signing.EVENT_ID_HEADER: event_id,
                signing.TIMESTAMP_HEADER: str(ts),
                signing.SIGNATURE_HEADER: signature or signing.sign(secret, ts, event_id, "open", body),
                "X-Lagwatch-Notification": "open",
            }
            async with http.post(receiver.url(to), data=body.encode(), headers=headers) as response:
                return response.status, await response.json()

        now = int(time.time())
        assert await post("s3cret", now) == (200, {"ok": True})
        assert await post("s3cret", now) == (200, {"duplicate": True})
        assert await post("s3cret", now, to="slack") == (200, {"ok": True})  # another endpoint: news to it
        assert await post("wrong", now, "n-2") == (401, {"error": signing.BAD_SIGNATURE})
        assert await post("s3cret", now - 3600, "n-3") == (401, {"error": signing.STALE_TIMESTAMP})
        assert await post("s3cret", now, "n-4", signature="sha1=abc") == (400, {"error": signing.MALFORMED})
    assert [(a.channel, a.notification_id) for a in seen] == [("webhook", "n-1"), ("slack", "n-1")]
    assert receiver.duplicates == 1
    assert "g on c: OK -> WARN" in seen[0].summary()
    records = read_records(tmp_path / "alerts.jsonl")
    assert [(r.notification_id, r.verdict) for r in records] == [
        ("n-1", VALID),
        ("n-1", VALID),
        ("n-2", signing.BAD_SIGNATURE),
        ("n-3", signing.STALE_TIMESTAMP),
        ("n-4", signing.MALFORMED),
    ]
