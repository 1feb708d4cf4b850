"""The dashboard with a consumer group named with 10 kB (Kafka allows 32 kB), in real Chromium: the name is cut
short with an ellipsis in the groups table, the open incidents and the recent changes, whole in its title; every
table stays within the page; the group opens (its partitions are asked for by a POST: its name fits in no URL) and
the page's link stays short enough to load again."""

import json

import pytest

from lagwatch.shared.protocol.types import Commit
from lagwatch.shared.windows.store import WindowStore
from tests.evaluated import evaluate
from tests.kafka_helpers import CLUSTER
from tests.services.api.test_api import serving
from tests.services.api.test_dashboard import INTERVALS, STEP, dashboard_config, now_ms
from tests.services.api.test_dashboard_scale import devtools

LONG = "orders-consumer-" + "x" * 10_000
WIDTH, HEIGHT = 1400, 900  # as the dashboard's screenshot is taken
MAX_LINK_QUERY = 4000  # dashboard.js's


@pytest.fixture
async def api(redis_server, redis):
    """LONG stuck on orders/0 while its log end grows (STALL: ERR, an incident open); billing caught up on orders/1."""
    config = dashboard_config(redis_server.url)
    store = WindowStore(redis, config.window())
    now = now_ms()
    for i in range(INTERVALS):
        t = now - (INTERVALS - 1 - i) * STEP - 2_000
        await store.writes.add_broker_offsets(CLUSTER, "orders", [1000 + 100 * i, 500 + 10 * i], sampled_at=t)
        commits = [
            Commit(LONG, "orders", 0, 900, t, 2 * i, t),
            Commit("billing", "orders", 1, 500 + 10 * i, t, 2 * i + 1, t),
        ]
        await store.writes.add_commits(CLUSTER, commits, now_ms=t)
    await evaluate(redis, config, CLUSTER, [LONG, "billing"], now)
    async with serving(config) as server:
        yield server


def fits(table_selector, panel_selector):
    """JS: the table's right edge within its panel's and the window's, nothing scrolled sideways."""
    return (
        f"(() => {{ const t = document.querySelector({json.dumps(table_selector)}).getBoundingClientRect();"
        f" const p = document.querySelector({json.dumps(panel_selector)});"
        " return t.right <= p.getBoundingClientRect().right && t.right <= window.innerWidth"
        " && p.scrollWidth <= p.clientWidth && document.documentElement.scrollWidth <= window.innerWidth; })()"
    )


def long_name_in(container_selector):
    """JS: the long name's element in a container: [its title, its text, shown width, whether cut short]."""
    return (
        f"(() => {{ const n = [...document.querySelectorAll({json.dumps(container_selector + ' .name')})]"
        ".find((e) => e.textContent.length > 1000);"
        " return [n.title, n.textContent, n.getBoundingClientRect().width, n.scrollWidth > n.clientWidth]; })()"
    )


async def test_a_10_kb_group_name_is_cut_short_and_the_page_stays_usable_in_chromium(api, tmp_path):
    async with devtools(f"{api.url}/dashboard?cluster={CLUSTER}", tmp_path / "profile") as page:
        await page.send(
            "Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT, deviceScaleFactor=1, mobile=False
        )
        await page.wait_for("document.querySelectorAll('[data-group]').length === 2")
        await page.wait_for("document.querySelectorAll('[data-incident]').length === 1")
        assert await page.evaluate("[...document.querySelectorAll('[data-incident]')][0].dataset.incident") == LONG

        assert await page.evaluate(fits("#groups table", "#groups")) is True
        for section in ("#incidents", "#changes"):
            assert await page.evaluate(fits(f"{section} table", section)) is True, section
        for container in ("#groups tr.group-row", "#incidents", "#changes"):
            title, text, width, cut = await page.evaluate(long_name_in(container))
            assert (title, text, cut) == (LONG, LONG, True), container  # the whole name on hover
            assert width < WIDTH / 3, (container, width)

        # opened, the group's partitions come from the POST route; the link leaves the name out (too long to load)
        await page.evaluate("document.querySelector('tr.group-row.s-ERR button.link').click()")
        await page.wait_for("document.querySelector('[data-partition=\"orders:0\"]') !== null")
        assert await page.evaluate("document.querySelector('[data-detail]').dataset.detail") == LONG
        assert await page.evaluate("document.querySelector('[data-partition=\"orders:0\"]').dataset.status") == "STALL"
        assert await page.evaluate("document.getElementById('error').hidden") is True
        search = await page.evaluate("location.search")
        assert len(search) <= MAX_LINK_QUERY and "xxxx" not in search, len(search)
        assert await page.evaluate(fits("#groups table", "#groups")) is True

        # opened too, a short-named group is kept in the link as before
        await page.evaluate("document.querySelector('tr.group-row.s-OK button.link').click()")
        await page.wait_for("new URLSearchParams(location.search).getAll('group').join() === 'billing'")
