"""What a worker makes sure of before it reads a commit: which Kafka cluster it reads (kafka_identity.py), the log
ends a commit's lag needs, and no group stored that the allow/deny lists now exclude."""

from __future__ import annotations

import functools
import logging

from lagwatch.services.ingest.batch_pipeline import Retrying
from lagwatch.services.ingest.broker_offsets import BrokerOffsets, LeadersUnreachable
from lagwatch.services.ingest.history_publisher import HistoryPublisher
from lagwatch.services.ingest.kafka_identity import KafkaIdentity
from lagwatch.shared.protocol.group_filter import GroupFilter
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.windows.changes import ChangePublisher

log = logging.getLogger(__name__)
PURGE_CHUNK = 1000  # groups per round trip when deleting those the allow/deny lists exclude


class StartUp:
    def __init__(
        self,
        identity: KafkaIdentity,
        broker_offsets: BrokerOffsets,
        changes: ChangePublisher,
        history: HistoryPublisher | None,
        group_filter: GroupFilter,
        retry: Retrying,
    ) -> None:
        self.cluster, self.store = broker_offsets.cluster, broker_offsets.store
        self.identity, self.broker_offsets, self.changes, self.history = identity, broker_offsets, changes, history
        self.group_filter, self.retry, self.stopping = group_filter, retry, retry.stopping

    async def run(self) -> None:
        verify = functools.partial(self.identity.verify, self._forget_kafka_data, self.stopping)
        await self.retry("checking which Kafka cluster this is", verify)
        await self._first_broker_poll()
        await self._purge_excluded_groups()

    async def _forget_kafka_data(self, recorded: str, seen: str) -> None:
        """The Kafka cluster behind the name was replaced (kafka_identity.py): forget the old one's groups and topics;
        the evaluator records the groups NOTFOUND, and the history's replay forgets the topics too."""
        groups, topics = await self.store.deletions.forget_kafka_data(self.cluster, PURGE_CHUNK)
        await self.changes.publish(self.cluster, [(g, "deleted") for g in groups])  # (notices hold 2,000 names each)
        if topics and self.history is not None:
            await self.history.publish_deletions(topics, now_ms())
        log.info(
            "ingest %s: forgot %d groups and %d topics of Kafka cluster %s",
            self.cluster,
            len(groups),
            len(topics),
            recorded,
        )

    async def _first_broker_poll(self) -> None:
        """Know the log-end offsets before the first commit needs one (retrying while Kafka or Redis is down). Some
        leaders away (an offline partition, a broker down with replication 1) do not hold the start: the commits of
        their partitions find the last log end stored in Redis, or wait for theirs, and the others go on."""

        async def first_poll() -> None:
            try:
                await self.broker_offsets.tick()
            except LeadersUnreachable:  # which ones was said as a warning
                log.info("ingest %s: starting with the log ends of the leaders that answered", self.cluster)

        if not self.stopping.is_set():
            await self.retry("the first broker-offset poll", first_poll)

    async def _purge_excluded_groups(self) -> None:
        """Groups stored before the allow/deny lists changed to exclude them leave Redis at start-up: their windows
        would otherwise drift to STOP until `expire-group`. The evaluator, told they were deleted, records them
        NOTFOUND (it also drops excluded groups itself, should only its configuration have changed)."""
        group_filter = self.group_filter
        if self.stopping.is_set() or not (group_filter.allowlist or group_filter.denylist):
            return
        groups = await self.retry("listing groups", lambda: self.store.reads.list_groups(self.cluster))
        excluded = [g for g in groups or () if not group_filter.accepts(g)]

        async def delete(chunk: list[str]) -> bool:
            await self.store.deletions.delete_groups(self.cluster, chunk)
            return True

        for start in range(0, len(excluded), PURGE_CHUNK):
            chunk = excluded[start : start + PURGE_CHUNK]
            if not await self.retry("deleting excluded groups", functools.partial(delete, chunk)):
                return  # stopping
            await self.changes.publish(self.cluster, [(group, "deleted") for group in chunk])
        if excluded:
            log.info("ingest %s: deleted %d groups the allow/deny lists exclude", self.cluster, len(excluded))
