"""Events the notifier never read because retention deleted them first: found, counted, and followed by a
reconciliation (reconcile.py; docs/status-topic.md#retention-and-a-notifier-that-falls-off-the-log).

The consumer runs with `auto_offset_reset="none"`, so aiokafka hands a position off the log to `SkipWatch`
(OffsetOutOfRangeError with the lost position; NoOffsetForPartitionError for a partition never committed). Below
the log start, the events in between are counted once whichever notifier finds them (`keys.NOTIFY_SKIPS`) and reading
resumes at the log start; beyond the log end (a truncated or new topic) it resumes at the log end; either records a
reconciliation (`keys.NOTIFY_RECONCILE`) first. No position yet: the log start (`notifier.start-latest`: its end).
A failure meanwhile leaves the position where it was: the next fetch finds it again.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import faust
from aiokafka.errors import KafkaError, NoOffsetForPartitionError, OffsetOutOfRangeError
from faust.transport.drivers import TRANSPORTS
from redis.asyncio import Redis
from redis.exceptions import RedisError

from lagwatch.services.notifier import metrics
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime import faust_kafka
from lagwatch.shared.runtime.clock import now_ms

log = logging.getLogger(__name__)
SCHEME = "lagwatchnotifierkafka"  # faust_kafka's transport, with this module's consumer
RETRY_AFTER_S = 1.0  # after a failure to record a skip: the next fetch finds the lost position again

# KEYS: keys.NOTIFY_SKIPS, keys.NOTIFY_RECONCILE
# ARGV: field, lost position, log start, log end, now (ms), the topic's partition count
# Counts the skipped stretch [lost, log start) less what an earlier find of the same lost position counted (another
# notifier, or this one before a restart: the committed position stays lost until something is read), and records
# a reconciliation due once the partition is read to its log end (merged with one not done yet). Returns the count.
RECORD_SKIP = """
local field, lost = ARGV[1], tonumber(ARGV[2])
local log_start, log_end = tonumber(ARGV[3]), tonumber(ARGV[4])
local counted_from, first_lost = lost, lost
local before = redis.call('HGET', KEYS[1], field)
if before then
  local b_lost, b_resumed = string.match(before, '^(%d+) (%d+)$')
  b_lost, b_resumed = tonumber(b_lost), tonumber(b_resumed)
  if b_lost and lost >= b_lost and lost < b_resumed then
    counted_from, first_lost = b_resumed, b_lost
  end
end
local skipped = math.max(0, log_start - counted_from)
if skipped > 0 then
  redis.call('HSET', KEYS[1], field, string.format('%d %d', first_lost, log_start))
end
if skipped > 0 or lost > log_end then
  local read_to, at = log_end, tonumber(ARGV[5])
  local due = redis.call('HGET', KEYS[2], field)
  if due then
    local d_read_to, d_at = string.match(due, '^(%d+) (%d+) %d+$')
    read_to, at = math.max(read_to, tonumber(d_read_to) or 0), math.max(at, tonumber(d_at) or 0)
  end
  redis.call('HSET', KEYS[2], field, string.format('%d %d %d', read_to, at, tonumber(ARGV[6])))
end
return skipped
"""


def partition_field(cluster: str, topic: str, partition: int) -> str:
    """A partition's field in keys.NOTIFY_SKIPS and keys.NOTIFY_RECONCILE (topic names hold no '/' nor ':')."""
    return f"{cluster}/{topic}:{partition}"


@dataclass(frozen=True)
class LostPosition:
    """A partition's position that is not in its log any more, and the log's bounds when that was found."""

    topic: str
    partition: int
    lost: int
    log_start: int
    log_end: int

    @property
    def resume_at(self) -> int:
        """The log start after deleted events; the log end past a truncated or new log (else the position itself)."""
        return max(self.log_start, min(self.lost, self.log_end))

    @property
    def deleted(self) -> int:
        """Events deleted between the position and the log start (0 for a position beyond the log end)."""
        return max(0, self.log_start - self.lost)


class ReadPositions:
    """How far this notifier has read each partition it consumes (the next offset): a reconciliation waits until the
    events the log still held when a skip was found have been read (reconcile.py)."""

    def __init__(self) -> None:
        self._next: dict[tuple[str, int], int] = {}

    def moved_to(self, topic: str, partition: int, offset: int) -> None:
        key = (topic, partition)
        self._next[key] = max(self._next.get(key, 0), offset)

    def reached(self, topic: str, partition: int) -> int:
        """The next offset to read; -1 for a partition this notifier has not read."""
        return self._next.get((topic, partition), -1)


class SkipWatch:
    """What the notifier's consumer does with a position it cannot read from (see the module's docstring)."""

    def __init__(self, redis: Redis, cluster: str, positions: ReadPositions, *, start_latest: bool) -> None:
        self.cluster = cluster
        self.positions = positions
        self.start_latest = start_latest
        self._record = redis.register_script(RECORD_SKIP)

    async def handle(self, consumer: Any, error: KafkaError) -> None:
        """Move the consumer on past `error`'s partitions; on a failure, leave them where they are for a while."""
        try:
            if isinstance(error, OffsetOutOfRangeError):
                await self.positions_lost(consumer, error.args[0])
            else:
                await self.start_reading(consumer, error.args[0])
        except (KafkaError, RedisError, OSError, TimeoutError) as exc:
            log.warning("notifier: cannot move on from %r yet (%s); trying again", error, exc)
            await asyncio.sleep(RETRY_AFTER_S)
        except Exception:  # a bug must not crash the Faust app (every agent would stop): the next fetch tries again
            log.exception("notifier: cannot move on from %r", error)
            await asyncio.sleep(RETRY_AFTER_S)

    async def positions_lost(self, consumer: Any, lost: Mapping[Any, int]) -> None:
        for tp, position in lost.items():
            log_start, log_end = await _log_bounds(consumer, tp)
            found = LostPosition(tp.topic, tp.partition, position, log_start, log_end)
            await self.record(found, consumer.topic_partitions(tp.topic) or 0)
            self.positions.moved_to(tp.topic, tp.partition, found.resume_at)
            await consumer.seek_wait({tp: found.resume_at})

    async def start_reading(self, consumer: Any, tp: Any) -> None:
        """A partition the group never committed: its log start (or end, with `start_latest`)."""
        log_start, log_end = await _log_bounds(consumer, tp)
        offset = log_end if self.start_latest else log_start
        self.positions.moved_to(tp.topic, tp.partition, offset)
        await consumer.seek_wait({tp: offset})

    async def record(self, found: LostPosition, partitions: int) -> int:
        """Count the events `found` skipped (those no notifier counted before), record the reconciliation it calls
        for, and say so; returns the count."""
        field = partition_field(self.cluster, found.topic, found.partition)
        args: list[str | int] = [field, found.lost, found.log_start, found.log_end, now_ms(), partitions]
        skipped = int(await self._record(keys=[keys.NOTIFY_SKIPS, keys.NOTIFY_RECONCILE], args=args))
        metrics.EVENTS_SKIPPED.labels(self.cluster, found.topic).inc(skipped)
        _report(found, skipped)
        return skipped


def _report(found: LostPosition, skipped: int) -> None:
    where = f"{found.topic}[{found.partition}]"
    if found.lost > found.log_end:
        log.error(
            "notifier: position %d on %s is beyond the log end %d (the topic was truncated or made anew): reading "
            "on from %d; its groups are reconciled with the evaluator's statuses once read that far",
            found.lost,
            where,
            found.log_end,
            found.resume_at,
        )
    elif found.deleted:
        log.error(
            "notifier: %d events on %s were deleted by retention before they were read (%d of them not counted "
            "before): position %d fell off the log, which starts at %d; reading on from there; its groups are "
            "reconciled with the evaluator's statuses once read to %d. Keep the topic longer than notifier outages",
            found.deleted,
            where,
            skipped,
            found.lost,
            found.log_start,
            found.log_end,
        )


async def _log_bounds(consumer: Any, tp: Any) -> tuple[int, int]:
    starts = await consumer.earliest_offsets(tp)
    ends = await consumer.highwaters(tp)
    return int(starts[tp]), int(ends[tp])


_WATCHES: weakref.WeakKeyDictionary[faust.App, SkipWatch] = weakref.WeakKeyDictionary()


def watch(app: faust.App, skip_watch: SkipWatch) -> None:
    """Let `skip_watch` handle the positions the app's consumer cannot read from (the app uses SCHEME)."""
    _WATCHES[app] = skip_watch


class _Consumer(faust_kafka.Transport.Consumer):  # type: ignore[misc,valid-type]
    async def _getmany(self, active_partitions: Any, timeout: float) -> Any:
        """aiokafka raises these only when no other partition had records to hand out (those come first)."""
        try:
            return await super()._getmany(active_partitions, timeout)
        except (OffsetOutOfRangeError, NoOffsetForPartitionError) as error:
            skip_watch = _WATCHES.get(self.app)
            if skip_watch is None:
                raise
            await skip_watch.handle(self, error)
            return {}


class Transport(faust_kafka.Transport):
    Consumer = _Consumer


TRANSPORTS.aliases[SCHEME] = f"{__name__}:Transport"
