"""Dead letters (docs/webhooks.md#delivery-guarantees): deliveries that failed for good, published as JSON on
`notifier.dlq-topic`, keyed by subscription id (never its URL, secret or headers); `lagwatch notify replay-dlq`
puts them back into the outbox under their delivery ids."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError

from lagwatch.services.notifier.events import AnyKind, parse_either
from lagwatch.services.notifier.messages import CLOSE_KINDS
from lagwatch.services.notifier.outbox import Delivery, Outbox
from lagwatch.shared.events.deliveries import InFlight, stop_producer
from lagwatch.shared.notifications.subscriptions.notification_policy import Event
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.config import Config
from lagwatch.shared.runtime.kafka_client import client_kwargs
from lagwatch.shared.runtime.redis_client import connect

SCHEMA = "lagwatch.dead-letter/1"
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])\Z")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def dead_letter_record(delivery: Delivery, error: str, status_code: int | None, dead_at: int | None = None) -> dict:
    return {
        "schema": SCHEMA,
        "delivery_id": delivery.id,
        "subscription_id": delivery.subscription_id,
        "kind": delivery.kind,
        "notification_id": delivery.notification_id,
        "attempts": delivery.attempts,
        "error": error,
        "status_code": status_code,
        "created_at": delivery.created_at,
        "dead_at": now_ms() if dead_at is None else dead_at,
        "event": delivery.event.as_dict(),  # (a dead letter is a JSON document)
        **({"reason": delivery.reason} if delivery.reason else {}),
    }


class DeadLetters:
    """Publishes dead letters with an idempotent producer (acks=all). aiokafka retries a record while its partition
    leader is away and blocks a send while its batch is full: each is waited for at most WAIT_S, so a delivery
    worker is not held for the outage; a dead letter still in flight is not sent again by the retry."""

    WAIT_S = 5.0  # for room in the batch, and again for the acknowledgement

    def __init__(self, kafka_kwargs: dict[str, Any], topic: str) -> None:
        self.topic = topic
        self._producer = AIOKafkaProducer(**kafka_kwargs, acks="all", enable_idempotence=True)
        self._in_flight: InFlight[str] = InFlight()  # by delivery id
        self.started = False

    async def start(self) -> None:
        await self._producer.start()
        self.started = True

    async def stop(self) -> None:
        """Close the producer, started or not (one whose start failed still holds a client: "Unclosed" at exit),
        waiting at most WAIT_S for dead letters in flight: those not delivered are still in the outbox."""
        await stop_producer(self._producer, self.WAIT_S)
        self.started = False

    async def publish(self, record: dict) -> None:
        """Returns once Kafka acknowledged the dead letter; raises when it did not (or not within WAIT_S)."""
        if not self.started:  # Kafka down since start-up: fail at once (a never-started producer would wait on it)
            raise KafkaConnectionError("the dead-letter producer has not started yet (Kafka unreachable)")
        delivery_id = record["delivery_id"]
        delivery = self._in_flight.get(delivery_id) or await self._send(record)
        done, _ = await asyncio.wait({delivery}, timeout=self.WAIT_S)
        if not done:
            raise KafkaTimeoutError("dead letter not acknowledged in time; it is still in flight")
        self._in_flight.settle(delivery_id)
        delivery.result()  # the delivery's error, if it failed

    async def _send(self, record: dict) -> asyncio.Future:
        """Queue the dead letter (waiting at most WAIT_S for room) and note its delivery as in flight."""
        value = json.dumps(record, separators=(",", ":"), sort_keys=True).encode()
        send = self._producer.send(self.topic, value, key=record["subscription_id"].encode())
        try:
            delivery = cast(asyncio.Future, await asyncio.wait_for(send, self.WAIT_S))
        except TimeoutError:
            raise KafkaTimeoutError("the dead-letter topic's partition takes no record (no leader)") from None
        self._in_flight.add(record["delivery_id"], delivery)
        return delivery


def parse_since(text: str, now: float | None = None) -> int:
    """`--since`: a relative age (`30m`, `2h`, `1d`), epoch seconds or milliseconds, or an ISO-8601 time; -> ms."""
    text = text.strip()
    now = time.time() if now is None else now
    match = _RELATIVE.match(text)
    if match:
        return int((now - float(match.group(1)) * _UNITS[match.group(2)]) * 1000)
    if re.fullmatch(r"\d+(\.\d+)?", text):
        value = float(text)
        return int(value if value > 10**11 else value * 1000)  # ms or seconds
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--since {text!r}: use 30m, 2h, 1d, epoch seconds or an ISO-8601 time") from None
    if moment.tzinfo is None:
        raise ValueError(f"--since {text!r}: give a time zone (e.g. 2025-01-31T12:00:00Z)")
    return int(moment.timestamp() * 1000)


async def read_dead_letters(kafka_kwargs: dict[str, Any], topic: str, *, timeout: float = 30.0) -> list[dict]:
    """Every record on the dead-letter topic, from its beginning to its end as of now."""
    consumer = AIOKafkaConsumer(
        **kafka_kwargs, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=100
    )
    await consumer.start()
    records: list[dict] = []
    try:
        metadata = await consumer._client.fetch_all_metadata()  # partitions_for_topic() needs a subscription
        partitions = metadata.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        if not tps:
            return records
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout

        async def behind() -> bool:
            return any([await consumer.position(tp) < ends[tp] for tp in tps])

        while await behind():
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} to its end within {timeout}s")
            for messages in (await consumer.getmany(timeout_ms=200)).values():
                for m in messages:
                    if m.offset >= ends[TopicPartition(m.topic, m.partition)]:
                        continue
                    try:
                        records.append(json.loads(m.value))
                    except (TypeError, ValueError):
                        continue  # not ours
    finally:
        await consumer.stop()
    return records


def select(records: Iterable[dict], *, subscription: str | None = None, since_ms: int | None = None) -> list[dict]:
    """The dead letters among `records`, of `subscription` and dead since `since_ms` when given."""
    return [
        r
        for r in records
        if isinstance(r, dict)
        and r.get("schema") == SCHEMA
        and (subscription is None or r.get("subscription_id") == subscription)
        and (since_ms is None or int(r.get("dead_at") or 0) >= since_ms)
    ]


async def replay(outbox: Outbox, records: Iterable[dict]) -> dict[str, int]:
    """Put dead letters back into the outbox (counted; "unreadable": an event this notifier cannot read), but no
    open, update or repeat of an incident since over: after its close, it would open it anew at the receiver."""
    counts = dict.fromkeys(("enqueued", "already_pending", "incident_over"), 0)
    now = now_ms()
    for r in records:
        parsed = parse_either(json.dumps(r["event"]))
        if parsed is None:
            counts["unreadable"] = counts.get("unreadable", 0) + 1
            continue
        kind, event = parsed
        if r["kind"] not in CLOSE_KINDS and await _incident_over(outbox, r["subscription_id"], kind, event):
            counts["incident_over"] += 1
            continue
        delivery = Delivery(
            id=r["delivery_id"],
            subscription_id=r["subscription_id"],
            kind=r["kind"],
            event=event,
            notification_id=r["notification_id"],
            created_at=now,
            extra={"replayed_from": r.get("dead_at")},
            reason=r.get("reason"),
        )
        counts["enqueued" if await outbox.enqueue(delivery, now) else "already_pending"] += 1
    return counts


async def _incident_over(outbox: Outbox, subscription_id: str, kind: AnyKind, event: Event) -> bool:
    """Whether the subscription's current incident for the event's group is no longer the dead letter's."""
    state = await outbox.read_state_field(subscription_id, kind.state_field(event))
    announced = json.loads(state).get("incident_id") if state else None
    return bool(announced != event.incident_id)


async def replay_from_topic(config: Config, cluster: str, subscription: str | None, since_ms: int | None) -> dict:
    """`lagwatch notify replay-dlq`: the dead letters chosen from the cluster's topic, recorded again as deliveries;
    what was read, matched and done."""
    records = await read_dead_letters(client_kwargs(config.cluster(cluster), cluster), config.notifier.dlq_topic)
    chosen = select(records, subscription=subscription, since_ms=since_ms)
    redis = connect(config.redis)
    try:
        outbox = Outbox(redis, lease_ms=int(config.notifier.lease * 1000), seen_ttl_ms=0)
        result = await replay(outbox, chosen)
    finally:
        await redis.aclose()
    return {"read": len(records), "matched": len(chosen), **result}
