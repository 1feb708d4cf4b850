"""The ingest's leases in a real Redis: one holder at a time, renewed by it, handed on at its release; and each
worker's word on whether its commits are behind, which holds the log-end poller's samples (leases.py)."""

import asyncio

from lagwatch.services.ingest.leases import Lease, PollerLease
from lagwatch.shared.protocol import keys


async def test_a_lease_has_one_holder_who_renews_it_and_alone_hands_it_on(redis):
    first, second = Lease(redis, "lw:test:lease"), Lease(redis, "lw:test:lease")
    assert await first.take(10_000) and await first.take(10_000)  # taken, then renewed
    assert not await second.take(10_000)
    await second.release()  # not its own: nothing happens
    assert not await second.take(10_000)
    await first.release()
    assert await second.take(10_000)


async def test_a_worker_hears_another_is_behind_until_it_says_otherwise_stops_or_dies(redis):
    behind, poller = PollerLease(redis, "c1", 0.1), PollerLease(redis, "c1", 0.1)
    assert await behind.announce(True) is False  # nobody else is behind
    assert await poller.announce(False) is True
    await behind.announce(False)
    assert await poller.announce(False) is False
    await behind.announce(True)
    await behind.release()  # a stop withdraws its word
    assert await poller.announce(False) is False
    await behind.announce(True)
    await asyncio.sleep(0.4)  # a worker that died behind: its word lapses after three offset-refreshes
    assert await poller.announce(False) is False
    assert await redis.hlen(keys.ingest_behind("c1")) == 0  # and is struck


async def test_the_poller_lease_is_released_at_a_stop(redis):
    poller, follower = PollerLease(redis, "c1", 10.0), PollerLease(redis, "c1", 10.0)
    assert await poller.take(poller.ttl_ms)
    assert not await follower.take(follower.ttl_ms)
    await poller.release()
    assert await follower.take(follower.ttl_ms)
