"""Which partitions the log probe reads (services/ingest/log_probe.py), and when.

A partition is probed where a group this worker holds has committed below the log end and the log can say what the
offsets cannot:
- by at most MAX_LAG: offsets alone read a caught-up `read_committed` consumer of transactional topics as lagging
  forever (its last commit is its last record + 1, transaction markers and aborted records lie past it); past that
  bound markers cannot be all of it. A caught-up answer holds while neither the committed offset nor the log end
  moves;
- with its committed offset standing for longer than the log-end history reaches back (`storage.lag-history`): its
  lag in seconds is only a lower bound there, and the first unread record's timestamp makes it exact. That answer
  holds while the committed offset stands (the record stays the first unread one).
A partition is probed again only when its answer no longer holds; at most PER_TICK per tick, a tick every
offset-refresh. Answers go to Redis (shared/windows/log_probes.py), where every reader of the windows finds them, to
the history topic (the replay judges as live), and their groups to the evaluator.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Mapping

from redis.asyncio import Redis
from redis.exceptions import RedisError

from lagwatch.services.ingest import metrics
from lagwatch.services.ingest.history_publisher import HistoryPublisher
from lagwatch.services.ingest.log_probe import LogProbe, ProbeAnswer, ProbeFailure
from lagwatch.services.ingest.window_cache import WindowCache
from lagwatch.shared.protocol.keys import parse_partition_field
from lagwatch.shared.protocol.types import ProbedLog
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.service_lifecycle import pause
from lagwatch.shared.windows.changes import ChangePublisher
from lagwatch.shared.windows.log_probes import store_probes
from lagwatch.shared.windows.packing import commit_entry_at, newest_offset

log = logging.getLogger(__name__)
# a consumer this close to the log end may be caught up past transaction markers: one per transaction a producer
# ended after the consumer's last record, plus the records of aborted ones
MAX_LAG = 1_000
PER_TICK = 500  # partitions probed at most per tick: the probe reads a few records of each

TopicPartition = tuple[str, int]
Asked = tuple[str, int, int]  # (topic, partition, committed offset)
UNREAD = -1  # an answer with an unread record: it holds whatever the log end does


class ProbeSchedule:
    def __init__(
        self,
        cluster: str,
        probe: LogProbe,
        cache: WindowCache,
        log_ends: Callable[[], Mapping[TopicPartition, int]],  # the poller's latest samples
        redis: Redis,
        changes: ChangePublisher,
        interval_s: float,
        lag_history_ms: int,
        history: HistoryPublisher | None = None,
    ) -> None:
        self.cluster, self.probe, self.cache, self.log_ends = cluster, probe, cache, log_ends
        self.redis, self.changes, self.interval_s, self.lag_history_ms = redis, changes, interval_s, lag_history_ms
        self.history = history  # the answers go to the history topic too, for the replay
        self._answered: dict[Asked, int] = {}  # -> the log end a caught-up answer was found at, or UNREAD
        self._turn = 0  # where the next tick's share of the due partitions starts

    def due(self, now_ms: int) -> dict[Asked, list[str]]:
        """The (partition, committed offset)s to probe, each with the groups committed there; forgets the answers
        no group stands at any more."""
        due: dict[Asked, list[str]] = {}
        standing: set[Asked] = set()
        log_ends, history_from = self.log_ends(), now_ms - self.lag_history_ms
        for group, windows in self.cache.groups.items():
            for field_name, ring in windows.rings.items():
                topic, partition = _topic_partition(field_name)
                log_end = log_ends.get((topic, partition))
                if not ring or log_end is None:
                    continue
                committed = newest_offset(ring)
                lag = log_end - committed
                if lag <= 0 or (lag > MAX_LAG and not _standing_since_before(ring, committed, history_from)):
                    continue
                asked = (topic, partition, committed)
                standing.add(asked)
                if self._answered.get(asked) not in (log_end, UNREAD):
                    due.setdefault(asked, []).append(group)
        self._answered = {asked: end for asked, end in self._answered.items() if asked in standing}
        return due

    async def tick(self) -> None:
        due = self.due(now_ms())
        asked = self._turn_of(list(due))
        if not asked:
            return
        answers: list[tuple[TopicPartition, ProbedLog]] = []
        for result in await self.probe.probe(asked):
            if isinstance(result, ProbeFailure):
                metrics.PROBE_FAILURES.labels(self.cluster, result.reason).inc()
                continue
            answered = UNREAD if result.found_unread else result.log_end
            self._answered[(result.topic, result.partition, result.committed)] = answered
            answers.append(((result.topic, result.partition), _probed(result)))
        metrics.PROBES.labels(self.cluster).inc(len(asked))
        if answers:
            await store_probes(self.redis, self.cluster, answers)
            if self.history is not None:
                self.history.publish_probes(answers)
            await self.changes.publish(self.cluster, ((group, "commits") for group in _groups_at(due, answers)))

    def _turn_of(self, due: list[Asked]) -> list[Asked]:
        """PER_TICK of the due partitions, from where the last tick stopped: with more due than that, each is asked
        in turn rather than the same ones first every tick."""
        if len(due) <= PER_TICK:
            return due
        start = self._turn % len(due)
        self._turn = start + PER_TICK
        return (due[start:] + due[:start])[:PER_TICK]

    async def run(self, stopping: asyncio.Event) -> None:
        """Tick until a stop; Redis or Kafka trouble leaves the offsets' answers, and the next tick tries again."""
        while not stopping.is_set():
            try:
                await self.tick()
            except (RedisError, OSError) as exc:
                self._answered.clear()  # stored or not: ask again
                log.debug("ingest %s: log probe answers not stored (%s)", self.cluster, exc)
            await pause(stopping, self.interval_s)

    def close(self) -> None:
        self.probe.close()


@functools.lru_cache(maxsize=1 << 20)
def _topic_partition(field_name: str) -> tuple[str, int]:
    """A ring's field as (topic, partition): the same fields come back every tick."""
    return parse_partition_field(field_name)


def _standing_since_before(ring: bytes, committed: int, since_ms: int) -> bool:
    """Whether the window's oldest entry is at the committed offset already and older than `since_ms` (a consumer
    stalled there), or its newest is (one that stopped): either way the offset stands since before then."""
    oldest, newest = commit_entry_at(ring, 0), commit_entry_at(ring, -1)
    return newest.timestamp < since_ms or (oldest.offset == committed and oldest.timestamp < since_ms)


def _groups_at(due: Mapping[Asked, list[str]], answers: list[tuple[TopicPartition, ProbedLog]]) -> list[str]:
    """The groups committed where an answer was found: their verdicts or lags in seconds change."""
    found = {(t, p, answer.committed) for (t, p), answer in answers}
    return sorted({group for asked, groups in due.items() if asked in found for group in groups})


def _probed(answer: ProbeAnswer) -> ProbedLog:
    unread = answer.readable_end if answer.found_unread else None
    return ProbedLog(answer.committed, answer.log_end, unread, answer.first_unread_ms, answer.probed_at)
