"""The notifier's side of the samples asked for through the api (shared/notifications/sample_requests.py): it takes each
request queued, sends the sample incident to the subscription (sample.py) and reports what the receivers answered.
Runs from the notifier's start, while Kafka is still away too: the sample needs only Redis and the receiver."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from lagwatch.services.notifier.delivery import Sender
from lagwatch.services.notifier.sample import NoSuchAlerts, Sent, report_of, sample_cluster, sample_report
from lagwatch.services.notifier.subscriptions import Registry
from lagwatch.shared.notifications import sample_requests
from lagwatch.shared.notifications.sample_requests import SampleRequest
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.config import Config
from lagwatch.shared.runtime.outage_log import OutageLog

log = logging.getLogger(__name__)


async def serve_samples(
    redis: Redis, registry: Registry, config: Config, sender: Sender, stopping: asyncio.Event
) -> None:
    """Until `stopping`: take the requests queued, one at a time, every TAKE_EVERY_S, and send them with the
    notifier's `sender`."""
    outage = OutageLog(log, "notifier: cannot take sample requests")
    while not stopping.is_set():
        try:
            while not stopping.is_set() and (request := await sample_requests.take(redis)) is not None:
                await sample_requests.report(redis, request.id, await _answer(request, registry, config, sender))
            outage.ok()
        except RedisError as exc:
            outage.failed(exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), sample_requests.TAKE_EVERY_S)


async def _answer(request: SampleRequest, registry: Registry, config: Config, sender: Sender) -> dict[str, Any]:
    subscription = await registry.find(request.subscription)
    if subscription is None:
        return {"subscription": request.subscription, "error": "the notifier has no such subscription"}
    log.info("notifier: sending a sample incident to subscription %s (asked through the api)", subscription.id)
    clusters = list(config.clusters)
    try:
        return await sample_report(
            subscription, config.notifier, request.cluster, clusters, now_ms(), request.sample, sender
        )
    except NoSuchAlerts as exc:
        return {"subscription": request.subscription, "error": str(exc)}
    except Exception as exc:  # said to the caller as the receiver's failure; the loop goes on with the next request
        log.exception("notifier: the sample for subscription %s failed", subscription.id)
        failed = Sent("open", False, None, f"{type(exc).__name__}: {exc}")
        return report_of(subscription, request.cluster or sample_cluster(subscription, clusters), [failed])
