"""Which partitions the log probe reads (services/ingest/log_probe.py), and when.

Offsets alone read a caught-up `read_committed` consumer of transactional topics as lagging forever: its last commit
is its last record + 1, and transaction markers (and aborted records) lie between that and the log end. So a
partition is probed where a group this worker holds has committed below the log end by at most MAX_LAG (past that,
markers cannot be all of it, and the lag is a real one). An answer holds while neither the committed offset nor
the log end moves: a partition is probed again only when one did. At most PER_TICK partitions per tick, a tick every
offset-refresh. A caught-up answer goes to Redis (shared/windows/log_probes.py), where every reader of the windows
finds it, and its groups to the evaluator; an answer with unread records changes nothing the offsets say.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from redis.asyncio import Redis
from redis.exceptions import RedisError

from lagwatch.services.ingest import metrics
from lagwatch.services.ingest.log_probe import LogProbe, ProbeAnswer, ProbeFailure
from lagwatch.services.ingest.window_cache import WindowCache
from lagwatch.shared.protocol.keys import parse_partition_field
from lagwatch.shared.protocol.types import ProbedLog
from lagwatch.shared.runtime.service_lifecycle import pause
from lagwatch.shared.windows.changes import ChangePublisher
from lagwatch.shared.windows.log_probes import store_probes
from lagwatch.shared.windows.packing import commit_entry_at

log = logging.getLogger(__name__)
# a consumer this close to the log end may be caught up past transaction markers: one per transaction a producer
# ended after the consumer's last record, plus the records of aborted ones
MAX_LAG = 1_000
PER_TICK = 500  # partitions probed at most per tick: the probe reads a few records of each

TopicPartition = tuple[str, int]
Asked = tuple[str, int, int]  # (topic, partition, committed offset)


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
    ) -> None:
        self.cluster, self.probe, self.cache, self.log_ends = cluster, probe, cache, log_ends
        self.redis, self.changes, self.interval_s = redis, changes, interval_s
        self._answered: dict[Asked, int] = {}  # -> the log end it was answered at

    def due(self) -> dict[Asked, list[str]]:
        """The (partition, committed offset)s to probe, each with the groups committed there; forgets the answers
        no group stands at any more."""
        due: dict[Asked, list[str]] = {}
        standing: set[Asked] = set()
        log_ends = self.log_ends()
        for group, windows in self.cache.groups.items():
            for field_name, ring in windows.rings.items():
                topic, partition = parse_partition_field(field_name)
                log_end = log_ends.get((topic, partition))
                if not ring or log_end is None:
                    continue
                committed = commit_entry_at(ring, -1).offset
                if not 0 < log_end - committed <= MAX_LAG:
                    continue
                asked = (topic, partition, committed)
                standing.add(asked)
                if self._answered.get(asked) != log_end:
                    due.setdefault(asked, []).append(group)
        self._answered = {asked: end for asked, end in self._answered.items() if asked in standing}
        return due

    async def tick(self) -> None:
        due = self.due()
        asked = list(due)[:PER_TICK]
        if not asked:
            return
        caught_up: dict[TopicPartition, ProbedLog] = {}
        for result in await self.probe.probe(asked):
            if isinstance(result, ProbeFailure):
                metrics.PROBE_FAILURES.labels(self.cluster, result.reason).inc()
                continue
            self._answered[(result.topic, result.partition, result.committed)] = result.log_end
            if result.caught_up:
                caught_up[(result.topic, result.partition)] = _probed(result)
        metrics.PROBES.labels(self.cluster).inc(len(asked))
        if caught_up:
            await store_probes(self.redis, self.cluster, caught_up)
            await self.changes.publish(self.cluster, ((group, "commits") for group in _groups_at(due, caught_up)))

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


def _groups_at(due: Mapping[Asked, list[str]], caught_up: Mapping[TopicPartition, ProbedLog]) -> list[str]:
    """The groups committed where a caught-up answer was found: their verdicts change."""
    found = {(t, p, answer.committed) for (t, p), answer in caught_up.items()}
    return sorted({group for asked, groups in due.items() if asked in found for group in groups})


def _probed(answer: ProbeAnswer) -> ProbedLog:
    unread = answer.readable_end if answer.found_unread else None
    return ProbedLog(answer.committed, answer.log_end, unread, answer.first_unread_ms, answer.probed_at)
