"""`/metrics` scrapes asking at the same time share one render (services/api/shared_render.py).

Through a real api over real Redis: 20 scrapes sent together (on connections opened beforehand) cost one render of
the scrape process, counted by `lagwatch_api_metrics_renders_total`, and each gets the whole body, the first time
(the scrape process starting) and once it runs. Then SharedRender itself, with renders the test holds open: a scrape
arriving mid-render gets that render, one arriving after it the next; one given up on leaves the render to the
others; a failed render fails each of its scrapes and the next scrape renders again; no body file is left behind.
"""

import asyncio
import os
import re
import time

import aiohttp
import pytest

from lagwatch.services.api.shared_render import SharedRender
from lagwatch.shared.protocol.types import Status
from lagwatch.shared.statuses.results_store import GroupResult, PartitionResult, ResultsStore
from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER
from tests.services.api.test_api import api_config, serving

GROUPS = 10_000  # a render lasts far longer than 20 requests take to arrive
SCRAPES = 20
TOPIC, PARTITIONS, LOG_END = "orders", 100, 1_000


def group_name(i):
    return f"group-{i:05d}"


async def seed_results(redis, groups=GROUPS):
    """Ready results as the evaluator stores them: group i on partition i % 100 of `orders`, 100 behind its log end
    for a minute (lag in seconds grows with the clock, so each render renders every group again)."""
    now = int(time.time() * 1000)
    store = WindowStore(redis, api_config("redis://unused").window())
    await store.writes.add_broker_offsets(CLUSTER, TOPIC, [LOG_END] * PARTITIONS, sampled_at=now)
    behind = now - 60_000
    results = {
        group_name(i): GroupResult(
            group_name(i), Status.OK, now, (), (PartitionResult(TOPIC, i % PARTITIONS, Status.OK, 900, 3, behind),)
        )
        for i in range(groups)
    }
    await ResultsStore(redis).write(CLUSTER, results)


def renders_in(body):
    found = re.findall(r"^lagwatch_api_metrics_renders_total (\S+)$", body, re.MULTILINE)
    assert len(found) == 1, found
    return float(found[0])


async def scrape(session, url):
    async with session.get(f"{url}/metrics") as response:
        assert response.status == 200, await response.text()
        return await response.text()


async def scrapes_together(url, count):
    """`count` scrapes sent at once, each on a connection of its own opened beforehand."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=count)) as session:
        healthy = await asyncio.gather(*(session.get(f"{url}/healthz") for _ in range(count)))
        for response in healthy:  # their connections stay open, idle in the pool
            assert response.status == 200
            await response.read()
            response.release()
        return await asyncio.gather(*(scrape(session, url) for _ in range(count)))


def assert_whole(body):
    """Every group's status, the log ends, then this process's own series: nothing cut short."""
    statuses = re.findall(
        r'^burrow_kafka_consumer_status\{cluster="local",consumer_group="(group-\d+)"\} 1$', body, re.M
    )
    assert len(statuses) == GROUPS and set(statuses) == {group_name(i) for i in range(GROUPS)}
    assert body.count(f'burrow_kafka_topic_partition_offset{{cluster="{CLUSTER}",topic="{TOPIC}"') == PARTITIONS
    assert body.index("burrow_kafka_consumer_status") < body.index("# HELP lagwatch_api_request_seconds")


async def test_scrapes_sent_together_cost_one_render_and_each_gets_the_whole_body(redis_server, redis, http):
    await seed_results(redis)
    async with serving(api_config(redis_server.url)) as api:
        for round_number in (1, 2):  # the scrape process starting, then running
            bodies = await scrapes_together(api.url, SCRAPES)
            assert [renders_in(b) for b in bodies] == [round_number] * SCRAPES
            rendered = {b.split("# HELP lagwatch_api_request_seconds")[0] for b in bodies}
            assert len(rendered) == 1  # one render's text, the same for all
            assert_whole(bodies[0])
        assert renders_in(await scrape(http, api.url)) == 3  # asked alone, once those are over: a render of its own


# --- SharedRender, its renders held open by the test ----------------------------------------------------------------


class HeldRenders:
    """Renders that write "render N" into a file of `directory` and end when the test lets them (or fail)."""

    def __init__(self, directory):
        self.directory, self.count = directory, 0
        self.release, self.failure = asyncio.Event(), None

    async def __call__(self):
        self.count += 1
        path = os.path.join(self.directory, f"body-{self.count}")
        with open(path, "w") as out:
            out.write(f"render {self.count}")
        await self.release.wait()
        self.release.clear()
        if self.failure is not None:
            os.unlink(path)
            raise self.failure
        return path


async def read(shared):
    with await shared.body() as body:
        return body.read().decode()


async def started(tasks):
    await asyncio.sleep(0.01)  # every task has run up to its wait
    assert not any(t.done() for t in tasks)


async def test_a_scrape_arriving_mid_render_gets_that_render_and_one_after_it_the_next(tmp_path):
    renders = HeldRenders(tmp_path)
    shared = SharedRender(renders)
    first = [asyncio.create_task(read(shared)) for _ in range(3)]
    await started(first)
    later = asyncio.create_task(read(shared))  # mid-render
    await started([later])
    renders.release.set()
    assert await asyncio.gather(*first, later) == ["render 1"] * 4
    assert renders.count == 1
    assert os.listdir(tmp_path) == []  # unlinked once handed over: freed with the last handle

    after = asyncio.create_task(read(shared))
    await started([after])
    renders.release.set()
    assert (await after, renders.count) == ("render 2", 2)


async def test_a_scrape_given_up_on_leaves_the_render_to_the_others(tmp_path):
    renders = HeldRenders(tmp_path)
    shared = SharedRender(renders)
    leaving, staying = asyncio.create_task(read(shared)), asyncio.create_task(read(shared))
    await started([leaving, staying])
    leaving.cancel()  # the first scrape, the one that started the render
    with pytest.raises(asyncio.CancelledError):
        await leaving
    renders.release.set()
    assert (await staying, renders.count) == ("render 1", 1)
    assert os.listdir(tmp_path) == []


async def test_a_failed_render_fails_each_of_its_scrapes_and_the_next_scrape_renders_again(tmp_path):
    renders = HeldRenders(tmp_path)
    shared = SharedRender(renders)
    renders.failure = ConnectionError("Redis is down")
    failing = [asyncio.create_task(read(shared)) for _ in range(2)]
    await started(failing)
    renders.release.set()
    for outcome in await asyncio.gather(*failing, return_exceptions=True):
        assert isinstance(outcome, ConnectionError)
    renders.failure = None
    again = asyncio.create_task(read(shared))
    await started([again])
    renders.release.set()
    assert (await again, renders.count) == ("render 2", 2)


async def test_closing_cancels_the_scrapes_of_the_running_render(tmp_path):
    shared = SharedRender(HeldRenders(tmp_path))
    waiting = asyncio.create_task(read(shared))
    await started([waiting])
    await shared.close()
    with pytest.raises(asyncio.CancelledError):
        await waiting
