"""The dashboard at a big cluster's scale: the overview sends the worst `limit` groups (those whose name holds `q`),
past the `offset` worst, and totals over every group, ranks them as the full computation did, keeps `/healthz`
answering while it ranks, and is reused once computed however long that took; the page says how many of how many
it shows, pages through them, and its filter box finds a group far beyond the first page, in real Chromium.

3,000 groups are seeded once for the module (its tests only read them), as in test_dashboard.py: windows through
the window store as the ingest writes them (a broker poll, then commits, three times 30 s apart), then evaluated by
the real evaluator (its ready results, sparklines, statuses and incidents). The expected answer is the overview as
it was computed before (every group's row from its decoded result, sorted by `severity_order`), so the fast ranking
is checked against it.
"""

import asyncio
import contextlib
import json
import time
from collections import Counter

import aiohttp
import pytest
from redis.asyncio import Redis

from lagwatch.devkit.redis_server import RedisServer
from lagwatch.services.api import dashboard
from lagwatch.services.api.dashboard import DEFAULT_LIMIT, MAX_LIMIT, MAX_OFFSET
from lagwatch.services.api.dashboard_cache import SharedRecentResults
from lagwatch.services.api.dashboard_data import Ranking, group_row, rank_results
from lagwatch.shared.events.status_store import StatusStore
from lagwatch.shared.protocol.types import Commit, Status
from lagwatch.shared.statuses.results_store import GroupResult, PartitionResult, ResultsStore, decode_result
from lagwatch.shared.windows.store import WindowStore
from tests.evaluated import evaluate
from tests.kafka_helpers import CLUSTER
from tests.services.api.test_api import serving
from tests.services.api.test_dashboard import STEP, Elements, browse, dashboard_config, get, headless, now_ms

GROUPS = 3_000
PARTITIONS = 10  # per topic
DASH = "\u2013"  # an en dash, as in the page's "showing 1-200 of 3,000"
STABLE = ("group", "status", "totallag", "partition_count", "maxlag", "complete", "incident", "last_commit")


def name(i):
    return f"group-{i:04d}"


def offset(i, end, step):
    """Group i's committed offset at `step`, its partition's log end then `end`: every 100th stuck (STALL, so ERR),
    every 10th falling further behind (WARN), the rest now and then caught up (OK)."""
    if i % 100 == 7:
        return 900
    if i % 10 == 3:
        return end - 40 * (step + 1) - i % 7
    return end - (i % 50) * ((step + 1) % 2)


def topic_of(i):
    return f"t{i // PARTITIONS}", i % PARTITIONS


async def seed_many(redis, now, groups=GROUPS):
    """Group i reads partition i % 10 of topic t{i // 10}, alone. The last topic's last poll says it has 5
    partitions (recreated smaller): its groups on partitions 5 to 9 read log ends past the topic's count."""
    store = WindowStore(redis, dashboard_config("redis://unused").window())
    topics = {topic_of(i)[0] for i in range(groups)}
    last = topic_of(groups - 1)[0]
    for step in range(3):
        t = now - (2 - step) * STEP - 2_000
        ends = {topic: {p: 1000 + 100 * step + p for p in range(PARTITIONS)} for topic in topics}
        await store.writes.add_broker_polls(
            CLUSTER, ends, sampled_at=t, partition_counts={last: 5} if step == 2 else None
        )
        commits = []
        for i in range(groups):
            topic, partition = topic_of(i)
            committed = offset(i, ends[topic][partition], step)
            commits.append(Commit(name(i), topic, partition, committed, t, step * groups + i, t))
        await store.writes.add_commits(CLUSTER, commits, now_ms=t)
    await evaluate(redis, dashboard_config("redis://unused"), CLUSTER, [name(i) for i in range(groups)], now)


async def every_row(redis, config, now):
    """The overview's rows as computed before it had a limit: every group's row, worst first."""
    store, results = WindowStore(redis, config.window()), ResultsStore(redis)
    ready, lines = await results.all(CLUSTER), await results.sparklines(CLUSTER)
    counts = await store.reads.list_topics(CLUSTER)
    needed = {(p.topic, p.partition) for r in ready.values() for p in r.partitions if p.topic in counts}
    log_ends = {tp: end for tp, end in (await store.reads.latest_broker_offsets(CLUSTER, needed)).items() if end}
    history = StatusStore(redis, config.window().expire_group_ms)
    states = dict(zip(ready, await history.states(CLUSTER, list(ready)), strict=True))
    rows = [
        group_row(r, log_ends, lines.get(g, ()), now, config.storage.intervals, states[g].incident)
        for g, r in ready.items()
    ]
    return sorted(rows, key=severity_order)


def severity_order(row):
    """Worst first: by status (ERR, WARN, OK, ...), then by total lag, then by name."""
    return (-Status[row["status"]], -row["totallag"], row["group"])


def stable(rows):
    """What does not move with the clock, and the sparkline's points before now."""
    return [{**{k: r[k] for k in STABLE}, "sparkline": r["sparkline"][:-1]} for r in rows]


@pytest.fixture(scope="module")
def seeded_redis():
    """The 3,000 groups, seeded once for the module (its tests only read them) in a redis-server of its own, and
    the overview's rows as the full computation makes them."""
    with RedisServer() as server:
        server.start()
        yield server, asyncio.run(_seeded_rows(server.url, now_ms()))


async def _seeded_rows(url, now):
    client = Redis.from_url(url)
    try:
        await seed_many(client, now)
        return await every_row(client, dashboard_config(url), now)
    finally:
        await client.aclose()


@pytest.fixture
async def seeded(seeded_redis):
    server, expected = seeded_redis
    async with serving(dashboard_config(server.url)) as api:
        yield api, expected


async def test_the_overview_sends_the_worst_groups_up_to_the_limit_and_totals_over_all(seeded, http):
    api, expected = seeded
    statuses = Counter(r["status"] for r in expected)
    assert len(expected) == GROUPS and {"ERR", "WARN", "OK"} <= set(statuses), statuses
    async with http.get(f"{api.url}/dashboard/api/overview") as response:
        raw = await response.read()
    body = json.loads(raw)
    assert (body["limit"], body["q"], body["shown"], body["matched"]) == (DEFAULT_LIMIT, "", DEFAULT_LIMIT, GROUPS)
    assert body["truncated"] is True and body["group_count"] == GROUPS
    assert body["status_counts"] == {"ERR": statuses["ERR"], "WARN": statuses["WARN"], "OK": statuses["OK"]}
    assert body["totallag"] == sum(r["totallag"] for r in expected)
    assert stable(body["groups"]) == stable(expected[:DEFAULT_LIMIT])  # the same rows as the full computation's
    assert len(raw) < 250_000  # 200 rows, not 3,000

    # ERR groups opened incidents: worst first, as many as rows at most, the count of all of them
    bad = [r["group"] for r in expected if r["incident"]]
    assert body["incident_count"] == len(bad) and [i["group"] for i in body["incidents"]] == bad[:DEFAULT_LIMIT]

    status, body, _ = await get(http, f"{api.url}/dashboard/api/overview?limit={MAX_LIMIT}&cluster={CLUSTER}")
    assert status == 200 and (body["shown"], body["truncated"]) == (MAX_LIMIT, True)
    assert stable(body["groups"]) == stable(expected[:MAX_LIMIT])
    status, body, _ = await get(http, f"{api.url}/dashboard/api/overview?limit=0")
    assert (body["groups"], body["shown"], body["group_count"], body["incidents"]) == ([], 0, GROUPS, [])


async def test_partitions_past_their_topics_count_still_count_their_lag(seeded, http):
    """t299 now says 5 partitions: its groups on partitions 5 to 9 keep the lag their log ends give, as before."""
    api, expected = seeded
    past = {name(i) for i in range(GROUPS - 5, GROUPS)}
    strays = {r["group"]: r["totallag"] for r in expected if r["group"] in past}
    assert len(strays) == len(past) and sum(strays.values()) > 0
    status, body, _ = await get(http, f"{api.url}/dashboard/api/overview?q=group-2&limit={MAX_LIMIT}")
    assert status == 200 and body["matched"] == body["shown"] == 1000
    assert {r["group"]: r["totallag"] for r in body["groups"] if r["group"] in past} == strays


async def test_the_filter_finds_any_group_by_part_of_its_name_before_the_limit(seeded, http):
    api, expected = seeded
    status, body, _ = await get(http, f"{api.url}/dashboard/api/overview?q=GROUP-29&limit=40")
    matching = [r for r in expected if "group-29" in r["group"]]
    assert status == 200 and len(matching) == 100
    assert (body["q"], body["matched"], body["shown"], body["truncated"]) == ("GROUP-29", 100, 40, True)
    assert stable(body["groups"]) == stable(matching[:40])  # worst first among the matches
    assert (body["group_count"], body["totallag"]) == (GROUPS, sum(r["totallag"] for r in expected))  # all

    last = expected[-1]["group"]  # the very last of 3,000: far beyond the first page
    status, body, _ = await get(http, f"{api.url}/dashboard/api/overview?q={last}")
    assert [r["group"] for r in body["groups"]] == [last] and (body["matched"], body["truncated"]) == (1, False)
    status, body, _ = await get(http, f"{api.url}/dashboard/api/overview?q=nobody")
    assert (body["groups"], body["matched"], body["shown"], body["group_count"]) == ([], 0, 0, GROUPS)


async def test_the_overview_pages_through_the_groups_worst_first(seeded, http):
    """`offset` passes over the worst groups: the pages follow one another in the full computation's order, with
    or without a filter, and a page past the last is empty, its totals still there."""
    api, expected = seeded
    url = f"{api.url}/dashboard/api/overview"
    status, body, _ = await get(http, f"{url}?offset={DEFAULT_LIMIT}")
    assert status == 200 and body["offset"] == DEFAULT_LIMIT
    assert (body["shown"], body["matched"], body["truncated"]) == (DEFAULT_LIMIT, GROUPS, True)
    assert stable(body["groups"]) == stable(expected[DEFAULT_LIMIT : 2 * DEFAULT_LIMIT])
    status, body, _ = await get(http, f"{url}?offset={GROUPS - 100}&limit={MAX_LIMIT}")
    assert (body["shown"], body["truncated"]) == (100, False) and stable(body["groups"]) == stable(expected[-100:])

    matching = [r for r in expected if "group-29" in r["group"]]
    status, body, _ = await get(http, f"{url}?q=group-29&limit=40&offset=80")
    assert (body["matched"], body["shown"], body["truncated"]) == (100, 20, False)
    assert stable(body["groups"]) == stable(matching[80:])

    status, body, _ = await get(http, f"{url}?offset={GROUPS}")
    assert (body["groups"], body["shown"], body["matched"], body["truncated"]) == ([], 0, GROUPS, False)
    assert (body["group_count"], body["incident_count"]) == (GROUPS, sum(1 for r in expected if r["incident"]))


async def test_a_cluster_read_a_few_results_at_a_time_ranks_as_the_full_computation(seeded, http, monkeypatch):
    """The ranking reads the stored results a slice at a time and keeps none of them: every page is read again
    and rows come out as the full computation's, worst first across the slices."""
    api, expected = seeded
    monkeypatch.setattr(dashboard, "RESULTS_PER_READ", 7)
    for offset in (0, MAX_LIMIT):
        status, body, _ = await get(http, f"{api.url}/dashboard/api/overview?limit={MAX_LIMIT}&offset={offset}")
        assert status == 200 and stable(body["groups"]) == stable(expected[offset : offset + MAX_LIMIT])
    assert (body["group_count"], body["totallag"]) == (GROUPS, sum(r["totallag"] for r in expected))


async def test_every_open_incident_can_be_reached_a_page_at_a_time_and_filtered_by_name(seeded, http):
    """In a wide outage more incidents are open than a page holds: `incident_offset` pages through them all, worst
    first, apart from the groups' pages; the filter box's `q` picks them by their group's name too."""
    api, expected = seeded
    url = f"{api.url}/dashboard/api/overview"
    bad = [r["group"] for r in expected if r["incident"]]
    assert len(bad) > 20, len(bad)
    pages, start = [], 0
    while True:
        status, body, _ = await get(http, f"{url}?limit=7&incident_offset={start}&offset=7")
        assert status == 200 and body["incident_offset"] == start and body["offset"] == 7
        assert (body["incident_count"], body["incident_matched"]) == (len(bad), len(bad))
        assert stable(body["groups"]) == stable(expected[7:14])  # the groups' page is their own
        pages.append([i["group"] for i in body["incidents"]])
        if not body["incidents_truncated"]:
            break
        start += 7
    assert [g for page in pages for g in page] == bad and all(len(page) == 7 for page in pages[:-1])

    wanted = bad[-1][-2:]  # the last two digits of the least bad one's name: a few of them hold these
    matching = [g for g in bad if wanted in g]
    assert 0 < len(matching) < len(bad)
    status, body, _ = await get(http, f"{url}?q={wanted}&limit=1&incident_offset={len(matching) - 1}")
    assert [i["group"] for i in body["incidents"]] == matching[-1:] and body["incidents_truncated"] is False
    assert (body["incident_count"], body["incident_matched"]) == (len(bad), len(matching))
    status, body, _ = await get(http, f"{url}?incident_offset={len(bad)}")
    assert (body["incidents"], body["incident_matched"], body["incidents_truncated"]) == ([], len(bad), False)


async def test_bad_limits_and_filters_are_json_400s(api_without_data, http):
    for query, message in [
        ("limit=-1", f"limit must be a whole number from 0 to {MAX_LIMIT}"),
        ("limit=abc", f"limit must be a whole number from 0 to {MAX_LIMIT}"),
        ("limit=1.5", f"limit must be a whole number from 0 to {MAX_LIMIT}"),
        ("limit=", f"limit must be a whole number from 0 to {MAX_LIMIT}"),
        (f"limit={MAX_LIMIT + 1}", f"limit must be a whole number from 0 to {MAX_LIMIT}"),
        ("limit=%D9%A3", f"limit must be a whole number from 0 to {MAX_LIMIT}"),  # an Arabic-Indic 3
        ("offset=-1", f"offset must be a whole number from 0 to {MAX_OFFSET}"),
        ("offset=1e3", f"offset must be a whole number from 0 to {MAX_OFFSET}"),
        ("offset=", f"offset must be a whole number from 0 to {MAX_OFFSET}"),
        (f"offset={MAX_OFFSET + 1}", f"offset must be a whole number from 0 to {MAX_OFFSET}"),
        ("incident_offset=-7", f"incident_offset must be a whole number from 0 to {MAX_OFFSET}"),
        ("incident_offset=x", f"incident_offset must be a whole number from 0 to {MAX_OFFSET}"),
        ("q=" + "x" * 1001, "q is longer than 1000 characters"),
    ]:
        status, body, _ = await get(http, f"{api_without_data.url}/dashboard/api/overview?{query}")
        assert (status, body["error"], body["message"]) == (400, True, message), query
    status, body, _ = await get(http, f"{api_without_data.url}/dashboard/api/overview?limit={MAX_LIMIT}&q=x")
    assert status == 200 and (body["groups"], body["group_count"], body["limit"]) == ([], 0, MAX_LIMIT)


@pytest.fixture
async def api_without_data(redis_server, redis):
    async with serving(dashboard_config(redis_server.url)) as server:
        yield server


async def test_a_computation_slower_than_the_reuse_window_is_reused_once_done():
    """Counted from its start, a 0.5 s computation with a 0.3 s window was never reused: every poll computed again.
    Counted from its end, callers meanwhile share it and callers within 0.3 s after it reuse it."""
    shared, calls = SharedRecentResults(ttl_s=0.3), []

    async def slow():
        calls.append(time.monotonic())
        await asyncio.sleep(0.5)
        return len(calls)

    first = asyncio.create_task(shared.get("local", slow))
    await asyncio.sleep(0.35)  # longer than the window since it started
    assert await shared.get("local", slow) == 1 and await first == 1
    await asyncio.sleep(0.1)
    assert await shared.get("local", slow) == 1  # finished 0.1 s ago: reused
    await asyncio.sleep(0.3)
    assert await shared.get("local", slow) == 2  # finished 0.4 s ago: computed again
    assert len(calls) == 2


def test_the_ranking_leaves_out_unreadable_results_as_the_decoder_does():
    good = GroupResult("b", Status.WARN, 1, (), (PartitionResult("t", 0, Status.OK, 90, 3, -2),)).encode()
    stored = {
        b"a": good.replace(b"[2,", b"[3,", 1),  # ERR: first
        b"b": good,
        b"c": b"not json",
        b"d": b"[9,1,[],[]]",  # no such status
        b"e": b'[1,1,[],[["t",0,1,"90",3,-2]]]',  # an offset that is not a number
        b"\xff": good,  # not UTF-8
        b"f": None,  # deleted since the names were read
    }
    ranked = rank_results(stored, {("t", 0): 100}, {"t": 1})
    ranking = Ranking.of(ranked)
    rows = list(zip(ranking.names, ranking.statuses, ranking.lags, strict=True))
    assert rows == [("a", Status.ERR, 10), ("b", Status.WARN, 10)]
    readable = {g.decode() for g, raw in stored.items() if g != b"\xff" and raw and decode_result(g.decode(), raw)}
    assert readable == set(ranking.names)
    assert (ranking.status_counts, ranking.totallag, ranked.strays) == ({"ERR": 1, "WARN": 1, "OK": 0}, 20, {})
    assert list(ranking.matching("A")) == ["a"] and list(ranking.matching("")) == ranking.names


async def test_healthz_answers_while_an_overview_is_computed(seeded, http):
    """Ranking every group is CPU work the api does in a thread: /healthz keeps answering meanwhile."""
    api, _ = seeded
    overview = asyncio.create_task(get(http, f"{api.url}/dashboard/api/overview?q=x"))
    worst = 0.0
    while not overview.done():
        started = time.perf_counter()
        async with http.get(f"{api.url}/healthz") as response:
            assert response.status == 200
        worst = max(worst, time.perf_counter() - started)
        await asyncio.sleep(0.005)
    assert (await overview)[0] == 200
    assert worst < 0.5, worst


# --- the page in a real browser ---------------------------------------------------------------------------------


async def test_the_page_shows_how_many_of_how_many_groups_it_shows_in_chromium(seeded, tmp_path):
    api, expected = seeded
    dom = Elements(await browse(f"{api.url}/dashboard?cluster={CLUSTER}", tmp_path / "profile", "--dump-dom"))
    assert len(dom.having("data-group")) == DEFAULT_LIMIT
    assert dom.having("id")["shown"]["text"] == f"showing 1{DASH}{DEFAULT_LIMIT} of 3,000, worst first"
    pager = dom.having("data-page")
    assert "disabled" in pager["worse"] and "disabled" not in pager["better"]  # the first page of several
    tiles = {label: tile["text"] for label, tile in dom.having("data-tile").items()}
    assert tiles["groups"].startswith("3,000")  # the cluster's count, not the rows'
    assert tiles["OK"].startswith(f"{sum(r['status'] == 'OK' for r in expected):,}")
    assert tiles["total lag (messages)"].startswith(f"{sum(r['totallag'] for r in expected):,}")


async def test_the_filter_box_finds_a_group_beyond_the_first_page_in_chromium(seeded, tmp_path):
    """Typed into the filter box (Chrome DevTools' Input.insertText, as a keyboard would), a group's name asks the
    api for it, once typing pauses; the link keeps the filter."""
    api, expected = seeded
    wanted = expected[-1]["group"]
    async with devtools(f"{api.url}/dashboard?cluster={CLUSTER}", tmp_path / "profile") as page:
        await page.wait_for("document.querySelectorAll('[data-group]').length === 200")
        await page.evaluate("document.getElementById('filter').focus()")
        await page.send("Input.insertText", text=wanted)
        await page.wait_for("document.querySelectorAll('[data-group]').length === 1")
        rows = await page.evaluate("[...document.querySelectorAll('[data-group]')].map((r) => r.dataset.group)")
        assert rows == [wanted]
        assert await page.evaluate("document.getElementById('shown').textContent") == (
            f"1 of 3,000 groups matching “{wanted}”"
        )
        assert await page.evaluate("new URLSearchParams(location.search).get('q')") == wanted
        assert await page.evaluate("document.querySelector('[data-tile=groups] .value').textContent") == "3,000"


async def test_worse_and_better_page_through_the_groups_in_chromium(seeded, tmp_path):
    """Past the first page: "better" asks for the next rows (kept in the link), "worse" goes back; a new filter
    starts again from the worst of what it matches."""
    api, expected = seeded
    async with devtools(f"{api.url}/dashboard?cluster={CLUSTER}&limit=1000", tmp_path / "profile") as page:
        first_row = "document.querySelector('[data-group]').dataset.group"
        await page.wait_for("document.querySelectorAll('[data-group]').length === 1000")
        await page.evaluate("document.querySelector('[data-page=better]').click()")
        await page.wait_for(f"{first_row} === {json.dumps(expected[1000]['group'])}")
        assert await page.evaluate("document.getElementById('shown').textContent") == (
            f"showing 1,001{DASH}2,000 of 3,000, worst first"
        )
        assert await page.evaluate("new URLSearchParams(location.search).get('offset')") == "1000"
        await page.evaluate("document.querySelector('[data-page=better]').click()")
        await page.wait_for(f"{first_row} === {json.dumps(expected[2000]['group'])}")
        assert await page.evaluate("document.querySelector('[data-page=better]').disabled") is True  # the last page
        await page.evaluate("document.querySelector('[data-page=worse]').click()")
        await page.wait_for(f"{first_row} === {json.dumps(expected[1000]['group'])}")

        await page.evaluate("document.getElementById('filter').focus()")
        await page.send("Input.insertText", text="0")
        matched = sum("0" in r["group"] for r in expected)
        assert matched > 1000
        shown = f"showing 1{DASH}1,000 of {matched:,} matching “0”, worst first"
        await page.wait_for(f"document.getElementById('shown').textContent === {json.dumps(shown)}")
        assert await page.evaluate("new URLSearchParams(location.search).get('offset')") is None


class DevTools:
    """One headless Chromium page driven over the Chrome DevTools Protocol (its websocket), for tests that type."""

    def __init__(self, socket):
        self.socket, self._id = socket, 0

    async def send(self, method, **params):
        self._id += 1
        await self.socket.send_json({"id": self._id, "method": method, "params": params})
        while True:  # events in between are not for us
            message = await self.socket.receive_json(timeout=30)
            if message.get("id") == self._id:
                assert "error" not in message, message
                return message["result"]

    async def evaluate(self, expression):
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    async def wait_for(self, condition, timeout=20.0):
        deadline = time.monotonic() + timeout
        while not await self.evaluate(condition):
            assert time.monotonic() < deadline, f"still not true after {timeout} s: {condition}"
            await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def devtools(url, profile):
    """Chromium showing `url`, and its page's DevTools."""
    process = await asyncio.create_subprocess_exec(
        *headless(profile),
        "--remote-debugging-port=0",
        url,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    drain = None
    try:
        port = await devtools_port(process.stderr)
        drain = asyncio.create_task(process.stderr.read())  # chromium must never block on a full pipe
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
                pages = [t for t in await response.json(content_type=None) if t["type"] == "page"]
            async with session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0) as socket:
                yield DevTools(socket)
    finally:
        process.terminate()
        await process.wait()
        if drain is not None:
            await drain


async def devtools_port(stderr):
    """Chromium says on stderr where DevTools listens: `DevTools listening on ws://127.0.0.1:PORT/...`."""
    async with asyncio.timeout(30):
        while line := await stderr.readline():
            if line.startswith(b"DevTools listening on ws://"):
                return int(line.split(b":")[2].split(b"/")[0])
    raise AssertionError("chromium did not say where DevTools listens")
