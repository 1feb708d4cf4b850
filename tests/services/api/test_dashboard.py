"""The dashboard (issue 7; lag in seconds from issue 8): its JSON on a real api server over real Redis windows, the
evaluator's capped list of recent status changes, and the page itself rendered by headless Chromium.

Windows are written through the window store as the ingest would (a broker poll, then commits, every 30 s for
three minutes, ending just now); the evaluator's records through the status store with real status-change events.
Set LAGWATCH_DASHBOARD_SCREENSHOT=<path> to also save the browser test's screenshot there (docs/dashboard.png).
"""

import asyncio
import dataclasses
import os
import re
import shutil
import socket
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pytest

from lagwatch.services.api import dashboard
from lagwatch.services.api.dashboard_cache import SharedRecentResults
from lagwatch.shared.events.status_event import Incident, build_event, encode, next_incident
from lagwatch.shared.events.status_store import RECENT_CHANGES, StatusStore
from lagwatch.shared.notifications.subscriptions.silences import Matcher, Silence, SilenceStore
from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Commit, GroupStatus, OffsetEntry, Status
from lagwatch.shared.runtime.config import load_config
from lagwatch.shared.runtime.presence import Presence
from lagwatch.shared.statuses.lag_sparkline import lag_sparkline
from lagwatch.shared.statuses.results_store import ResultsStore, result_of
from lagwatch.shared.statuses.verdicts import stored_group_status, time_lags
from lagwatch.shared.windows.packing import pack_commit_ring
from lagwatch.shared.windows.store import WindowStore
from lagwatch.shared.windows.stored_group import StoredPartition
from lagwatch.shared.windows.window_writes import GroupMetadataUpdate
from tests.evaluated import evaluate
from tests.kafka_helpers import CLUSTER
from tests.services.api.test_api import api_config, serving
from tests.services.api.test_api import seed as seed_billing_and_audit

INTERVALS = 6
STEP = 30_000
STEPS = range(INTERVALS)
QUIET = Incident(None, None)


def dashboard_config(redis_url):
    return api_config(redis_url, STORAGE__INTERVALS=str(INTERVALS))


@pytest.fixture
async def api(redis_server, redis):
    async with serving(dashboard_config(redis_server.url)) as server:
        yield server


async def get(http, url):
    async with http.get(url, allow_redirects=False) as response:
        body = await response.json() if response.content_type == "application/json" else await response.text()
        return response.status, body, response.headers


def now_ms():
    return int(time.time() * 1000)


def at(step, now):
    """When step `step` happened: the last one 2 s ago."""
    return now - (INTERVALS - 1 - step) * STEP - 2_000


# Log-end offsets and commits per step. billing: orders/0 alternates between caught up and 20 behind (OK),
# orders/1 stuck at 1900 while the log end grows (STALL, so the group is ERR). audit: caught up on orders/2.
# search-indexer: 4 partitions of clicks, falling 50 further behind every step (WARN). payments-ledger: a few
# messages behind, now and then caught up (OK).
def log_ends(i):
    return {
        "orders": {0: 1000 + 100 * i, 1: 2000 + 100 * i, 2: 500 + 10 * i},
        "clicks": {p: 10_000 * (p + 1) + 300 * i for p in range(4)},
        "payments": {p: 700 + 40 * i for p in range(2)},
    }


PAYMENTS_LAGS = [3, 0, 5, 2, 0, 4]


def commits(i, ends):
    return [
        ("billing", "orders", 0, ends["orders"][0] - (i % 2) * 20),
        ("billing", "orders", 1, 1900),
        ("audit", "orders", 2, ends["orders"][2]),
        *[("search-indexer", "clicks", p, ends["clicks"][p] - 50 * (i + 1)) for p in range(4)],
        *[("payments-ledger", "payments", p, ends["payments"][p] - PAYMENTS_LAGS[i]) for p in range(2)],
    ]


async def seed_windows(redis, now):
    store = WindowStore(redis, dashboard_config("redis://unused").window())
    order = 0
    for i in STEPS:
        t, ends = at(i, now), log_ends(i)
        await store.writes.add_broker_polls(CLUSTER, ends, sampled_at=t)
        batch = []
        for group, topic, partition, offset in commits(i, ends):
            order += 1
            batch.append(Commit(group, topic, partition, offset, t, order, t))
        await store.writes.add_commits(CLUSTER, batch, now_ms=t)
    owners = {("orders", 0): ("/10.0.0.1", "billing-a"), ("orders", 1): ("/10.0.0.2", "billing-b")}
    await store.writes.set_groups_metadata(
        CLUSTER, [GroupMetadataUpdate("billing", generation=3, started_at=now, owners=owners)], now
    )
    return store


async def record(history, group, previous, status: GroupStatus | None, seq, incident, when, lags=None):
    """One transition as the evaluator records it (event included); returns the incident the group keeps."""
    new = status.status if status else Status.NOTFOUND
    carried, keeps = next_incident(previous, new, incident, CLUSTER, group, seq, when)
    event = build_event(
        cluster=CLUSTER,
        group=group,
        seq=seq,
        previous=previous,
        group_status=status,
        incident=carried,
        evaluated_at=when,
        time_lags=lags,
    )
    applied = await history.transition(
        CLUSTER, group, expected_seq=seq - 1, status=new, keeps=keeps, event=encode(event), now_ms=when
    )
    assert applied
    return keeps


async def seed(redis, now):
    """The windows, then the evaluator's records: every group became OK at the first step; billing turned ERR at
    step 3 and search-indexer WARN at step 4 (incidents open)."""
    store = await seed_windows(redis, now)
    config = dashboard_config("redis://unused")
    history = StatusStore(redis, config.window().expire_group_ms)
    groups = {g.group: g for g in await store.reads.get_groups(CLUSTER, await store.reads.list_groups(CLUSTER), now)}
    statuses = {name: stored_group_status(g, INTERVALS, now, config.rules()) for name, g in groups.items()}
    for name in sorted(groups):
        ok = dataclasses.replace(statuses[name], status=Status.OK)
        await record(history, name, Status.NOTFOUND, ok, 1, QUIET, at(0, now))
    for name, step in [("billing", 3), ("search-indexer", 4)]:
        await record(history, name, Status.OK, statuses[name], 2, QUIET, at(step, now), time_lags(groups[name], now))
    # the ready results the evaluator stores with its evaluation (what the overview reads)
    results = {
        name: result_of(
            statuses[name], g.last_commit_ms, [now] if name == "billing" else [], time_lags(g, now), now, INTERVALS
        )
        for name, g in groups.items()
    }
    lines = {
        name: lag_sparkline(g.partitions, statuses[name].totallag, now, INTERVALS)[:-1] for name, g in groups.items()
    }
    await ResultsStore(redis).write(CLUSTER, results, lines)


# --- the JSON ---------------------------------------------------------------------------------------------------


async def test_the_overview_lists_groups_worst_first_with_lag_sparklines_incidents_and_changes(api, redis, http):
    now = now_ms()
    await seed(redis, now)
    status, body, _ = await get(http, f"{api.url}/dashboard/api/overview")
    assert status == 200 and body["error"] is False
    assert (body["clusters"], body["cluster"]) == ([CLUSTER], CLUSTER)
    assert now <= body["generated_at"] <= now_ms()
    assert body["services"] == {"ingest": 0, "evaluator": 0, "notifier": 0}  # none runs here: the page says so

    rows = {row["group"]: row for row in body["groups"]}
    assert [(r["group"], r["status"], r["totallag"]) for r in body["groups"]] == [
        ("billing", "ERR", 20 + 600),
        ("search-indexer", "WARN", 4 * 300),
        ("payments-ledger", "OK", 2 * 4),
        ("audit", "OK", 0),
    ]
    assert rows["billing"]["maxlag"] == {"topic": "orders", "partition": 1, "current_lag": 600}
    # orders has 3 partitions: p2, never committed, is counted as Burrow counts it
    assert rows["billing"]["partition_count"] == 3 and rows["billing"]["rebalances_last_hour"] == 1
    # the total lag at each step (the windows' lags summed), then now
    assert [lag for _, lag in rows["billing"]["sparkline"]] == [100, 220, 300, 420, 500, 620, 620]
    assert [lag for _, lag in rows["search-indexer"]["sparkline"]] == [200, 400, 600, 800, 1000, 1200, 1200]
    assert [t for t, _ in rows["billing"]["sparkline"][:-1]] == [at(i, now) for i in STEPS]
    assert rows["audit"]["sparkline"][-1][1] == 0

    # lag in seconds: billing's stuck offset is older than the log-end history, so "at least" (since step 0);
    # search-indexer's newest commits were the log end at step 4
    assert rows["billing"]["max_lag_seconds_lower_bound"] is True
    assert rows["billing"]["max_lag_seconds"] == pytest.approx((now - at(0, now)) / 1000, abs=5)
    assert rows["search-indexer"]["max_lag_seconds_lower_bound"] is False
    assert rows["search-indexer"]["max_lag_seconds"] == pytest.approx((now - at(4, now)) / 1000, abs=5)
    assert rows["audit"]["max_lag_seconds"] == 0

    incidents = {i["group"]: i for i in body["incidents"]}
    assert set(incidents) == {"billing", "search-indexer"}
    assert incidents["billing"]["status"] == "ERR" and incidents["billing"]["started_at"] == at(3, now)
    assert incidents["billing"]["incident_id"].startswith("inc-")
    assert rows["billing"]["incident"] == {k: incidents["billing"][k] for k in ("incident_id", "started_at")}
    assert rows["audit"]["incident"] is None

    changes = body["changes"]  # newest first
    assert [(c["group"], c.get("previous_status"), c["status"]) for c in changes[:2]] == [
        ("search-indexer", "OK", "WARN"),
        ("billing", "OK", "ERR"),
    ]
    assert len(changes) == 6 and {c["status"] for c in changes[2:]} == {"OK"}
    assert changes[1]["incident_id"] == incidents["billing"]["incident_id"]
    assert (changes[1]["seq"], changes[1]["at"], changes[1]["totallag"]) == (2, at(3, now), 620)
    assert changes[1]["max_lag_seconds_lower_bound"] is True  # copied from the event
    assert changes[2]["max_lag_seconds_lower_bound"] is False and changes[2]["max_lag_seconds"] is None


async def test_the_overview_lists_silences_that_hold_now_or_will(api, redis, http):
    now = time.time()
    store = SilenceStore(redis)
    for silence_id, starts, ends in [
        ("sil-now", now - 60, now + 600),
        ("sil-later", now + 60, now + 120),
        ("sil-over", now - 120, now - 60),
    ]:
        matchers = (Matcher("group", "billing"), Matcher("topic", "orders-.*", True))
        await store.put(Silence(silence_id, matchers, starts, ends, "deploy", "alice", now - 120))
    status, body, _ = await get(http, f"{api.url}/dashboard/api/overview")
    assert status == 200
    assert [(s["id"], s["state"]) for s in body["silences"]] == [("sil-now", "active"), ("sil-later", "pending")]
    assert body["silences"][0]["matchers"][1] == {"name": "topic", "value": "orders-.*", "regex": True}


async def test_a_group_shows_every_partition_with_its_window(api, redis, http):
    now = now_ms()
    await seed_windows(redis, now)
    status, body, _ = await get(http, f"{api.url}/dashboard/api/group/{CLUSTER}/billing")
    assert status == 200
    group = body["status"]
    assert (group["status"], group["totallag"], group["max_lag_seconds_lower_bound"]) == ("ERR", 620, True)
    p0, p1, p2 = group["partitions"]
    assert (p2["partition"], p2["status"], p2["current_lag"], p2["window"]) == (2, "OK", 0, [])  # never committed
    assert (p0["status"], p0["current_lag"], p0["owner"], p0["client_id"]) == ("OK", 20, "/10.0.0.1", "billing-a")
    assert (p1["status"], p1["current_lag"], p1["current_lag_seconds_lower_bound"]) == ("STALL", 600, True)
    assert [e["offset"] for e in p1["window"]] == [1900] * INTERVALS
    assert [e["lag"] for e in p1["window"]] == [100, 200, 300, 400, 500, 600]
    assert [e["timestamp"] for e in p0["window"]] == [at(i, now) for i in STEPS]
    assert p0["current_lag_seconds"] is not None and p0["current_lag_seconds_lower_bound"] is False


async def test_unknown_names_and_assets_are_json_404s(api, redis, http):
    await seed_windows(redis, now_ms())
    for path, message in [
        ("/dashboard/api/overview?cluster=nope", "cluster not found"),
        ("/dashboard/api/group/nope/billing", "cluster not found"),
        (f"/dashboard/api/group/{CLUSTER}/nobody", "consumer group not found"),
        ("/dashboard/assets/..%2Fdashboard.py", "no such dashboard asset"),
        ("/dashboard/assets/app.py", "no such dashboard asset"),
    ]:
        status, body, _ = await get(http, api.url + path)
        assert (status, body["error"], body["message"]) == (404, True, message), path


async def test_an_empty_cluster_and_the_page_itself(api, http):
    status, body, _ = await get(http, f"{api.url}/dashboard/api/overview")
    assert status == 200
    assert (body["clusters"], body["groups"], body["incidents"], body["changes"]) == ([CLUSTER], [], [], [])

    status, _, headers = await get(http, f"{api.url}/")
    assert (status, headers["Location"]) == (302, "/dashboard")
    status, page, headers = await get(http, f"{api.url}/dashboard")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    for asset in re.findall(r'(?:src|href)="(/dashboard/assets/[^"]+)"', page):
        status, _, headers = await get(http, api.url + asset)
        assert status == 200 and headers["Content-Type"].split(";")[0] in ("text/javascript", "text/css")


async def test_no_cluster_at_all(redis_server, redis, http):
    config = load_config(env={"REDIS_URL": redis_server.url})
    async with serving(config) as server:
        status, body, _ = await get(http, f"{server.url}/dashboard/api/overview")
    assert status == 200 and (body["clusters"], body["cluster"], body["groups"], body["services"]) == ([], None, [], {})


async def test_overviews_asked_meanwhile_share_one_computation_and_failures_are_not_kept():
    shared, calls, gate = SharedRecentResults(ttl_s=3600), [], asyncio.Event()

    async def compute():
        calls.append(1)
        await gate.wait()
        return len(calls)

    first, second = (asyncio.create_task(shared.get("local", compute)) for _ in range(2))
    await asyncio.sleep(0)
    gate.set()
    assert (await first, await second, await shared.get("local", compute)) == (1, 1, 1)
    assert await shared.get("other", compute) == 2

    async def fail():
        raise ConnectionError("Redis is down")

    with pytest.raises(ConnectionError):
        await shared.get("broken", fail)
    assert await shared.get("broken", compute) == 3

    brief = SharedRecentResults(ttl_s=0.001)
    assert await brief.get("local", compute) == 4
    await asyncio.sleep(0.01)  # older than its ttl now
    assert await brief.get("local", compute) == 5


async def test_an_answer_kept_stale_is_returned_at_once_while_the_next_is_computed():
    """Past `ttl_s` the next caller starts a new computation but gets the last answer meanwhile; once it is done,
    its answer; past `stale_s` a caller waits for the computation."""
    gate = asyncio.Event()

    def counting():
        calls = []

        async def compute():
            calls.append(1)
            if len(calls) > 1:  # the first is never held
                await gate.wait()
            return len(calls)

        return compute

    shared, compute = SharedRecentResults(ttl_s=0.001, stale_s=3600), counting()
    assert await shared.get("local", compute) == 1  # nothing kept yet: waited for
    await asyncio.sleep(0.01)
    assert await shared.get("local", compute) == 1  # the second computation runs (held by the gate)
    gate.set()
    await asyncio.sleep(0.01)
    assert await shared.get("local", compute) == 2

    gate.clear()
    fresh_only, compute = SharedRecentResults(ttl_s=0.001, stale_s=0.001), counting()
    assert await fresh_only.get("other", compute) == 1
    await asyncio.sleep(0.01)
    waiting = asyncio.create_task(fresh_only.get("other", compute))
    await asyncio.sleep(0.01)
    assert not waiting.done()  # its last answer is older than stale_s
    gate.set()
    assert await waiting == 2


async def test_a_big_clusters_overview_is_computed_at_start(redis_server, redis, http, monkeypatch):
    """Answered from the overview computed at start (made before the request was sent), not computed for it."""
    monkeypatch.setattr(dashboard, "WARM_FROM_GROUPS", 1)
    await seed_billing_and_audit(redis, now_ms())
    async with serving(dashboard_config(redis_server.url)) as server:
        await server.app[dashboard.WARMING]
        await asyncio.sleep(0.01)
        asked_at = now_ms()
        status, body, _ = await get(http, f"{server.url}/dashboard/api/overview")
    assert status == 200 and {g["group"] for g in body["groups"]} == {"billing", "audit"}
    assert body["generated_at"] < asked_at


# --- the evaluator's recent changes -----------------------------------------------------------------------------


async def test_recent_changes_are_capped_newest_first_and_kept_with_the_status_index(redis):
    history = StatusStore(redis, 60_000)
    status, previous, incident = Status.OK, Status.NOTFOUND, QUIET
    for seq in range(1, RECENT_CHANGES + 6):
        group_status = GroupStatus(CLUSTER, "g", status, 1.0, totallag=seq)
        incident = await record(history, "g", previous, group_status, seq, incident, 1000 + seq)
        previous, status = status, (Status.WARN if status == Status.OK else Status.OK)
    changes = await history.recent_changes(CLUSTER)
    assert len(changes) == RECENT_CHANGES == await redis.llen(keys.recent_status_changes(CLUSTER))
    assert [c["seq"] for c in changes] == list(range(RECENT_CHANGES + 5, 5, -1))
    assert (changes[0]["status"], changes[0]["previous_status"], changes[0]["totallag"]) == ("OK", "WARN", 205)
    assert await history.known_groups(CLUSTER) == {"g": Status.OK}

    await record(history, "g", Status.OK, None, RECENT_CHANGES + 6, incident, 9999)  # the group is gone
    assert await history.known_groups(CLUSTER) == {}
    newest = (await history.recent_changes(CLUSTER, 1))[0]
    assert (newest["status"], newest["at"], newest["incident_id"]) == ("NOTFOUND", 9999, None)


async def test_an_unreadable_recent_change_is_skipped(redis):
    history = StatusStore(redis, 60_000)
    await record(history, "g", Status.NOTFOUND, GroupStatus(CLUSTER, "g", Status.OK, 1.0), 1, QUIET, 5)
    await redis.lpush(keys.recent_status_changes(CLUSTER), b"\xff not json", b"[1, 2]")
    assert [c["seq"] for c in await history.recent_changes(CLUSTER)] == [1]


def test_a_sparkline_starts_when_every_partition_has_a_commit():
    """A partition that joined late (one commit, at step 4) holds the line back until it has an entry."""
    old = pack_commit_ring([OffsetEntry(10 * i, 1000 * i, 1000 * i, i, i, i) for i in range(1, 6)])
    new = pack_commit_ring([OffsetEntry(7, 4000, 4000, 50, 9, 9)])
    parts = [StoredPartition("t", 0, old, [60]), StoredPartition("t", 1, new, [60])]
    assert lag_sparkline(parts, totallag=99, now_ms=10_000, intervals=6) == [(4000, 54), (5000, 55), (10_000, 99)]
    assert lag_sparkline([], totallag=0, now_ms=10_000, intervals=6) == [(10_000, 0)]
    assert len(lag_sparkline(parts[:1], 5, 10_000, 6, points=3)) == 3


# --- the page in a real browser ---------------------------------------------------------------------------------


class Elements(HTMLParser):
    """Every element of a dumped DOM with its attributes and text (enough to query rows by their data-* marks)."""

    VOID = {"meta", "link", "br", "img", "input", "hr", "col", "source", "wbr"}

    def __init__(self, html):
        super().__init__()
        self.found, self._open = [], []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        element = {"tag": tag, **dict(attrs), "text": ""}
        self.found.append(element)
        if tag not in self.VOID:
            self._open.append(element)

    def handle_endtag(self, tag):
        while self._open and self._open.pop()["tag"] != tag:
            pass

    def handle_data(self, data):
        for element in self._open:
            element["text"] += data

    def having(self, attribute):
        return {e[attribute]: e for e in self.found if attribute in e}


def chromium():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("chromium is not installed: run scripts/install-system-deps.sh (the dashboard test needs it)")
    return path


def headless(profile: Path) -> list[str]:
    """Headless Chromium with a profile of its own, as the tests run it (as root: no sandbox)."""
    return [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}"]


async def browse(url, profile: Path, *flags, budget_ms=4000):
    """Load `url` in headless Chromium, let the page run `budget_ms` of virtual time; returns stdout."""
    process = await asyncio.create_subprocess_exec(
        *headless(profile),
        f"--virtual-time-budget={budget_ms}",
        *flags,
        url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 90)
    assert process.returncode == 0, err.decode()[-2000:]
    return out.decode()


async def test_the_page_renders_groups_statuses_lag_incidents_and_changes_in_chromium(api, redis, tmp_path):
    await seed(redis, now_ms())
    ends = time.time() + 3600
    await SilenceStore(redis).put(
        Silence("sil-1", (Matcher("group", "billing"),), time.time(), ends, "deploy", "alice", 0)
    )
    await Presence(redis, CLUSTER, "evaluator").announce()  # its ingest and notifier do not run
    url = f"{api.url}/dashboard?cluster={CLUSTER}&group=billing"
    dom = Elements(await browse(url, tmp_path / "profile", "--dump-dom"))

    rows = dom.having("data-group")
    assert {g: r["data-status"] for g, r in rows.items()} == {
        "billing": "ERR",
        "search-indexer": "WARN",
        "payments-ledger": "OK",
        "audit": "OK",
    }
    cells = [e for e in dom.found if "data-field" in e]
    totals = [c["text"] for c in cells if c["data-field"] == "totallag"]
    assert totals == ["620", "1,200", "8", "0"]  # worst first
    behind = [c["text"] for c in cells if c["data-field"] == "max_lag_seconds"]
    assert re.fullmatch(r"≥ 2 min \d+ s", behind[0]), behind  # billing: a lower bound
    assert re.fullmatch(r"\d+ s", behind[1]), behind  # search-indexer: known
    assert dom.having("data-tile")["ERR"]["text"].startswith("1")

    # billing was asked open: its partitions, their statuses, lags and windows
    partitions = dom.having("data-partition")
    statuses = {p: e["data-status"] for p, e in partitions.items()}
    assert statuses == {"orders:0": "OK", "orders:1": "STALL", "orders:2": "OK"}  # p2: never committed
    assert "600" in partitions["orders:1"]["text"] and "/10.0.0.2" in partitions["orders:1"]["text"]
    stalled_lag = [c["text"] for c in cells if c["data-field"] == "current_lag_seconds"][1]
    assert stalled_lag.startswith("≥ ")
    why = [c for c in cells if c["data-field"] == "explanation"]  # lagwatch's explanation above the partitions
    assert [c["data-code"] for c in why] == ["stuck-partition"], why
    assert "orders/1" in why[0]["text"]

    assert set(dom.having("data-incident")) == {"billing", "search-indexer"}
    changes = [e for e in dom.found if "data-change" in e]
    assert [(c["data-change"], c["data-status"]) for c in changes[:2]] == [
        ("search-indexer", "WARN"),
        ("billing", "ERR"),
    ]
    assert len(changes) == 6
    silence = dom.having("data-silence")["sil-1"]
    assert silence["data-state"] == "active" and "group = billing" in silence["text"] and "deploy" in silence["text"]
    assert dom.having("data-cluster")[CLUSTER]["class"] == "active"
    assert dom.having("id")["error"].get("hidden") is not None  # no error banner
    services = dom.having("id")["services"]  # but what does not run is said
    assert services.get("hidden") is None and services["data-missing"] == "ingest notifier", services
    assert "no notifier (alerts are not sent)" in services["text"]

    screenshot = tmp_path / "dashboard.png"
    await browse(url, tmp_path / "profile", f"--screenshot={screenshot}", "--window-size=1400,900")
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if target := os.environ.get("LAGWATCH_DASHBOARD_SCREENSHOT"):
        shutil.copyfile(screenshot, target)


async def test_the_page_pages_groups_and_open_incidents_apart_and_filters_both_in_chromium(api, redis, tmp_path):
    """A link one row a page long, on the second group and the second open incident: each list has its own buttons
    and says which of how many it shows; the filter's text picks incidents by their group's name too."""
    await seed(redis, now_ms())
    url = f"{api.url}/dashboard?cluster={CLUSTER}&limit=1&offset=1&incident_offset=1"
    dom = Elements(await browse(url, tmp_path / "profile", "--dump-dom"))
    assert list(dom.having("data-group")) == ["search-indexer"] and list(dom.having("data-incident")) == [
        "search-indexer"
    ]
    groups, incidents = dom.having("data-page"), dom.having("data-incident-page")
    assert [b.get("disabled") for b in groups.values()] == [None, None]  # worse and better: 4 groups
    assert incidents["worse"].get("disabled") is None and incidents["better"].get("disabled") is not None
    assert dom.having("data-note")["incidents"]["text"] == "showing 2\u20132 of 2 open incidents, worst first"

    dom = Elements(await browse(f"{api.url}/dashboard?cluster={CLUSTER}&q=BILL", tmp_path / "profile", "--dump-dom"))
    assert list(dom.having("data-incident")) == ["billing"] and not dom.having("data-incident-page")
    assert dom.having("data-note")["incidents"]["text"] == "1 open matching “BILL” (2 open in all)"
    dom = Elements(await browse(f"{api.url}/dashboard?cluster={CLUSTER}&q=audit", tmp_path / "profile", "--dump-dom"))
    assert "No open incident's group has “audit” in its name." in dom.having("id")["incidents"]["text"]


async def test_the_page_refreshes_itself(api, redis, http, tmp_path):
    """Over 6 s of (virtual) time at one refresh a second the page asks for the overview again and again: the api's
    request histogram counts the calls."""
    await seed_windows(redis, now_ms())
    await browse(f"{api.url}/dashboard?refresh=1", tmp_path / "profile", "--dump-dom", budget_ms=6000)
    async with http.get(f"{api.url}/metrics") as response:
        text = await response.text()
    counts = re.findall(
        r'lagwatch_api_request_seconds_count\{method="GET",route="/dashboard/api/overview"\} (\S+)', text
    )
    assert counts and float(counts[0]) >= 4, counts


HOSTILE = ['<script>document.title="pwned"</script>', '"><img src=x onerror=alert(1)>', "'\u202e<b>ü</b>&amp;"]


async def seed_hostile(redis, now):
    """Groups named like markup, stalled (ERR, so also incidents and changes), an owner and a silence likewise."""
    store = WindowStore(redis, dashboard_config("redis://unused").window())
    for i in range(3):
        t = now - (2 - i) * STEP - 2_000
        await store.writes.add_broker_offsets(CLUSTER, "orders", [1000 + 100 * i], sampled_at=t)
        commits = [Commit(g, "orders", 0, 900, t, 3 * i + n, t) for n, g in enumerate(HOSTILE)]
        await store.writes.add_commits(CLUSTER, commits, now_ms=t)
    owners = {("orders", 0): ("<i>/10.0.0.1</i>", HOSTILE[1])}
    await store.writes.set_groups_metadata(
        CLUSTER, [GroupMetadataUpdate(HOSTILE[0], generation=1, started_at=now, owners=owners)], now
    )
    await evaluate(redis, dashboard_config("redis://unused"), CLUSTER, HOSTILE, now)
    matcher = Matcher("group", HOSTILE[0])
    await SilenceStore(redis).put(Silence("s-1", (matcher,), now / 1000, now / 1000 + 60, HOSTILE[1], HOSTILE[2], 0))


async def test_names_holding_markup_render_as_text_in_chromium(api, redis, tmp_path):
    """Group names, owners and silences come from Kafka clients and token holders: the page shows them as text,
    however much they look like HTML, and no element or handler of theirs reaches the DOM."""
    await seed_hostile(redis, now_ms())
    opened = "&".join(f"group={quote(g, safe='')}" for g in HOSTILE)
    out = await browse(f"{api.url}/dashboard?cluster={CLUSTER}&{opened}", tmp_path / "profile", "--dump-dom")
    dom = Elements(out)
    assert [e.get("src") for e in dom.found if e["tag"] == "script"] == ["/dashboard/assets/dashboard.js"]
    assert not [e for e in dom.found if e["tag"] in ("img", "b", "i") or {"onerror", "onload"} & e.keys()]
    assert "<title>lagwatch dashboard</title>" in out
    assert set(dom.having("data-group")) == set(dom.having("data-incident")) == set(HOSTILE)
    assert set(dom.having("data-detail")) == set(HOSTILE)  # each group's partitions opened by its name
    texts = {name: [e for e in dom.found if e["tag"] in ("td", "button") and e["text"] == name] for name in HOSTILE}
    assert all(len(found) >= 3 for found in texts.values()), texts  # row, incident, change (and silence, owner)
    assert "<i>/10.0.0.1</i>" in dom.having("data-partition")["orders:0"]["text"]
    assert dom.having("data-silence")["s-1"]["text"].count(HOSTILE[1]) == 1


async def overview_requests(http, api) -> float:
    """How many overviews the api has answered (its request histogram's count)."""
    async with http.get(f"{api.url}/metrics") as response:
        text = await response.text()
    route = 'method="GET",route="/dashboard/api/overview"'
    found = re.findall(rf"lagwatch_api_request_seconds_count\{{{route}\}} (\S+)", text)
    return float(found[0]) if found else 0.0


async def test_a_huge_refresh_in_the_link_is_capped_not_a_poll_loop(api, redis, http, tmp_path):
    """setTimeout reads a delay past 2^31 - 1 ms as 0: uncapped, ?refresh=3000000 polled the api back to back (about
    a hundred overviews a virtual second). Capped at an hour, the page asks once in 6 s and says so."""
    await seed_windows(redis, now_ms())
    before = await overview_requests(http, api)
    out = await browse(f"{api.url}/dashboard?refresh=3000000", tmp_path / "profile", "--dump-dom", budget_ms=6000)
    assert await overview_requests(http, api) - before <= 2
    assert "refreshes every 3600 s" in Elements(out).having("id")["freshness"]["text"]


async def test_the_page_shows_empty_states_and_an_error_when_redis_is_down(redis_server, tmp_path):
    async with serving(dashboard_config(redis_server.url)) as server:
        dom = Elements(await browse(f"{server.url}/dashboard", tmp_path / "profile", "--dump-dom"))
    texts = " ".join(e["text"] for e in dom.found if e.get("class") == "empty")
    assert "No consumer groups with recent commits in cluster local" in texts
    assert "No open incidents" in texts and "No status changes recorded yet" in texts and "No silences" in texts

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead_redis = f"redis://127.0.0.1:{s.getsockname()[1]}/0"
    async with serving(dashboard_config(dead_redis)) as server:
        dom = Elements(await browse(f"{server.url}/dashboard", tmp_path / "profile", "--dump-dom"))
    banner = dom.having("id")["error"]
    assert banner.get("hidden") is None and "storage unavailable" in banner["text"], banner
