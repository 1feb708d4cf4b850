"""`api.access-control-allow-origin` (Burrow's `general.access-control-allow-origin`, services/api/cors.py), tried by
headless Chromium: a page of another origin reads the api once its origin is allowed, and not before; it never
gets a token-guarded DELETE through (the browser's preflight finds no method allowed)."""

import contextlib

from aiohttp import web

from lagwatch.shared.protocol import keys
from lagwatch.shared.protocol.types import Commit
from lagwatch.shared.windows.store import WindowStore
from tests.services.api.test_api import CLUSTER, api_config, now_ms, serving
from tests.services.api.test_dashboard import browse

TOKEN = "cors-test-token-1234"
PAGE = """<!doctype html><pre id="out">pending</pre><script>
const api = "%s", said = [];
async function go() {
  try { const r = await fetch(api + "/v3/kafka"); said.push("read:" + (await r.json()).clusters.join(",")); }
  catch (e) { said.push("read:blocked"); }
  try {
    const r = await fetch(api + "/v3/kafka/local/consumer/billing", {method: "DELETE",
                          headers: {Authorization: "Bearer %s"}});
    said.push("delete:" + r.status);
  } catch (e) { said.push("delete:blocked"); }
  document.getElementById("out").textContent = said.join(" ");
}
go();
</script>"""


@contextlib.asynccontextmanager
async def page_server(api_url: list[str]):
    """Serves the page from its own origin (another port); `api_url[0]` is where the page's script calls."""

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=PAGE % (api_url[0], TOKEN), content_type="text/html")

    app = web.Application()
    app.router.add_get("/", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def what_the_page_says(redis_server, tmp_path, allowed: bool) -> str:
    api_url = [""]
    async with page_server(api_url) as origin:
        env = {"API__TOKEN": TOKEN, **({"API__ACCESS_CONTROL_ALLOW_ORIGIN": origin} if allowed else {})}
        async with serving(api_config(redis_server.url, **env)) as api:
            api_url[0] = api.url
            dom = await browse(f"{origin}/", tmp_path / "profile", "--dump-dom", budget_ms=5000)
    return dom.split('<pre id="out">')[1].split("</pre>")[0]


async def test_a_page_of_an_allowed_origin_reads_the_api_but_cannot_delete(redis_server, redis, tmp_path):
    now = now_ms()
    store = WindowStore(redis)
    await store.writes.add_broker_offsets(CLUSTER, "orders", [100], sampled_at=now)
    await store.writes.add_commits(CLUSTER, [Commit("billing", "orders", 0, 5, now, 1, now)], now_ms=now)
    assert await redis.zscore(keys.groups_index(CLUSTER), "billing") is not None
    assert await what_the_page_says(redis_server, tmp_path, allowed=True) == "read:local delete:blocked"
    assert await redis.zscore(keys.groups_index(CLUSTER), "billing") is not None  # the DELETE never reached it


async def test_without_the_option_a_page_of_another_origin_reads_nothing(redis_server, redis, tmp_path):
    assert await what_the_page_says(redis_server, tmp_path, allowed=False) == "read:blocked delete:blocked"
