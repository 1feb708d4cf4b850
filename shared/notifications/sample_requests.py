"""Sample notifications asked for through the api (`POST /api/v1/subscriptions/{id}/test`), sent by a notifier.

The api has no sender of its own (the address guard, TLS settings and templates are the notifier's): it queues a
request in `lw:n:{notify}:sample-requests`, one notifier takes it (LPOP: exactly one), sends the sample incident
(services/notifier/sample.py) and writes its report under `lw:n:{notify}:sample-report:<id>`, which the api polls
(both poll: nothing blocks on the server side, redis_client.py).
A request no notifier took within PICKUP_S is withdrawn (LREM: none ever sends it, and the caller hears that no
notifier runs); a report is kept REPORT_TTL_S for an api that gave up meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import msgspec
from redis.asyncio import Redis

from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.redis_client import reply

TAKE_EVERY_S = 0.5  # a notifier's look at the queue
POLL_S = 0.2  # the api's look for the report
PICKUP_S = 5.0  # a request no notifier took by then is withdrawn
REPORT_TTL_S = 60
MAX_QUEUED = 100  # requests waiting: past it the api refuses more (a stopped notifier must not let them pile up)
# what a sample can be (notifier/sample.py): a status incident, a lag-seconds alert, a retention (data-loss-risk) alert
STATUS, LAG, RETENTION = "status", "lag", "retention"
SAMPLES = (STATUS, LAG, RETENTION)


def missing_threshold(sample: str, lag_seconds: float, retention_seconds: float) -> str | None:
    """Why a subscription with these thresholds gets no alert of the `sample` kind ("has no ..."), None when it
    does: a lag sample needs `lag-seconds-threshold`, a retention one `retention-risk-threshold`. The api refuses
    such a request before queueing it, the notifier's sample (and `lagwatch notify test`) on its own."""
    if sample == LAG and not lag_seconds:
        return "has no lag-seconds-threshold: it gets no lag alerts"
    if sample == RETENTION and not retention_seconds:
        return "has no retention-risk-threshold: it gets no retention alerts"
    return None


class SampleRequest(msgspec.Struct, frozen=True):
    id: str
    subscription: str
    cluster: str | None  # None: one the subscription covers (sample.sample_cluster)
    sample: str = STATUS  # one of SAMPLES

    @classmethod
    def new(cls, subscription: str, cluster: str | None, sample: str = STATUS) -> SampleRequest:
        return cls(uuid.uuid4().hex, subscription, cluster, sample)

    def encode(self) -> str:
        return msgspec.json.encode(self).decode()

    @classmethod
    def decode(cls, raw: bytes | str) -> SampleRequest | None:
        """None for anything but a request as `encode` writes it."""
        try:
            request = msgspec.json.decode(raw, type=cls)
        except msgspec.DecodeError:  # (a ValidationError too)
            return None
        return request if request.id and request.sample in SAMPLES else None


class NotTaken(Exception):
    """No notifier took the request within PICKUP_S (it was withdrawn: none will send it)."""


class NotReported(Exception):
    """A notifier took the request but wrote no report in time (it may still be sending)."""


async def queued(redis: Redis) -> int:
    return int(await reply(redis.llen(keys.SAMPLE_REQUESTS)))


async def ask(redis: Redis, request: SampleRequest, report_within_s: float) -> dict[str, Any]:
    """Queue the request and wait for its report: NotTaken, NotReported (after `report_within_s` more), RedisError."""
    encoded = request.encode()
    await reply(redis.rpush(keys.SAMPLE_REQUESTS, encoded))
    try:
        report = await _report(redis, request.id, PICKUP_S)
    except asyncio.CancelledError:  # the caller gave up (the api's request timeout): nobody waits for it any more
        await reply(redis.lrem(keys.SAMPLE_REQUESTS, 1, encoded))
        raise
    if report is None:
        if await reply(redis.lrem(keys.SAMPLE_REQUESTS, 1, encoded)):  # still queued: withdrawn, nobody will send it
            raise NotTaken(f"no notifier took the request within {PICKUP_S:.0f} s: is a notifier running?")
        report = await _report(redis, request.id, report_within_s)
    if report is None:
        raise NotReported(f"a notifier took the request but reported nothing within {report_within_s:.0f} s")
    return report


async def _report(redis: Redis, request_id: str, within_s: float) -> dict[str, Any] | None:
    until = time.monotonic() + within_s
    while True:
        raw = await redis.get(keys.sample_report(request_id))
        if raw is not None:
            report: dict[str, Any] = json.loads(raw)
            return report
        if time.monotonic() >= until:
            return None
        await asyncio.sleep(POLL_S)


async def take(redis: Redis) -> SampleRequest | None:
    """The oldest request waiting, if any; one that cannot be read is dropped (nobody could be told)."""
    while (raw := await reply(redis.lpop(keys.SAMPLE_REQUESTS))) is not None:
        request = SampleRequest.decode(raw) if isinstance(raw, (bytes, str)) else None  # LPOP without a count
        if request is not None:
            return request
    return None


async def report(redis: Redis, request_id: str, report_doc: dict[str, Any]) -> None:
    await redis.set(keys.sample_report(request_id), json.dumps(report_doc), ex=REPORT_TTL_S)
