"""The notifier's side of the samples asked for through the api (`sample.serve_samples`): a sample that fails in an
unexpected way is reported as a failure to its caller, and the next request is still answered."""

import asyncio
import contextlib
import dataclasses
import json

from lagwatch.services.notifier import sample
from lagwatch.services.notifier.subscriptions import Registry
from lagwatch.shared.notifications import sample_requests
from lagwatch.shared.notifications.subscriptions.store import SubscriptionStore
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.config import SubscriptionConfig
from tests.kafka_helpers import eventually, make_config


async def test_a_sample_that_raises_is_reported_failed_and_the_next_request_is_answered(
    redis_server, redis, monkeypatch
):
    async def broken(*args):
        raise RuntimeError("the template pool is gone")

    monkeypatch.setattr(sample, "sample_report", broken)
    config = make_config("127.0.0.1:1", redis_server.url)
    config = dataclasses.replace(config, subscriptions=[SubscriptionConfig(id="hook", url="https://a.example.com/")])
    first, second = (sample_requests.SampleRequest.new("hook", "eu-1") for _ in range(2))
    await redis.rpush(keys.SAMPLE_REQUESTS, first.encode(), second.encode())
    stopping = asyncio.Event()
    registry = Registry(config, SubscriptionStore(redis))
    # the sample is replaced by `broken`: no sender is used
    serving = asyncio.create_task(sample.serve_samples(redis, registry, config, None, stopping))
    try:
        await eventually(lambda: redis.exists(keys.sample_report(second.id)))
    finally:
        stopping.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(serving, 5)
    for request in (first, second):
        report = json.loads(await redis.get(keys.sample_report(request.id)))
        assert (report["subscription"], report["cluster"], report["group"]) == ("hook", "eu-1", "lagwatch-test")
        (sent,) = report["sent"]
        assert (sent["ok"], sent["error"]) == (False, "RuntimeError: the template pool is gone")
