"""The notifier's outbox in Redis (docs/webhooks.md#delivery-guarantees): deliveries that must be sent, survive a
crash, and are sent once normally.

* An event's incident state, delivery and repeat schedule are recorded in one Lua call (`RECORD_NOTIFICATION`)
  before the event is acknowledged; a `seen` key per (event id, subscription) makes a redelivered event a no-op.
* A claimed delivery moves from `due` to `inflight` with a lease its worker renews; one whose lease runs out (its
  worker died) is claimed again. Leases run on Redis's clock (`TIME`), so workers' clocks may differ.
* One incident's notifications to one subscription (its chain) go out in the order recorded: a delivery is claimed
  only once every earlier one of its chain is finished.

Keys: shared/protocol/keys.py (`lw:n:{notify}:...`); scripts: outbox_scripts.py.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, fields
from itertools import islice
from typing import Any, NamedTuple

import msgspec
from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from lagwatch.services.notifier import outbox_scripts as scripts
from lagwatch.services.notifier import receiver_identity
from lagwatch.shared.notifications.subscriptions.notification_policy import Event, event_from_json
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime import packed_commands
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.redis_client import reply, text

APPLIED, DUPLICATE, CONFLICT = 1, 0, -1
CHAIN_KEYS = (keys.OUTBOX_ORDER, keys.OUTBOX_CHAIN_OF, keys.OUTBOX_SEQ)
# claiming and finishing: the outbox's queues, and the chains that keep one incident's deliveries in order
CLAIM_KEYS = [keys.OUTBOX_DUE, keys.OUTBOX_INFLIGHT, keys.OUTBOX_DELIVERIES, keys.OUTBOX_ORDER, keys.OUTBOX_CHAIN_OF]
CHAIN_WAIT_MS = 1000  # a delivery behind an earlier one of its incident is looked at again after this
FIELD_SEPARATOR = "\x1f"
LAG_FIELD_PREFIX = "lag:"
# RECORD_NOTIFICATION, applied only while keys.NOTIFY_ACTIVE (KEYS[9]) keeps at ARGV[11] the event ARGV[12]
# (else CONFLICT): an announcement made from an incident's latest event must not land after a later event of it
# was decided without it (the group OK again: it would open an incident over, never to be closed)
_RECORD_IF_ACTIVE = (
    "if redis.call('HGET', KEYS[9], ARGV[11]) ~= ARGV[12] then return -1 end\n" + scripts.RECORD_NOTIFICATION
)


@dataclass
class Delivery:
    """One notification to one subscription, as kept in the outbox (its event as the JSON object on its topic)."""

    id: str
    subscription_id: str
    kind: str
    event: Event
    notification_id: str  # X-Lagwatch-Event-Id: the receiver's dedupe key
    created_at: int
    attempts: int = 0  # attempts made so far
    last_error: str | None = None
    first_sent_at: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None  # a close not the group's own (scope.py: "unsubscribed", "cluster_forgotten"); "test"

    def to_json(self) -> str:
        doc = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("extra", "reason")}
        doc["event"] = msgspec.to_builtins(self.event)
        doc |= {"extra": self.extra} if self.extra else {}
        return json.dumps(doc | ({"reason": self.reason} if self.reason else {}), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Delivery:
        doc = json.loads(text)
        doc["event"] = event_from_json(doc["event"])
        return cls(**{f.name: doc[f.name] for f in fields(cls) if f.name in doc})


class StateLookup(NamedTuple):
    """One event's look at its incident (`Outbox.read_many`): the state field of each subscription, and its
    incident's latest event to keep (`active`: its field, its JSON or None once over; None: kept as it is)."""

    subscription_ids: list[str]
    state_field: str
    active: tuple[str, str | None] | None = None


@dataclass(frozen=True)
class StatesRead:
    """What `Outbox.read_many` read: both versions, and per lookup each subscription's state JSON ('' for none)."""

    subscriptions_version: int
    silences_version: int
    states: list[list[str]]


class RecordRequest(NamedTuple):
    """One `Outbox.record` call, to make with others in one round trip (`Outbox.record_all`)."""

    subscription_id: str
    event_id: str
    state_field: str
    expected_state: str
    new_state: str
    delivery: Delivery | None
    repeat_at: int | None


def delivery_id(notification_id: str, subscription_id: str) -> str:
    return f"{notification_id}.{subscription_id}"


def digest(*parts: object) -> str:
    """An id made of `parts` (32 hex digits): the same wherever it is made, so what it names is recorded once."""
    return hashlib.sha256("\x00".join(map(str, parts)).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def repeat_notification_id(event_id: str, subscription_id: str, due_ms: int) -> str:
    """A repeat's own dedupe id (a repeat is news the receiver must not drop as a duplicate of the open)."""
    return digest("repeat", event_id, subscription_id, due_ms)


def group_field(cluster: str, group: str) -> str:
    """The state field of a group's status incident, in a subscription's state hash."""
    return f"{cluster}/{group}"


def lag_field(cluster: str, group: str, alert: str = "lag-seconds") -> str:
    """The state field of a group's lag-seconds incident, or of another alert's (`lag:<alert>:`): cluster names
    cannot hold ':', so no group field is one and no alert's field is another's."""
    if alert != "lag-seconds":
        return f"{LAG_FIELD_PREFIX}{alert}:{cluster}/{group}"
    return f"{LAG_FIELD_PREFIX}{cluster}/{group}"


def is_lag_field(state_field: str) -> bool:
    return state_field.startswith(LAG_FIELD_PREFIX)


def repeat_member(subscription_id: str, state_field: str) -> str:
    return f"{subscription_id}{FIELD_SEPARATOR}{state_field}"


def chain_of(member: str) -> str:
    """The name of the chain of one incident's notifications to one subscription (`repeat_member`), which go out
    in order: fixed length (32 hex digits), so no chain's name begins another's (scripts.py `_CHAIN_FNS`)."""
    return digest(member)


def parse_repeat_member(member: bytes | str) -> tuple[str, str]:
    """(subscription id, state field)"""
    subscription_id, _, group = text(member).partition(FIELD_SEPARATOR)
    return subscription_id, group


class Outbox:
    def __init__(self, redis: Redis, *, lease_ms: int, seen_ttl_ms: int) -> None:
        self.redis = redis
        self.lease_ms = lease_ms
        self.seen_ttl_ms = seen_ttl_ms
        self._record = redis.register_script(scripts.RECORD_NOTIFICATION)
        self._record_if_active = redis.register_script(_RECORD_IF_ACTIVE)
        self._repeat = redis.register_script(scripts.SCHEDULE_REPEAT)
        self._enqueue = redis.register_script(scripts.ENQUEUE_DELIVERY)
        self._claim = redis.register_script(scripts.CLAIM_DELIVERIES)
        self._reschedule = redis.register_script(scripts.RESCHEDULE_DELIVERY)
        self._release = redis.register_script(scripts.RELEASE_DELIVERIES)
        self._renew = redis.register_script(scripts.RENEW_DELIVERY_LEASES)
        self._drop_field = redis.register_script(scripts.DROP_FIELD_IF_UNCHANGED)
        self._finish = redis.register_script(scripts.FINISH_DELIVERY)

    # --- the agent's side ---------------------------------------------------------------------------------------

    async def read_states(self, subscription_ids: list[str], state_field: str) -> list[str]:
        """Each subscription's state of one incident, as JSON ('' for none)."""
        return (await self.read_many([StateLookup(subscription_ids, state_field)])).states[0]

    async def read_many(self, lookups: list[StateLookup]) -> StatesRead:
        """(both versions, each lookup's states as `read_states` reads them), in one round trip. A lookup with
        `active` (its incident's field in `keys.NOTIFY_ACTIVE`, its latest event's JSON while the incident goes on,
        else None) keeps it there first."""
        commands: list[tuple[str, ...]] = [("GET", keys.SUBSCRIPTIONS_VERSION), ("GET", keys.SILENCES_VERSION)]
        state_keys: dict[str, str] = {}
        for lookup in lookups:
            if lookup.active is not None:
                field_, event_json = lookup.active
                command = ("HDEL", field_) if event_json is None else ("HSET", field_, event_json)
                commands.append((command[0], keys.NOTIFY_ACTIVE, *command[1:]))
            for sub_id in lookup.subscription_ids:
                state_key = state_keys.get(sub_id) or state_keys.setdefault(sub_id, keys.notify_state(sub_id))
                commands.append(("HGET", state_key, lookup.state_field))
        replies = iter(await packed_commands.execute(self.redis, commands))
        subscriptions_version, silences_version = int(next(replies) or 0), int(next(replies) or 0)
        states = []
        for lookup in lookups:
            if lookup.active is not None:
                next(replies)  # HSET's or HDEL's count
            states.append([raw.decode() if raw else "" for raw in islice(replies, len(lookup.subscription_ids))])
        return StatesRead(subscriptions_version, silences_version, states)

    async def record(self, request: RecordRequest, active: tuple[str, str] | None = None) -> int:
        """APPLIED, DUPLICATE (the event was handled before) or CONFLICT (the state moved: decide again). With
        `active` (a field of `keys.NOTIFY_ACTIVE`, the event JSON read there): CONFLICT also once it moved."""
        record_keys, args = self._record_call(request)
        if active is None:
            return int(await self._record(keys=record_keys, args=args))
        return int(await self._record_if_active(keys=[*record_keys, keys.NOTIFY_ACTIVE], args=[*args, *active]))

    async def record_all(self, requests: list[RecordRequest]) -> list[int]:
        """`record` for each request, in one round trip: each reply as `record`'s. One request is `record` itself
        (nothing to gain from a pipeline)."""
        if len(requests) == 1:
            return [await self.record(requests[0])]
        commands = []
        for request in requests:
            record_keys, args = self._record_call(request)
            commands.append(("EVALSHA", self._record.sha, len(record_keys), *record_keys, *args))
        try:
            replies = await packed_commands.execute(self.redis, commands)
        except NoScriptError:  # a Redis restarted (or flushed its scripts): none of them ran
            await self.redis.script_load(scripts.RECORD_NOTIFICATION)
            replies = await packed_commands.execute(self.redis, commands)
        return [int(reply) for reply in replies]

    def _record_call(self, request: RecordRequest) -> tuple[list[str], list[str | int]]:
        member = repeat_member(request.subscription_id, request.state_field)
        delivery = request.delivery
        record_keys = [
            keys.notify_state(request.subscription_id),
            keys.notify_seen(request.event_id, request.subscription_id),
            keys.OUTBOX_DUE,
            keys.OUTBOX_DELIVERIES,
            keys.NOTIFY_REPEATS,
            *CHAIN_KEYS,
        ]
        args: list[str | int] = [
            request.state_field,
            request.expected_state,
            request.new_state,
            delivery.id if delivery else "",
            delivery.to_json() if delivery else "",
            delivery.created_at if delivery else 0,
            self.seen_ttl_ms,
            member,
            "" if request.repeat_at is None else str(int(request.repeat_at)),
            chain_of(member),
        ]
        return record_keys, args

    # --- the repeat timer ---------------------------------------------------------------------------------------

    async def due_repeats(self, now: int, limit: int = 500) -> list[tuple[str, int]]:
        rows = await self.redis.zrangebyscore(keys.NOTIFY_REPEATS, "-inf", now, start=0, num=limit, withscores=True)
        return [(text(m), int(score)) for m, score in rows]

    async def schedule_repeat(
        self, member: str, seen_score: int, next_at: int | None, delivery: Delivery | None, now: int
    ) -> bool:
        """Move the member's repeat on to `next_at` and enqueue `delivery`; True when it was enqueued (not when
        another notifier took this slot, nor while an earlier notification of the incident waits in the outbox)."""
        return (
            await self._repeat(
                keys=[keys.NOTIFY_REPEATS, keys.OUTBOX_DUE, keys.OUTBOX_DELIVERIES, *CHAIN_KEYS],
                args=[
                    member,
                    seen_score,
                    "" if next_at is None else str(int(next_at)),
                    delivery.id if delivery else "",
                    delivery.to_json() if delivery else "",
                    now,
                    chain_of(member),
                ],
            )
            == 1
        )

    def states(self, subscription_id: str) -> AsyncIterator[tuple[str, str]]:
        """Every incident state kept for the subscription: (state field, state JSON)."""
        return self._scan(keys.notify_state(subscription_id))

    def active(self) -> AsyncIterator[tuple[str, str]]:
        """(its field, its latest event as JSON) of every incident going on, as the events read so far tell."""
        return self._scan(keys.NOTIFY_ACTIVE)

    async def _scan(self, key: str) -> AsyncIterator[tuple[str, str]]:
        """A hash's (field, value) pairs, scanned in steps (a subscription may keep many states)."""
        async for field_, raw in self.redis.hscan_iter(key, count=500):
            yield text(field_), text(raw)

    async def drop_field(self, raw: str, field_: str, key: str = keys.NOTIFY_ACTIVE) -> None:
        """Delete a hash's field (by default an incident's kept latest event) unless a later write replaced `raw`."""
        await self._drop_field(keys=[key], args=[field_, raw])

    async def told_nothing(self, subscription_ids: list[str]) -> set[str]:
        """The subscriptions that keep no incident state at all, in one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for sub_id in subscription_ids:
                pipe.exists(keys.notify_state(sub_id))
            kept = await pipe.execute()
        return {sub_id for sub_id, exists in zip(subscription_ids, kept, strict=True) if not exists}

    async def read_state_field(self, subscription_id: str, group_key: str) -> str:
        raw = await reply(self.redis.hget(keys.notify_state(subscription_id), group_key))
        return text(raw) if raw else ""

    async def identity_since(self, now: int | None = None) -> int:
        """Since when receivers' alerts are named per subscription (receiver_identity.py): ROLLOUT_MS after the
        first call, kept in Redis for every notifier after it."""
        since = (now_ms() if now is None else now) + receiver_identity.ROLLOUT_MS
        await self.redis.set(keys.NOTIFY_IDENTITY_SINCE, since, nx=True)
        return int(await reply(self.redis.get(keys.NOTIFY_IDENTITY_SINCE)) or 0)

    async def scope_looked(self) -> dict[str, str]:
        """Each subscription's configuration (`scope.config_digest`) as the last completed look at the scopes saw it,
        whichever notifier made it."""
        raw = await reply(self.redis.hgetall(keys.NOTIFY_SCOPE_LOOKED))
        return {text(k): text(v) for k, v in raw.items()}

    async def record_scope_looked(self, digests: dict[str, str]) -> None:
        """What a completed look saw: the subscriptions now, and no others."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(keys.NOTIFY_SCOPE_LOOKED)
            if digests:
                pipe.hset(keys.NOTIFY_SCOPE_LOOKED, mapping=digests)
            await pipe.execute()

    async def forget_repeat(self, member: str) -> None:
        await self.redis.zrem(keys.NOTIFY_REPEATS, member)

    # --- the workers' side --------------------------------------------------------------------------------------

    async def enqueue(self, delivery: Delivery, due_at: int | None = None) -> bool:
        return bool(
            await self._enqueue(
                keys=[keys.OUTBOX_DUE, keys.OUTBOX_DELIVERIES],
                args=[delivery.id, delivery.to_json(), now_ms() if due_at is None else due_at],
            )
        )

    async def claim(self, limit: int, now: int | None = None) -> tuple[list[Delivery], int | None]:
        """(up to `limit` due deliveries, now leased to this worker; when the next one left is due, ms or None)."""
        raw = await self._claim(
            keys=CLAIM_KEYS,
            args=[now_ms() if now is None else now, self.lease_ms, max(0, limit), CHAIN_WAIT_MS],
        )
        *pairs, earliest = raw
        deliveries = [Delivery.from_json(pairs[i + 1]) for i in range(0, len(pairs), 2)]
        return deliveries, int(float(earliest)) if earliest else None

    async def renew(self, ids: list[str]) -> None:
        """Extend the leases of the deliveries this worker holds (only those still in flight), from Redis's clock."""
        if ids:
            await self._renew(keys=[keys.OUTBOX_INFLIGHT], args=[self.lease_ms, *ids])

    async def finish(self, delivery_id_: str) -> None:
        """Delivered or dead-lettered: out of the outbox (and the next of its incident's chain due at once)."""
        await self._finish(keys=CLAIM_KEYS, args=[delivery_id_, now_ms()])

    async def reschedule(self, delivery: Delivery, at_ms: int) -> None:
        await self._reschedule(
            keys=[keys.OUTBOX_DUE, keys.OUTBOX_INFLIGHT, keys.OUTBOX_DELIVERIES],
            args=[delivery.id, int(at_ms), delivery.to_json()],
        )

    async def release(self, ids: list[str]) -> int:
        if not ids:
            return 0
        return int(await self._release(keys=[keys.OUTBOX_DUE, keys.OUTBOX_INFLIGHT], args=[now_ms(), *ids]))
