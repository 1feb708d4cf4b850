"""A blocking call on a thread of its own (shared/runtime/own_thread.py): its caller gets its result or its exception,
as from `asyncio.to_thread`; the loop's close does not wait for it (test_partitioner.py shows a stop that does not)."""

import pytest

from lagwatch.shared.runtime.own_thread import on_own_thread


async def test_a_call_on_its_own_thread_gives_its_result_or_raises_its_exception():
    assert await on_own_thread(sorted, [3, 1, 2]) == [1, 2, 3]
    with pytest.raises(ZeroDivisionError):
        await on_own_thread(divmod, 1, 0)
