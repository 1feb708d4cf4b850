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

The schedule does work in proportion to what changed, not to the partitions held: a partition is judged again when
its group's commits are stored (`touched`), when its log end moves (the poller's `moves`), or when its committed
offset comes to stand since before the history (a timer set when it was last judged). A partition is probed again
only when its answer no longer holds. An answer is a fact about the log at a committed offset, whichever group stands
there: it is kept while some held ring stands there and it holds (the sweep), and a ring whose answer holds costs the
schedule nothing. A tick every offset-refresh probes this worker's share of
`ingest.log-probe-rate`, those left over first at the next. Answers go to Redis (shared/windows/log_probes.py), where
every reader of the windows finds them, to the history topic (the replay judges as live), and their groups to the
evaluator.

A group the worker holds but does not hear from (it committed before the worker's assignment, and stopped) is not
judged until it commits again (the worker loads a group into memory at its first commit it reads); its stored
answer, if any, holds meanwhile.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping

from redis.asyncio import Redis
from redis.exceptions import RedisError

from lagwatch.services.ingest import metrics
from lagwatch.services.ingest.history_publisher import HistoryPublisher
from lagwatch.services.ingest.log_probe import LogProbe, ProbeAnswer, ProbeFailure
from lagwatch.services.ingest.window_cache import WindowCache
from lagwatch.shared.protocol.keys import parse_partition_field, partition_field
from lagwatch.shared.protocol.types import ProbedLog
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.service_lifecycle import pause
from lagwatch.shared.windows.changes import PROBE_REASON, ChangePublisher
from lagwatch.shared.windows.log_probes import store_probes
from lagwatch.shared.windows.packing import commit_entry_at, newest_offset

log = logging.getLogger(__name__)
# a consumer this close to the log end may be caught up past transaction markers: one per transaction a producer
# ended after the consumer's last record, plus the records of aborted ones
MAX_LAG = 1_000
SWEEP_TICKS = 60  # how often the answers no held ring stands at are forgotten (`_sweep`)

TopicPartition = tuple[str, int]
Asked = tuple[str, int, int]  # (topic, partition, committed offset)
Held = tuple[str, str]  # (group, partition field): one group's ring
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
        per_tick: Callable[[], int] = lambda: 500,  # probes at most in a tick (`probes_per_tick`)
    ) -> None:
        self.cluster, self.probe, self.cache, self.log_ends = cluster, probe, cache, log_ends
        self.redis, self.changes, self.interval_s, self.lag_history_ms = redis, changes, interval_s, lag_history_ms
        self.history, self.per_tick = history, per_tick  # the answers go to the history topic too, for the replay
        self.moves: set[TopicPartition] = set()  # partitions whose log end moved: the poller adds, a tick drains
        self._to_judge: dict[Held, None] = {}  # an ordered set: the first changed is the first asked
        self._groups_of_topic: dict[str, set[str]] = {}  # which rings a moved log end may concern
        self._timers: list[tuple[int, Held]] = []  # when an offset comes to stand since before the history
        self._timer_at: dict[Held, int] = {}  # each ring's pending timer (one each)
        # each ring the log can answer for without an answer that holds, in the order they are asked: its committed
        # offset (its topic and partition are in its field: an `Asked` tuple per ring would cost memory)
        self._due: dict[Held, int] = {}
        self._answered: dict[Asked, int] = {}  # -> the log end a caught-up answer was found at, or UNREAD
        self._judge_every_ring = False  # the answers were lost: every held ring is judged at the next tick
        self._ticks = 0

    def touched(self, groups: Iterable[str]) -> None:
        """Groups whose commits were stored: each of their rings is judged at the next tick."""
        for group in groups:
            windows = self.cache.groups.get(group)
            if windows is None:
                continue
            for field_name in windows.rings:
                self._groups_of_topic.setdefault(_topic_partition(field_name)[0], set()).add(group)
                self._to_judge[(group, field_name)] = None

    def due(self, now_ms: int) -> dict[Asked, list[str]]:
        """What changed since the last call judged: the (partition, committed offset)s to probe, each with the
        groups committed there."""
        self._take_changes(now_ms)
        log_ends = self.log_ends()
        for held in self._every_ring() if self._judge_every_ring else self._to_judge:
            self._judge(held, log_ends, now_ms)
        self._to_judge, self._judge_every_ring = {}, False
        self._ticks += 1
        if self._ticks % SWEEP_TICKS == 0:
            self._sweep(log_ends)
        due: dict[Asked, list[str]] = {}
        for held, committed in list(self._due.items()):
            if self._ring(held) is None:  # its group deleted or given up since: the sweep forgets the rest
                del self._due[held]
            else:
                topic, partition = _topic_partition(held[1])
                due.setdefault((topic, partition, committed), []).append(held[0])
        return due

    def _ring(self, held: Held) -> bytes | None:
        windows = self.cache.groups.get(held[0])
        return windows.rings.get(held[1]) if windows is not None else None

    def _every_ring(self) -> Iterator[Held]:
        """Every ring held (judging one changes no group's rings)."""
        for group, windows in self.cache.groups.items():
            for field_name in windows.rings:
                yield group, field_name

    def _sweep(self, log_ends: Mapping[TopicPartition, int]) -> None:
        """Forget the answers no held ring stands at any more (its offset moved on, its group reassigned, deleted or
        expired) and those that no longer hold (a caught-up answer whose log end moved), and the groups no longer
        held in the topics' index: a deleted group is not judged again by itself, as it has no rings left to judge."""
        answered, kept = self._answered, {}
        for windows in self.cache.groups.values() if answered else ():
            for field_name, ring in windows.rings.items():
                if not ring:
                    continue
                asked = _asked(field_name, newest_offset(ring))
                answer = answered.get(asked)
                if answer is not None and answer in (UNREAD, log_ends.get(asked[:2])):
                    kept[asked] = answer
        self._answered = kept
        self._due, self._timer_at = dict(self._due), dict(self._timer_at)  # sized to what they hold now
        for topic, held_groups in list(self._groups_of_topic.items()):
            held_groups.intersection_update(self.cache.groups)
            if not held_groups:
                del self._groups_of_topic[topic]

    def _take_changes(self, now_ms: int) -> None:
        """Moved log ends and timers that fell due, as rings to judge."""
        moves = self.moves.copy()  # drained in place: the poller holds this very set
        self.moves.clear()
        for topic, partition in moves:
            field_name = partition_field(topic, partition)
            groups = self._groups_of_topic.get(topic, ())
            self._to_judge.update(dict.fromkeys((group, field_name) for group in groups))
        timers = self._timers
        while timers and timers[0][0] <= now_ms:
            at, held = heapq.heappop(timers)
            if self._timer_at.get(held) == at:
                del self._timer_at[held]
                self._to_judge[held] = None

    def _judge(self, held: Held, log_ends: Mapping[TopicPartition, int], now_ms: int) -> None:
        """Whether the log can answer for this ring, and whether its answer still holds."""
        ring = self._ring(held)
        topic, partition = _topic_partition(held[1])
        log_end = log_ends.get((topic, partition))
        self._due.pop(held, None)
        if not ring or log_end is None:
            return
        committed = newest_offset(ring)
        lag = log_end - committed
        if lag > MAX_LAG:
            standing_from = _standing_from(ring, committed) + self.lag_history_ms
            if standing_from > now_ms:
                self._time(held, standing_from)
                return  # not yet: the timer judges it again then
        if lag > 0 and self._answered.get((topic, partition, committed)) not in (log_end, UNREAD):
            self._due[held] = committed

    def _time(self, held: Held, at: int) -> None:
        pending = self._timer_at.get(held)
        if pending is None or at < pending:
            self._timer_at[held] = at
            heapq.heappush(self._timers, (at, held))

    async def tick(self) -> None:
        due = self.due(now_ms())
        asked = list(due)[: self.per_tick()]
        if not asked:
            return
        log.debug("ingest %s: probing %d of %d partitions due", self.cluster, len(asked), len(due))
        answers: list[tuple[TopicPartition, ProbedLog]] = []
        found: set[Asked] = set()
        for result in await self.probe.probe(asked):
            if isinstance(result, ProbeFailure):
                metrics.PROBE_FAILURES.labels(self.cluster, result.reason).inc()
                continue
            at = (result.topic, result.partition, result.committed)
            self._answered[at] = UNREAD if result.found_unread else result.log_end
            found.add(at)
            answers.append(((result.topic, result.partition), _probed(result)))
        metrics.PROBES.labels(self.cluster).inc(len(asked))
        self._requeue(set(asked), found)
        if answers:
            await store_probes(self.redis, self.cluster, answers)
            if self.history is not None:
                self.history.publish_probes(answers)
            await self.changes.publish(self.cluster, ((group, PROBE_REASON) for at in found for group in due[at]))

    def _requeue(self, asked: set[Asked], found: set[Asked]) -> None:
        """Answered rings leave the queue; those whose probe failed go to its end: with more due than a tick takes,
        each is asked in turn rather than the same ones first every tick."""
        offsets_of: dict[str, set[int]] = {}  # partition field -> the offsets asked there (no tuple built per ring)
        for topic, partition, committed in asked:
            offsets_of.setdefault(partition_field(topic, partition), set()).add(committed)
        taken = [(held, at) for held, at in self._due.items() if at in offsets_of.get(held[1], ())]
        for held, _ in taken:
            del self._due[held]
        if not self._due:  # a dict keeps the table of its largest size: an emptied queue starts small again
            self._due = {}
        self._due.update((held, at) for held, at in taken if _asked(held[1], at) not in found)

    async def run(self, stopping: asyncio.Event) -> None:
        """Tick until a stop; Redis or Kafka trouble leaves the offsets' answers, and the next tick tries again."""
        while not stopping.is_set():
            try:
                await self.tick()
            except (RedisError, OSError) as exc:
                self._forget_answers()
                log.debug("ingest %s: log probe answers not stored (%s)", self.cluster, exc)
            except Exception:  # the unexpected: the offsets' answers stand meanwhile; keep probing, say why
                self._forget_answers()
                log.exception("ingest %s: log probe tick failed; retrying", self.cluster)
            await pause(stopping, self.interval_s)

    def _forget_answers(self) -> None:
        """Stored or not: every ring the log can answer for is asked again."""
        self._answered.clear()
        self._judge_every_ring = True

    def close(self) -> None:
        self.probe.close()


def probes_per_tick(rate: float, interval_s: float, share: float) -> int:
    """A worker's probes in a tick: its share of the cluster's rate (`ingest.log-probe-rate`), as it holds the
    offsets topic's partitions; one at least, so no worker's partitions wait for good."""
    return max(1, int(rate * interval_s * share))


@functools.lru_cache(maxsize=1 << 20)
def _topic_partition(field_name: str) -> tuple[str, int]:
    """A ring's field as (topic, partition): the same fields come back every tick."""
    return parse_partition_field(field_name)


def _asked(field_name: str, committed: int) -> Asked:
    """What the ring of `field_name` at `committed` asks the log."""
    return (*_topic_partition(field_name), committed)


def _standing_from(ring: bytes, committed: int) -> int:
    """Since when the committed offset stands, as far as the window tells: its oldest entry's time when that entry
    is at the committed offset already (a consumer stalled there), else its newest's (one that stopped)."""
    oldest, newest = commit_entry_at(ring, 0), commit_entry_at(ring, -1)
    return min(newest.timestamp, oldest.timestamp) if oldest.offset == committed else newest.timestamp


def _probed(answer: ProbeAnswer) -> ProbedLog:
    unread = answer.readable_end if answer.found_unread else None
    return ProbedLog(answer.committed, answer.log_end, unread, answer.first_unread_ms, answer.probed_at)
