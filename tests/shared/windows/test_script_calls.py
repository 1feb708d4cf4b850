"""Many calls of one script in one round trip (`shared/windows/script_calls.py`), on a real Redis server."""

import pytest
from redis.exceptions import ResponseError

from lagwatch.shared.windows.script_calls import eval_many

INCREMENT = "return redis.call('INCRBY', KEYS[1], ARGV[1])"


async def test_each_call_runs_once_in_order_even_when_redis_lost_the_script(redis):
    assert await eval_many(redis, INCREMENT, [(1, "a", 1), (1, "b", 5)]) == [1, 5]
    await redis.script_flush()  # as after a Redis restart: every call is refused, then re-run once loaded
    assert await eval_many(redis, INCREMENT, [(1, "a", 1), (1, "b", 5), (1, "a", 10)]) == [2, 10, 12]
    assert await redis.mget("a", "b") == [b"12", b"10"]


async def test_no_calls_send_nothing_and_a_failing_call_raises(redis):
    assert await eval_many(redis, "return redis.call('NOSUCHCOMMAND')", []) == []
    with pytest.raises(ResponseError):
        await eval_many(redis, INCREMENT, [(1, "a", 1), (1, "a", "not a number")])
    assert await redis.get("a") == b"1"  # the calls before it ran
