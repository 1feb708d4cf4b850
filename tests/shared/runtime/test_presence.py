"""Which instances of a service run now (shared/runtime/presence.py), against the real Redis: an instance's word holds
for a while after each renewal, is taken back at its stop, and lapses by itself when it was killed."""

import asyncio

from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.presence import Presence, present
from tests.kafka_helpers import eventually

EVALUATOR = ("local", "evaluator")
KEY = keys.instances(*EVALUATOR)


async def test_a_running_instance_is_present_until_it_stops(redis):
    first, second = Presence(redis, *EVALUATOR, renew_s=0.05), Presence(redis, *EVALUATOR, renew_s=0.05)
    stopping = asyncio.Event()
    runs = [asyncio.create_task(p.keep_announcing(stopping)) for p in (first, second)]
    assert sorted(await eventually(lambda: _all_of(redis, 2))) == sorted([first.instance, second.instance])
    stopping.set()
    await asyncio.gather(*runs)
    assert await present(redis, *EVALUATOR) == []


async def test_a_killed_instance_lapses_and_is_cleared_by_the_next_announcement(redis):
    killed, alive = Presence(redis, *EVALUATOR, hold_ms=200), Presence(redis, *EVALUATOR)
    await killed.announce()  # and never again, nor withdrawn
    assert await present(redis, *EVALUATOR) == [killed.instance]
    await asyncio.sleep(0.3)
    assert await present(redis, *EVALUATOR) == []
    await alive.announce()
    assert await redis.zrange(KEY, 0, -1) == [alive.instance.encode()]  # the lapsed entry went


async def test_the_key_goes_with_the_longest_holding_word(redis):
    """Nothing is left in Redis once every instance is gone, and nothing goes before."""
    await Presence(redis, *EVALUATOR, hold_ms=5_000).announce()
    await Presence(redis, *EVALUATOR, hold_ms=200).announce()
    assert 4_000 < await redis.pttl(KEY) <= 5_000
    assert len(await present(redis, *EVALUATOR)) == 2


async def _all_of(redis, n: int) -> list[str] | None:
    found = await present(redis, *EVALUATOR)
    return found if len(found) == n else None


async def test_a_stop_that_cuts_short_the_withdrawal_a_stopping_began_still_withdraws(redis):
    """The service sets its stopping event, then stops its parts: the cancel may reach the renewal task at any step
    of its withdrawal, the ZREM in flight included (tried at each of the loop's first steps)."""
    for steps in range(8):
        presence = Presence(redis, *EVALUATOR)
        stopping = asyncio.Event()
        presence.start(stopping)
        await eventually(lambda: _all_of(redis, 1))
        stopping.set()
        for _ in range(steps):
            await asyncio.sleep(0)
        await presence.stop()
        assert await present(redis, *EVALUATOR) == [], steps
