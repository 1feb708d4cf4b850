"""Waiting on aiokafka's deliveries for a bounded time.

aiokafka retries a record whose partition leader does not answer for as long as that lasts (on the Kafka mock: no
acknowledgement and no error after 90 s), and its `stop` waits for such records too. A caller that must not wait that
long (the evaluator under its lock, a notifier delivery worker) waits a bounded time, leaves what was not acknowledged
in its outbox, and keeps each record's delivery here, so a retry looks at the delivery instead of sending a copy."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)
K = TypeVar("K")
FORGET_AFTER_S = 600.0  # a delivery nobody asked about again (its record moved to another instance) is dropped then
# how often the deliveries are looked through for such ones: not at every add, which made a publish of n records
# look through n * n / 2 deliveries (a chunk of new groups publishes hundreds)
FORGET_EVERY_S = 60.0


class InFlight(Generic[K]):
    """Deliveries of records sent and not yet looked at settled, by the caller's name for the record."""

    def __init__(self) -> None:
        self._deliveries: dict[K, tuple[asyncio.Future[Any], float]] = {}
        self._looked_at = time.monotonic()  # when old deliveries were last looked for

    def get(self, key: K) -> asyncio.Future[Any] | None:
        entry = self._deliveries.get(key)
        return None if entry is None else entry[0]

    def add(self, key: K, delivery: asyncio.Future[Any]) -> None:
        self._forget_old()
        self._deliveries[key] = (delivery, time.monotonic())

    def settle(self, key: K) -> None:
        """The caller has seen the delivery settled: a later send of the record is a new one."""
        self._deliveries.pop(key, None)

    def _forget_old(self) -> None:
        now = time.monotonic()
        if now - self._looked_at < FORGET_EVERY_S:
            return
        self._looked_at, cutoff = now, now - FORGET_AFTER_S
        for key in [k for k, (delivery, at) in self._deliveries.items() if at < cutoff and delivery.done()]:
            delivery = self._deliveries.pop(key)[0]
            if not delivery.cancelled():
                delivery.exception()  # retrieved: no "exception never retrieved" warning


async def stop_producer(producer: Any, timeout_s: float) -> bool:
    """Stop an AIOKafkaProducer, waiting at most `timeout_s` for its records in flight; False when some were given
    up (their callers' outboxes still hold them)."""
    delivered = True
    try:
        await asyncio.wait_for(producer.flush(), timeout_s)
    except TimeoutError:
        delivered = False
        sender = getattr(getattr(producer, "_sender", None), "sender_task", None)  # no public way to give records up
        if sender is not None:
            sender.cancel()  # it would retry them for as long as their partition has no leader
    await producer.stop()
    return delivered
