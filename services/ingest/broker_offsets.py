"""Broker log-end offsets: polled from Kafka every `offset-refresh`, topic metadata every `topic-refresh`.

One ingest worker per cluster polls (it holds a lease in Redis, renewed each poll); the others read the latest
offsets from Redis, so adding workers adds no load on the brokers. Every worker keeps the latest offsets in memory,
because a commit's lag is computed from them as it is stored.

A commit for a partition whose log-end offset is not known yet (a topic created since the last metadata refresh)
is held back, not dropped: the batch asks Kafka for that partition's offset first (`lookup`), and only commits for
partitions that really do not exist, or whose leader is away while the rest of the cluster answers (a partition
never sampled on a broker that is down), are dropped (counted as `no_broker_offset`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaClient, AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError
from aiokafka.protocol.offset import OffsetRequest
from redis.exceptions import RedisError

from lagwatch.services.ingest.history_publisher import HistoryPublisher
from lagwatch.services.ingest.leases import PollerLease
from lagwatch.services.ingest.topic_retention import TopicRetentionReader
from lagwatch.services.ingest.unanswered_leaders import UnansweredLeaders
from lagwatch.shared.protocol.types import Sample
from lagwatch.shared.records.history import KIND_LOG_START
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.outage_log import OutageLog
from lagwatch.shared.runtime.service_lifecycle import pause
from lagwatch.shared.windows.changes import ChangePublisher
from lagwatch.shared.windows.store import WindowStore
from lagwatch.shared.windows.window import log_end_as_of

log = logging.getLogger(__name__)
TP = tuple[str, int]
LATEST = -1  # ListOffsets timestamp meaning "the log end"
EARLIEST = -2  # ... and "the log start" (retention risk: polled every topic-refresh)
READ_UNCOMMITTED = 0
HOLD_POLLS_MAX_S = 60.0  # a consumer that takes longer to catch up gets its log-end offsets polled anyway


class LeadersUnreachable(KafkaConnectionError):
    """Some partition leaders did not answer a poll; the others' samples are stored."""


async def list_latest_offsets(
    client: AIOKafkaClient, partitions: Iterable[TP], timeout: float, at: int = LATEST
) -> tuple[dict[TP, int], list[TP], list[TP]]:
    """ListOffsets (the high watermark), one request per partition leader: (offsets found, partitions Kafka does not
    know, partitions whose leader did not answer), so one broker down does not stop the others' samples.

    Not the consumer's `end_offsets`: it asks for unknown partitions' metadata by name, and a metadata request naming
    a deleted topic re-creates it on clusters with `auto.create.topics.enable`.
    """
    by_leader: dict[int, dict[str, list[tuple[int, int]]]] = {}
    unknown: list[TP] = []
    for topic, partition in partitions:
        leader = client.cluster.leader_for_partition(TopicPartition(topic, partition))
        if leader is None or leader < 0:
            unknown.append((topic, partition))
            continue
        by_leader.setdefault(leader, {}).setdefault(topic, []).append((partition, at))
    requests = [
        asyncio.wait_for(client.send(leader, OffsetRequest(-1, READ_UNCOMMITTED, list(topics.items()))), timeout)
        for leader, topics in by_leader.items()
    ]
    answers = await asyncio.gather(*requests, return_exceptions=True)
    found: dict[TP, int] = {}
    unreachable: list[TP] = []
    for topics, response in zip(by_leader.values(), answers, strict=True):
        if isinstance(response, BaseException):
            if not isinstance(response, KafkaError | OSError):
                raise response  # a bug, not an outage
            unreachable += [(topic, partition) for topic, parts in topics.items() for partition, _ in parts]
            continue
        _read_offsets(response, found, unknown)
    return found, unknown, unreachable


def _read_offsets(response: Any, found: dict[TP, int], unknown: list[TP]) -> None:
    for topic, partition_data in response.topics:
        for partition, error_code, *info in partition_data:
            if error_code != 0:
                unknown.append((topic, partition))
            elif response.API_VERSION == 0:
                if info[0]:
                    found[(topic, partition)] = info[0][0]
            else:
                found[(topic, partition)] = info[1]  # (timestamp, offset)


def _by_topic(found: dict[TP, int]) -> dict[str, dict[int, int]]:
    by_topic: dict[str, dict[int, int]] = {}
    for (topic, partition), offset in found.items():
        by_topic.setdefault(topic, {})[partition] = offset
    return by_topic


class LogStarts:
    """Log-start offsets (retention risk, `shared/statuses/retention.py`), with the topics' retention settings, polled
    every topic-refresh (retention deletes whole segments, minutes apart). One that moved is a log-start notice."""

    def __init__(
        self, cluster: str, store: WindowStore, history: HistoryPublisher | None, retention: TopicRetentionReader | None
    ) -> None:
        self.cluster, self.store, self.history = cluster, store, history
        self.retention = retention
        self.offsets: dict[TP, int] = {}
        self.polled_at = 0.0  # monotonic

    async def poll(
        self, client: AIOKafkaClient, partitions: Iterable[TP], timeout: float, changes: ChangePublisher | None
    ) -> dict[TP, int]:
        self.polled_at = time.monotonic()
        found, _, _ = await list_latest_offsets(client, partitions, timeout, EARLIEST)
        # (a leader that did not answer: its partitions' log starts wait for the next topic-refresh)
        by_topic, sampled_at = _by_topic(found), now_ms()
        await self.store.writes.add_log_start_polls(self.cluster, by_topic, sampled_at)
        if self.history is not None:  # the replay's retention risk (shared/records/history.py)
            await self.history.publish_samples(by_topic, sampled_at, KIND_LOG_START)
        if self.retention is not None and (read := await self.retention.read(by_topic)):
            await self.store.writes.set_topic_retention(self.cluster, {t: r.ms for t, r in read.items()})
        moved = {tp[0] for tp, offset in found.items() if self.offsets.get(tp, offset) != offset}
        self.offsets.update(found)
        if moved and changes is not None:
            await changes.publish_log_ends(self.cluster, moved, "log-start")
        return found


class LatestLogEnds:
    """Each partition's latest log-end offset, and since when it stands on lagwatch's clock (`since`: when it was
    first sampled): a commit made before that is measured against the log-end history instead (`log_end_at`). A
    worker that only reads the poller's samples takes the time it read them, later than the poll: more commits go to
    the history, none to a wrong log end."""

    cluster: str
    store: WindowStore
    latest: dict[TP, int]
    since: dict[TP, int]
    moves: set[TP] | None = None  # where moved log ends are told, for a reader who drains it (the log probe)

    def _remember(self, offsets: dict[TP, int], sampled_at: int, *, replace: bool = False) -> set[str]:
        """Take `offsets` as the latest (all of them with `replace`); returns the topics whose log end moved."""
        since, latest = self.since, self.latest
        moved = {tp for tp, offset in offsets.items() if latest.get(tp) != offset}
        for tp in moved:
            since[tp] = sampled_at
        if self.moves is not None:
            self.moves.update(moved)
        if replace:
            self.latest = offsets
            self.since = {tp: since[tp] for tp in offsets}
        else:
            latest.update(offsets)
        return {topic for topic, _ in moved}

    def log_end_at(self, tp: TP, made_at: int, histories: dict[TP, list[Sample]], first_pass: bool) -> int | None:
        """The partition's log end when a commit was made: the latest sample unless the log end moved after
        `made_at`; then from its history (`histories`, read by `histories`), the latest sample where the history
        cannot answer. None in a batch's first pass, which sets such a commit aside until its history is read."""
        latest = self.latest.get(tp)
        if latest is None or made_at >= self.since.get(tp, 0):
            return latest
        if first_pass:
            return None
        history = histories.get(tp)
        as_of = log_end_as_of(history, made_at) if history else None
        return latest if as_of is None else as_of

    async def histories(self, commits: Iterable[tuple[TP, int]]) -> dict[TP, list[Sample]]:
        """The log-end histories of the partitions whose log end moved after one of their commits was made (`commits`:
        partition, made at): what `log_end_at` reads in a batch's second pass."""
        since = self.since
        late = {tp for tp, made_at in commits if made_at < since.get(tp, 0)}
        return await self.store.reads.offset_histories(self.cluster, late) if late else {}


class BrokerOffsets(LatestLogEnds):
    """The latest log-end offset of every partition of one cluster, kept fresh and written to the store."""

    def __init__(
        self,
        cluster: str,
        store: WindowStore,
        kafka_kwargs: dict[str, Any],
        *,
        offset_refresh: float,
        topic_refresh: float,
        history: HistoryPublisher | None = None,
        retention: TopicRetentionReader | None = None,
    ) -> None:
        self.cluster = cluster
        self.history = history
        self.store = store
        self.offset_refresh = offset_refresh
        self.request_timeout = max(5.0, offset_refresh)
        self.topic_refresh = topic_refresh
        self.latest: dict[TP, int] = {}
        self.since: dict[TP, int] = {}
        self.partition_counts: dict[str, int] = {}
        self.kafka_ok = False
        self.is_poller = False
        self.unanswered = UnansweredLeaders(cluster)  # said when it changes, not at every poll
        self.log_starts = LogStarts(cluster, store, history, retention)
        self.lease = PollerLease(store.redis, cluster, offset_refresh)
        self._kafka_outage = OutageLog(log, f"broker offsets for {cluster}: Kafka unreachable")
        self._redis_outage = OutageLog(log, f"broker offsets for {cluster}: Redis unreachable")
        self._consumer = AIOKafkaConsumer(
            **kafka_kwargs, enable_auto_commit=False, exclude_internal_topics=False, metadata_max_age_ms=300_000
        )
        self._last_topic_refresh = 0.0
        self.changes: ChangePublisher | None = None  # set by the worker: log-end notices for the evaluator

    async def start(self) -> None:
        await self._consumer.start()

    async def stop(self) -> None:
        await self._consumer.stop()
        await self.lease.release()

    # --- the periodic work ------------------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event, commits_caught_up: asyncio.Event | None = None) -> None:
        """Poll until `stopping` is set; errors are logged and retried at the next tick.

        While any worker's commits are behind (`commits_caught_up` not set: after an assignment, or waiting for Redis)
        the poller takes no new samples, for at most HOLD_POLLS_MAX_S: log ends moving on while those commits are
        unstored would make every caught-up group look stopped."""
        held_since: float | None = None
        while not stopping.is_set():
            behind = commits_caught_up is not None and not commits_caught_up.is_set()
            try:
                holding = await self.lease.announce(behind) or behind
            except Exception as exc:  # Redis down: the poll below fails too, and says so
                log.debug("broker offsets for %s: could not share whether commits are behind (%s)", self.cluster, exc)
                holding = behind
            held_since = (held_since or time.monotonic()) if holding else None
            await self._tick_said(poll=held_since is None or time.monotonic() - held_since > HOLD_POLLS_MAX_S)
            await pause(stopping, self.offset_refresh)

    async def _tick_said(self, *, poll: bool) -> None:
        """A tick whose failure is said as an outage (when it begins and ends), not raised."""
        try:
            await self.tick(poll=poll)
            self._kafka_outage.ok()
            self._redis_outage.ok()
        except LeadersUnreachable:  # said by `unanswered` when it changes, not once per poll
            # still ready: the worker does its work for every other partition (one offline for weeks must not hold
            # every rollout of the ingest)
            self._kafka_outage.ok()
        except (KafkaError, OSError) as exc:
            self.kafka_ok = False
            self._kafka_outage.failed(exc)
        except RedisError as exc:  # an outage, not a bug: no traceback
            self._redis_outage.failed(exc)
        except Exception:  # the unexpected: keep polling, say why
            log.exception("broker offsets for %s: poll failed; retrying", self.cluster)

    async def tick(self, *, poll: bool = True) -> None:
        was_poller = self.is_poller
        self.is_poller = await self.lease.take(self.lease.ttl_ms)
        if not self.is_poller:
            if was_poller:
                self.unanswered.forget()
            await self.load_from_store()
            await self._check_kafka()
            return
        if time.monotonic() - self._last_topic_refresh >= self.topic_refresh or not self.partition_counts:
            await self.refresh_topics()
        if poll:
            log_starts_due = time.monotonic() - self.log_starts.polled_at >= self.topic_refresh
            try:
                await self.poll(self.all_partitions())
            finally:  # also when a broker did not answer: the others' log starts still count
                if log_starts_due:
                    await self.poll_log_starts(self.all_partitions())
            return
        # Held: partitions never sampled are sampled all the same: a first sample taken only when a commit asks for
        # it would already stand above that commit, and the group's first evaluation would find it STOPped.
        unsampled = [tp for tp in self.all_partitions() if tp not in self.latest]
        if unsampled:
            await self.poll(unsampled)

    async def _check_kafka(self) -> None:
        """A follower polls nothing, yet its readiness must say whether Kafka answers: a metadata request now and
        then (every topic-refresh, or every tick while it did not answer)."""
        if not self.kafka_ok or time.monotonic() - self._last_topic_refresh >= self.topic_refresh:
            await self._update_metadata()

    async def load_from_store(self) -> None:
        """A follower's view: the poller's latest samples, read from Redis."""
        topics = await self.store.reads.list_topics(self.cluster)
        self.partition_counts = topics
        wanted = [(t, p) for t, n in topics.items() for p in range(n)]
        rings = await self.store.reads.broker_rings(self.cluster, wanted)
        self._remember({tp: ring[-1] for tp, ring in rings.items() if ring}, now_ms(), replace=True)

    async def refresh_topics(self) -> list[str]:
        """Re-read topic metadata; topics that disappeared, or came back with fewer partitions (a topic never shrinks:
        it was deleted and re-created), are deleted from the store. Returns them."""
        await self._update_metadata()
        cluster_meta = self._consumer._client.cluster
        counts = {}
        for topic in cluster_meta.topics(exclude_internal_topics=False):
            parts = cluster_meta.partitions_for_topic(topic)
            if parts:
                counts[topic] = max(parts) + 1
        known = {**await self.store.reads.list_topics(self.cluster), **self.partition_counts}
        deleted = sorted(t for t, n in known.items() if counts.get(t, 0) < n)
        for topic in deleted:
            removed = await self.store.deletions.delete_topic(self.cluster, topic)
            how = f"re-created with {counts[topic]} partitions, not {known[topic]}" if topic in counts else "deleted"
            log.info("topic %s/%s was %s: removed from %d group partitions", self.cluster, topic, how, removed)
        if deleted and self.history is not None:  # the replay drops the partitions when the live store did
            await self.history.publish_deletions(deleted, now_ms())
        self._remember({tp: off for tp, off in self.latest.items() if tp[0] in counts}, 0, replace=True)
        self.unanswered.keep_only(counts)
        self.partition_counts = counts
        return deleted

    async def _answers(self) -> bool:
        """Whether a broker answers a metadata request now."""
        try:
            await self._update_metadata()
        except (KafkaError, OSError):
            return False
        return True

    async def _update_metadata(self) -> None:
        """Fresh cluster metadata (Kafka answers), or KafkaConnectionError: aiokafka answers False when no broker
        answered (it does not raise), and the metadata it keeps is then the last one it had."""
        client = self._consumer._client  # aiokafka exposes metadata only through its client
        if not await client.force_metadata_update():
            raise KafkaConnectionError(f"no broker of {self.cluster} answered a metadata request")
        self.kafka_ok = True
        self._last_topic_refresh = time.monotonic()

    def all_partitions(self) -> list[TP]:
        return [(t, p) for t, n in self.partition_counts.items() for p in range(n)]

    async def poll(self, partitions: Iterable[TP]) -> dict[TP, int]:
        """Latest offsets of the partitions from their leaders; store and remember them. Partitions unknown or
        unanswered trigger a metadata refresh next tick; when some leaders did not answer, the others' samples are
        stored, then LeadersUnreachable says so."""
        asked = list(partitions)
        found, unknown, unreachable = await list_latest_offsets(self._consumer._client, asked, self.request_timeout)
        if unreachable and not found and not await self._answers():
            raise KafkaConnectionError(f"no broker of {self.cluster} answered ListOffsets or a metadata request")
        self.unanswered.record(asked, unreachable)
        self.kafka_ok = True
        if unknown or unreachable:
            self._last_topic_refresh = 0.0
        by_topic, sampled_at = _by_topic(found), now_ms()
        counts = {topic: self.partition_counts[topic] for topic in by_topic if topic in self.partition_counts}
        await self.store.writes.add_broker_polls(self.cluster, by_topic, sampled_at, counts)
        if self.history is not None:
            await self.history.publish_samples(by_topic, sampled_at)
        moved = self._remember(found, sampled_at)
        if moved and self.changes is not None:  # lags changed: the evaluator re-checks the groups reading these
            await self.changes.publish_log_ends(self.cluster, moved)
        if unreachable:
            raise LeadersUnreachable(f"the leaders of {len(unreachable)} partitions did not answer ListOffsets")
        return found

    async def poll_log_starts(self, partitions: Iterable[TP]) -> dict[TP, int]:
        return await self.log_starts.poll(self._consumer._client, partitions, self.request_timeout, self.changes)

    # --- on demand, for commits that arrive before their partition's first sample -------------------------

    async def lookup(self, partitions: Iterable[TP]) -> dict[TP, int | None]:
        """Latest offsets for the partitions, asking Redis and then Kafka for the ones not known here yet."""
        wanted = set(partitions)
        missing = [tp for tp in wanted if tp not in self.latest]
        if missing:
            from_store = await self.store.reads.latest_broker_offsets(self.cluster, missing)
            self._remember({tp: off for tp, off in from_store.items() if off is not None}, now_ms())
            missing = [tp for tp in missing if tp not in self.latest]
        if missing:
            await self._lookup_in_kafka(missing)
        return {tp: self.latest.get(tp) for tp in wanted}

    async def _lookup_in_kafka(self, missing: list[TP]) -> None:
        try:
            # a partition not seen yet (the coordinator refuses commits for partitions that do not exist): look again
            if any(p >= self.partition_counts.get(topic, 0) for topic, p in missing):
                await self.refresh_topics()
            existing = [(t, p) for t, p in missing if p < self.partition_counts.get(t, 0)]
            await self.poll(existing)
        except LeadersUnreachable:
            # Their commits are dropped (`no_broker_offset`, as Burrow does) rather than holding every other commit
            # of the batch until that broker is back.
            return
        except (KafkaError, OSError) as exc:
            self.kafka_ok = False
            log.warning(
                "broker offsets for %s: lookup failed (%s); their commits wait for the next batch", self.cluster, exc
            )
            raise
