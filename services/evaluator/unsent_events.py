"""How long events have waited for Kafka: `lagwatch_evaluator_unsent_events_seconds{cluster}`.

An event Kafka does not take (a partition without its leader, the topic refused, Kafka away) stays in its group's
outbox and is sent again at the group's next evaluation: nothing is lost, but nobody hears of it meanwhile, and
aiokafka retries a record whose leader is away without ever failing it, so `lagwatch_events_publish_failures_total`
may not move. The gauge says how long the oldest has waited, among the groups this evaluator retried within
`FORGOTTEN_S` (not one another instance took over, or one deleted). Since when is kept in Redis (`keys.unsent_events`)
with the last retry, so an evaluator restarted meanwhile (a crash loop) or another instance taking the group over
counts on from it; a record nobody retried for `FORGOTTEN_S` starts over. Best effort: with Redis out of reach the
count is this evaluator's own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from prometheus_client import Gauge
from redis.asyncio import Redis
from redis.exceptions import RedisError

from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.redis_client import reply, text

log = logging.getLogger(__name__)
UNSENT_SECONDS = Gauge(
    "lagwatch_evaluator_unsent_events_seconds",
    "How long the oldest event (status change, lag-threshold crossing) this evaluator retries has waited for Kafka "
    "to take it (0: none waiting)",
    ["cluster"],
)
FORGOTTEN_S = 30.0  # a group retried every few seconds is looked at well within this; one not, is no longer ours
STATUS, LAG = "status", "lag"  # the outboxes: status-change events, lag-threshold events


class UnsentEvents:
    """Per cluster: the outboxes (an outbox's name and a group) whose events wait, since when (epoch ms) and when
    this evaluator last retried them (time.monotonic)."""

    def __init__(self, redis: Redis, cluster: str) -> None:
        self.redis = redis
        self._key = keys.unsent_events(cluster)
        self._waiting: dict[str, tuple[int, float]] = {}  # field -> (waiting since, last looked at here)
        UNSENT_SECONDS.labels(cluster).set_function(self.oldest_seconds)

    async def published(self, outbox: str, unsent: Iterable[str], sent: Iterable[str]) -> None:
        """After a publish of `outbox`'s events: the groups whose events (some of them) are still unsent, and those
        all sent."""
        done = [field for group in sent if (field := _field(outbox, group)) in self._waiting]
        for field in done:
            del self._waiting[field]
        waiting = [_field(outbox, group) for group in unsent]
        try:
            await self._remember(waiting, done)
        except RedisError as exc:  # counted here alone meanwhile
            log.debug("unsent events: Redis out of reach (%s)", exc)
            now, looked = now_ms(), time.monotonic()
            for field in waiting:
                self._waiting[field] = (self._waiting.get(field, (now, looked))[0], looked)

    async def _remember(self, waiting: list[str], done: list[str]) -> None:
        """Each waiting field's start: this evaluator's, else the one Redis keeps when it is not out of date, else now;
        written back with now as its last retry. Fields all sent leave Redis."""
        if not waiting and not done:
            return  # the usual case: every event went out at its first try
        now, looked = now_ms(), time.monotonic()
        unknown = [field for field in waiting if field not in self._waiting]
        kept = await reply(self.redis.hmget(self._key, unknown)) if unknown else []
        for field, value in zip(unknown, kept, strict=True):
            self._waiting[field] = (_since(value, now), looked)
        for field in waiting:
            self._waiting[field] = (self._waiting[field][0], looked)
        async with self.redis.pipeline(transaction=False) as pipe:
            if done:
                pipe.hdel(self._key, *done)
            if waiting:
                pipe.hset(self._key, mapping={field: f"{self._waiting[field][0]} {now}" for field in waiting})
            await pipe.execute()

    def oldest_seconds(self) -> float:
        looked = time.monotonic()
        self._waiting = {f: seen for f, seen in self._waiting.items() if looked - seen[1] <= FORGOTTEN_S}
        oldest = min((since for since, _ in self._waiting.values()), default=None)
        return 0.0 if oldest is None else max(0.0, (now_ms() - oldest) / 1000)


def _field(outbox: str, group: str) -> str:
    return f"{outbox}\n{group}"  # an outbox's name holds no newline: split at the first


def _since(value: bytes | str | None, now: int) -> int:
    """The start a field's Redis value gives (`"<since> <seen>"`), or `now` when there is none, it is not one, or
    nobody retried it within FORGOTTEN_S."""
    try:
        since, seen = (int(part) for part in text(value).split(" ")) if value is not None else (now, now)
    except ValueError:
        return now
    return since if now - seen <= FORGOTTEN_S * 1000 and since <= now else now
