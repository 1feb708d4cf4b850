"""Topics' retention settings from the broker (`retention.ms`, `retention.bytes`, `cleanup.policy`), for retention
risk (shared/statuses/retention.py): a topic that deletes by age deletes its oldest unconsumed message once it is
`retention.ms` old, which the evaluator knows before the log start starts moving.

Read with DescribeConfigs every `topic-refresh`, beside the log starts. Where the broker does not answer it (no ACL,
a managed service that hides them, the Kafka mock), nothing is stored, the log start's pace alone decides, and the
broker is asked again after `RETRY_S`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

log = logging.getLogger(__name__)
REQUEST_TIMEOUT_S = 10.0
RETRY_S = 600.0  # a broker that refused DescribeConfigs is asked again after this
CHUNK = 500  # topics per DescribeConfigs call


@dataclass(frozen=True, slots=True)
class TopicRetention:
    ms: int | None = None  # deleted at this age (None: never by age — unlimited, or a compact-only topic)
    bytes: int | None = None  # per partition, the oldest segments go past this size (None: unlimited)


def parse_retention(entries: Mapping[str, str | None]) -> TopicRetention:
    """A topic's retention from its config entries (name -> value, as DescribeConfigs gives them). -1 is
    unlimited; a topic whose `cleanup.policy` lacks `delete` (compact only) deletes nothing by age or size."""
    policies = {p.strip() for p in (entries.get("cleanup.policy") or "delete").split(",")}
    if "delete" not in policies:
        return TopicRetention()
    return TopicRetention(_limit(entries.get("retention.ms")), _limit(entries.get("retention.bytes")))


def _limit(value: str | None) -> int | None:
    try:
        number = int(value) if value is not None else -1
    except ValueError:
        return None
    return number if number >= 0 else None


class TopicRetentionReader:
    """DescribeConfigs for topics, through one AdminClient (blocking calls run in a thread)."""

    def __init__(self, rdkafka_config: Mapping[str, Any]) -> None:
        self._config = dict(rdkafka_config)
        self._admin: AdminClient | None = None
        self._retry_at = 0.0  # monotonic time before which the broker is not asked (it refused last time)

    async def read(self, topics: Iterable[str]) -> dict[str, TopicRetention]:
        """The topics' retention; {} when the broker does not let us read it (then not asked for `RETRY_S`)."""
        names = sorted(topics)
        if not names or time.monotonic() < self._retry_at:
            return {}
        try:
            return await asyncio.to_thread(self._describe, names)
        except KafkaException as exc:
            self._retry_at = time.monotonic() + RETRY_S
            log.info("topic retention not readable (%s); the log start's pace alone is used", exc.args[0])
            return {}

    def _describe(self, names: list[str]) -> dict[str, TopicRetention]:
        if self._admin is None:
            self._admin = AdminClient(self._config, logger=log)  # librdkafka lines in our log format, thinned
        out: dict[str, TopicRetention] = {}
        for i in range(0, len(names), CHUNK):
            resources = [ConfigResource(ResourceType.TOPIC, name) for name in names[i : i + CHUNK]]
            futures = self._admin.describe_configs(resources, request_timeout=REQUEST_TIMEOUT_S)
            for resource, future in futures.items():
                try:
                    entries = future.result()
                except KafkaException as exc:
                    if _refused(exc):
                        raise
                    continue  # this topic only (deleted meanwhile, say): the others still count
                out[resource.name] = parse_retention({name: entry.value for name, entry in entries.items()})
        self._admin.poll(0)  # librdkafka's log lines wait in its queue until served
        return out


def _refused(exc: KafkaException) -> bool:
    """The broker does not answer DescribeConfigs at all (too old, the mock) or not to us (authorization)."""
    error = exc.args[0]
    name = error.name() if hasattr(error, "name") else ""
    return name in {"_UNSUPPORTED_FEATURE", "CLUSTER_AUTHORIZATION_FAILED", "_TIMED_OUT", "_TRANSPORT"}
