"""The api's scrape worker process (services/api/scrape_process.py): the body comes back through a file that is
gone once the api has it open, and nothing is left behind when the worker closes."""

import asyncio
import os

import pytest

from lagwatch.services.api.scrape_process import ScrapeWorker
from lagwatch.shared.runtime.clock import now_ms
from tests.kafka_helpers import eventually
from tests.services.api.test_api import api_config, seed


async def scrape(worker: ScrapeWorker):
    """One scrape's body as the api takes it (shared_render.py): an open file, already unlinked."""
    path = await worker.render()
    body = open(path, "rb")  # noqa: SIM115 - the caller reads and closes it
    os.unlink(path)
    return body


async def test_a_scrape_comes_back_through_a_file_that_is_already_gone(redis_server, redis):
    await seed(redis, now_ms())
    config = api_config(redis_server.url)
    worker = ScrapeWorker(config)
    try:
        for _ in range(2):  # the second from what the worker process kept
            with await scrape(worker) as body:
                text = body.read()
                assert os.listdir(worker._dir) == []  # unlinked: closing the file frees it
            assert b'burrow_kafka_consumer_status{cluster="local",consumer_group="billing"} 3' in text
        directory = worker._dir
    finally:
        await worker.close()
    assert not os.path.exists(directory)


async def test_a_scrape_given_up_on_leaves_no_body_behind_once_the_worker_has_written_it(redis_server, redis):
    """A scrape over `api.request-timeout` (or whose client left) is cancelled while the worker still renders it:
    the body it writes afterwards (58 MB at 100k partitions, in RAM under /dev/shm) must not stay there."""
    await seed(redis, now_ms())
    worker = ScrapeWorker(api_config(redis_server.url))
    try:
        with pytest.raises(TimeoutError):  # the worker process is still starting: the scrape cannot be this quick
            await asyncio.wait_for(scrape(worker), 0.001)
        with await scrape(worker):  # queued behind the abandoned one: that one has written its file by now
            pass

        async def no_body_left() -> bool:
            return os.listdir(worker._dir) == []

        await eventually(no_body_left, timeout=10)
    finally:
        await worker.close()
