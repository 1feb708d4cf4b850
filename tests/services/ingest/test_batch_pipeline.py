"""How the ingest waits out Redis or Kafka (batch_pipeline.Retrying): a step is tried again until it succeeds, the
log-end samples wait meanwhile, and a stop ends the retries."""

import asyncio

from prometheus_client import REGISTRY

from lagwatch.services.ingest.batch_pipeline import Retrying


def _retries() -> float:
    return REGISTRY.get_sample_value("lagwatch_ingest_retries_total", {"cluster": "retried"}) or 0.0


async def test_a_step_is_retried_until_it_succeeds_and_holds_the_log_end_samples_meanwhile():
    stopping, caught_up = asyncio.Event(), asyncio.Event()
    caught_up.set()
    retry, tries, before = Retrying("retried", stopping, caught_up), [], _retries()

    async def flaky() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise OSError("Redis not up yet")
        return "stored"

    assert await retry("storing a batch", flaky) == "stored"
    assert len(tries) == 3 and _retries() == before + 2
    assert not caught_up.is_set()  # commits waited: the poller's samples wait with them


async def test_a_stop_ends_the_retries_with_nothing():
    stopping = asyncio.Event()
    retry = Retrying("retried", stopping, asyncio.Event())

    async def never() -> None:
        raise ConnectionError("down")

    asyncio.get_running_loop().call_later(0.3, stopping.set)
    assert await asyncio.wait_for(retry("storing a batch", never), 5) is None
