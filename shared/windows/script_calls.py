"""Many calls of one of the windows' Lua scripts (`scripts.py`) in one round trip."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError

from lagwatch.shared.runtime.redis_client import reply


async def eval_many(redis: Redis, source: str, calls: list[tuple[Any, ...]]) -> list[Any]:
    """Many calls of one script, each `(numkeys, *keys, *args)`, in one round trip: a pipeline on a single
    server; concurrent calls on a cluster, whose redis-py client cannot pipeline scripts. EVALSHA straight
    away (redis-py's script objects ask SCRIPT EXISTS first, a round trip), loading the script only when Redis
    lacks it: the calls refused for it are re-run, the others are not run twice."""
    if not calls:
        return []
    sha = hashlib.sha1(source.encode()).hexdigest()
    results = await _eval_each(redis, sha, calls)
    missing = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
    if missing:
        await redis.script_load(source)
        for i, result in zip(missing, await _eval_each(redis, sha, [calls[i] for i in missing]), strict=True):
            results[i] = result
    for result in results:
        if isinstance(result, Exception):
            raise result
    return results


async def _eval_each(redis: Redis, sha: str, calls: list[tuple[Any, ...]]) -> list[Any]:
    if isinstance(redis, RedisCluster):
        replies = (reply(redis.evalsha(sha, *c)) for c in calls)
        return list(await asyncio.gather(*replies, return_exceptions=True))
    async with redis.pipeline(transaction=False) as pipe:
        for call in calls:
            pipe.evalsha(sha, *call)
        return await pipe.execute(raise_on_error=False)
