"""What every api handler shares. The api serves every cluster it knows: the configuration's plus any the ingest has
written to Redis (so one api can front ingests configured elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web
from redis.asyncio import Redis

from lagwatch.services.api.notices import DeletionNotices
from lagwatch.services.api.responses import ApiError
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.config import Config
from lagwatch.shared.runtime.kafka_probe import KafkaProbe
from lagwatch.shared.runtime.redis_client import connect, reply
from lagwatch.shared.windows.read_through_store import ReadThroughStore
from lagwatch.shared.windows.store import WindowStore
from lagwatch.shared.windows.stored_group import StoredGroup
from lagwatch.shared.windows.window import expired


@dataclass
class ApiContext:
    config: Config
    redis: Redis
    store: WindowStore
    notices: DeletionNotices
    kafka: KafkaProbe

    @classmethod
    def create(cls, config: Config) -> ApiContext:
        redis = connect(config.redis)  # connects on first use, so creating an app needs no running Redis
        return cls(
            config=config,
            redis=redis,
            store=WindowStore(redis, config.window()),
            notices=DeletionNotices(config),
            kafka=KafkaProbe(config.clusters),
        )

    async def clusters(self) -> list[str]:
        return sorted(set(self.config.clusters) | set(await self.store.reads.list_clusters()))

    async def knows_cluster(self, cluster: str) -> bool:
        return cluster in self.config.clusters or bool(await reply(self.redis.sismember(keys.CLUSTERS, cluster)))

    async def require_cluster(self, cluster: str) -> str:
        """The cluster's name when the api knows it; a 404 otherwise."""
        if await self.knows_cluster(cluster):
            return cluster
        raise ApiError(404, "cluster not found")

    async def judging_clock(self, cluster: str) -> int:
        """The instant a status computed now is judged at: the evaluator's clock (shared/windows/read_through.py)."""
        return (await ReadThroughStore(self.redis, cluster).judging_clock())[1]

    async def live_group(self, cluster: str, group: str, at_ms: int) -> StoredGroup | None:
        """The group's windows, or None when it is unknown or expired (NOTFOUND)."""
        stored = await self.store.reads.get_group(cluster, group)
        return (
            stored if stored is not None and not expired(stored.last_commit_ms, at_ms, self.config.window()) else None
        )


CONTEXT = web.AppKey("lagwatch_api_context", ApiContext)
