"""The api's scrape worker process (services/api/scrape_process.py): the body comes back through a file that is
gone once the api has it open, and nothing is left behind when the worker closes."""

import os

from lagwatch.services.api.scrape_process import ScrapeWorker
from lagwatch.shared.clock import now_ms
from tests.services.api.test_api import api_config, seed


async def test_a_scrape_comes_back_through_a_file_that_is_already_gone(redis_server, redis):
    await seed(redis, now_ms())
    config = api_config(redis_server.url)
    worker = ScrapeWorker(config)
    try:
        for _ in range(2):  # the second from what the worker process kept
            with await worker.scrape() as body:
                text = body.read()
                assert os.listdir(worker._dir) == []  # unlinked: closing the file frees it
            assert b'burrow_kafka_consumer_status{cluster="local",consumer_group="billing"} 3' in text
        directory = worker._dir
    finally:
        await worker.close()
    assert not os.path.exists(directory)
