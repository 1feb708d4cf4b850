"""A blocking call on a thread of its own (shared/runtime/own_thread.py): its caller gets its result or its exception,
as from `asyncio.to_thread`; the loop's close does not wait for it (test_partitioner.py shows a stop that does not)."""

import asyncio
import gc
import socket
import time
import weakref

import pytest

from lagwatch.shared.runtime.own_thread import on_own_thread


async def test_a_call_on_its_own_thread_gives_its_result_or_raises_its_exception():
    assert await on_own_thread(sorted, [3, 1, 2]) == [1, 2, 3]
    with pytest.raises(ZeroDivisionError):
        await on_own_thread(divmod, 1, 0)


def test_a_call_its_caller_left_does_not_keep_what_it_was_on_once_it_ends():
    """The caller cancelled and its loop never run again (a stopped service's, a finished test's): the call's outcome
    waits in that loop for ever, and used to hold what the call was on through its traceback (a librdkafka client,
    which then went on retrying its brokers, and reached a later test's Kafka on a reused port)."""
    client, peer = socket.socketpair()
    client.settimeout(0.3)  # the call raises, from C, after this long
    held = weakref.ref(client)
    loop = asyncio.new_event_loop()
    try:
        caller = loop.create_task(on_own_thread(client.recv, 1))
        loop.run_until_complete(asyncio.sleep(0.05))  # the call is under way on its thread
        caller.cancel()
        loop.run_until_complete(asyncio.gather(caller, return_exceptions=True))
        del caller, client
        time.sleep(0.6)  # the call ended meanwhile; its outcome is queued to a loop that does not run
        gc.collect()
        assert held() is None
    finally:
        loop.close()
        peer.close()
