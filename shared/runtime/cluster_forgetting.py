"""Forgetting a cluster lagwatch no longer watches (`lagwatch forget-cluster`).

Redis keeps what the services wrote across restarts, and the api lists every cluster Redis has data for: a cluster
removed from the configuration would stay listed, its groups frozen at their last status (a lag alert firing from
`/metrics`) until `expire-group`, and its incidents open for good. Burrow, restarted without it, shows nothing of it.

Forgetting deletes every key of the cluster (its own, its groups', its topics': `keys.cluster_keys_pattern`), takes
it out of `lw:clusters`, and records when in `keys.FORGOTTEN_CLUSTERS`: the notifiers close the incidents of it they
announced before then (services/notifier/scope.py), which nothing else would end any more. The notifier's own keys
are the notifier's to change. A cluster configured again later starts empty; its new incidents are not closed
(they begin after the forgetting).
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from lagwatch.shared.runtime.config import RedisConfig
from lagwatch.shared.runtime.presence import present
from lagwatch.shared.runtime.redis_client import connect, reply, text

DELETE_CHUNK = 500  # keys per round trip: a cluster may have millions, Redis stays responsive in between


@dataclass(frozen=True, slots=True)
class ClusterData:
    """What Redis keeps of one cluster: its groups (with windows, or only the evaluator's state of a group gone),
    its topics, and all its keys (those of both and the cluster's own)."""

    groups: int
    topics: int
    keys: int


async def _cluster_keys(redis: Redis, cluster: str) -> list[tuple[str, str]]:
    """(kind, key) of every key of the cluster, kind "g", "t" or "c" (SCAN: every primary of a Redis Cluster)."""
    names = [text(key) async for key in redis.scan_iter(match=keys.cluster_keys_pattern(cluster), count=1000)]
    return [(name.split(":")[1], name) for name in names]


async def survey(redis: Redis, cluster: str) -> ClusterData:
    """What forgetting the cluster would delete; nothing is changed."""
    return _counted(await _cluster_keys(redis, cluster))


def _counted(found: list[tuple[str, str]]) -> ClusterData:
    """Groups and topics counted once each (a group has up to ten keys, a topic three)."""
    groups = {key.rpartition(":")[0] for kind, key in found if kind == "g"}
    topics = {key.rpartition(":")[0] for kind, key in found if kind == "t"}
    return ClusterData(len(groups), len(topics), len(found))


async def ingest_running(redis: Redis, cluster: str) -> str | None:
    """The id of an ingest worker still polling the cluster (its poller lease is renewed while it runs), or None."""
    holder = await reply(redis.get(keys.poller_lease(cluster)))
    return None if holder is None else text(holder)


async def forget(redis: Redis, cluster: str, now_ms: int) -> ClusterData:
    """Delete the cluster's keys, take it off the clusters listed, and record the forgetting for the notifiers;
    returns what was deleted. Idempotent: interrupted, it is run again."""
    found = await _cluster_keys(redis, cluster)
    for start in range(0, len(found), DELETE_CHUNK):
        async with redis.pipeline(transaction=False) as pipe:  # a key per command: each may be on its own node
            for _, key in found[start : start + DELETE_CHUNK]:
                pipe.delete(key)
            await pipe.execute()
    await reply(redis.srem(keys.CLUSTERS, cluster))
    await reply(redis.hset(keys.FORGOTTEN_CLUSTERS, cluster, str(now_ms)))
    return _counted(found)


async def forgotten(redis: Redis) -> tuple[dict[str, int], dict[str, int]]:
    """(cluster -> when it was forgotten, cluster -> the forgetting whose incidents are closed everywhere), in ms."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.FORGOTTEN_CLUSTERS)
        pipe.hgetall(keys.FORGOTTEN_CLOSED)
        when, closed = await pipe.execute()
    return _instants(when), _instants(closed)


async def record_closed(redis: Redis, cluster: str, forgotten_at: int) -> None:
    """Every incident of the cluster announced before `forgotten_at` is closed for every subscription."""
    await reply(redis.hset(keys.FORGOTTEN_CLOSED, cluster, str(forgotten_at)))


def _instants(raw: dict[bytes, bytes]) -> dict[str, int]:
    """A hash of cluster -> ms, skipping what is not a number (written by hand: better ignored than fatal)."""
    out = {}
    for name, value in raw.items():
        try:
            out[text(name)] = int(text(value))
        except ValueError:
            continue
    return out


class StillRunning(Exception):
    """A service still writes the cluster: forgetting it now, the service would write it back."""


async def forget_cluster(config: RedisConfig, cluster: str, *, dry_run: bool) -> ClusterData:
    """What Redis keeps of the cluster, deleted (with `dry_run`, only counted); StillRunning while any of its ingest
    workers or evaluators runs."""
    redis = connect(config)
    try:
        if dry_run:
            return await survey(redis, cluster)
        await _refuse_while_running(redis, cluster)
        return await forget(redis, cluster, now_ms())
    finally:
        await redis.aclose()


async def _refuse_while_running(redis: Redis, cluster: str) -> None:
    # the poller's lease too: a worker of a release before presence holds it while it runs (a rolling upgrade)
    if (holder := await ingest_running(redis, cluster)) is not None:
        raise StillRunning(f"an ingest worker ({holder}) still polls cluster {cluster!r}: stop its services first")
    for service, name in (("ingest", "ingest worker"), ("evaluator", "evaluator instance")):
        if found := await present(redis, cluster, service):
            running = f"{len(found)} {name}{'s' if len(found) > 1 else ''} ({', '.join(found)})"
            raise StillRunning(f"{running} still running for cluster {cluster!r}: stop them first")
