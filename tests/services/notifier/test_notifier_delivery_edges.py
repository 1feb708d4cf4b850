"""Delivery edge cases against real receivers and a real Redis: a receiver that accepts but is slow to send (or
never sends) its response body, a delivery whose lease lapsed while its own worker was still sending it, and Redis
gone between a send and its record."""

import asyncio
import contextlib

from redis.asyncio import Redis

from lagwatch.devkit.redis_server import RedisServer
from lagwatch.shared.protocol import keys
from tests.kafka_helpers import eventually
from tests.services.notifier.test_notifier_delivery import config_for, dispatching, enqueue, open_event, outbox_empty
from tests.services.notifier.test_notifier_support import Receiver


@contextlib.asynccontextmanager
async def accepting_but_stalling(status: int):
    """An HTTP server that reads each request, answers its status line and headers at once, then never sends the
    body it announced; yields (url, the number of requests read so far as a one-element list)."""
    seen = [0]
    hangs: list[asyncio.Task] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")),
            0,
        )
        await reader.readexactly(length)
        seen[0] += 1
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: 100\r\n\r\n".encode())
        await writer.drain()
        hangs.append(asyncio.current_task())  # type: ignore[arg-type]
        await asyncio.sleep(3600)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/hook", seen
    finally:
        for task in hangs:
            task.cancel()
        server.close()


async def test_a_2xx_whose_body_never_comes_is_delivered_once_not_retried(redis_server, redis, kafka):
    """The receiver has the notification once it answered 200: a body stalling past the request timeout must
    not turn it into a timeout retried (a page sent again and again) and finally a dead letter."""
    async with accepting_but_stalling(200) as (url, seen):
        config = config_for(kafka, redis_server, [{"id": "hook", "url": url}], NOTIFIER__REQUEST_TIMEOUT="0.3")
        async with dispatching(config, dead_letters=False) as (outbox, _):
            await enqueue(outbox, open_event())
            await eventually(lambda: outbox_empty(redis))
            await asyncio.sleep(0.5)  # nothing more is sent
    assert seen[0] == 1


async def test_a_5xx_whose_body_never_comes_is_retried_as_the_5xx_it_is(redis_server, redis, kafka):
    async with accepting_but_stalling(503) as (url, seen):
        config = config_for(kafka, redis_server, [{"id": "hook", "url": url}], NOTIFIER__REQUEST_TIMEOUT="0.3")
        async with dispatching(config, dead_letters=False) as (outbox, _):
            delivery = await enqueue(outbox, open_event())

            async def failed_with_503() -> bool:
                raw = await redis.hget(keys.OUTBOX_DELIVERIES, delivery.id)
                return raw is not None and b'"last_error":"HTTP 503' in raw

            await eventually(failed_with_503)
    assert seen[0] >= 1


async def test_a_delivery_whose_lease_lapsed_while_it_is_sent_is_not_sent_again_by_its_own_worker(
    redis_server, redis, kafka
):
    """Renewals fail while Redis is away (or the clock jumps forward past the lease): the worker's next claim
    takes back the delivery it is still sending. It must not start a second, concurrent send of it."""
    async with Receiver(script=["hang"]) as receiver:
        subscriptions = [{"id": "hook", "url": receiver.url()}]
        config = config_for(kafka, redis_server, subscriptions, NOTIFIER__REQUEST_TIMEOUT="5", NOTIFIER__LEASE="6")
        async with dispatching(config, dead_letters=False) as (outbox, _):
            delivery = await enqueue(outbox, open_event())
            await receiver.wait_for(1)
            for _ in range(30):  # the lease runs out (renewals lost), for the claims of the next 0.6 s to see
                await redis.zadd(keys.OUTBOX_INFLIGHT, {delivery.id: 0}, xx=True)
                await asyncio.sleep(0.02)
            receiver.release()  # the first request is answered: 200
            await eventually(lambda: outbox_empty(redis))
            await asyncio.sleep(0.3)
    assert len(receiver.requests) == 1, [r.headers["X-Lagwatch-Attempt"] for r in receiver.requests]


async def test_a_delivery_sent_while_redis_goes_away_is_recorded_once_it_is_back_not_sent_again(tmp_path, kafka):
    """The receiver took the notification, then Redis was gone before the worker could take it out of the outbox.
    The worker records it once Redis is back; given up (as before), the delivery was claimed again once its lease
    had run out and sent a second time (a fault drill caught it: Redis restarted as an open went out)."""
    with RedisServer(dir=tmp_path / "redis", appendonly=True) as server:
        server.start()
        async with Receiver(script=["hang"]) as receiver:
            config = config_for(kafka, server, [{"id": "hook", "url": receiver.url()}])  # a 1 s lease
            async with dispatching(config, dead_letters=False) as (outbox, _):
                await enqueue(outbox, open_event())
                await receiver.wait_for(1)
                await asyncio.to_thread(server.stop)  # the AOF is flushed: the outbox comes back with it
                receiver.release()  # the request is answered (200) while Redis is away
                await asyncio.sleep(2)  # past the lease
                await asyncio.to_thread(server.start)
                async with contextlib.aclosing(Redis.from_url(server.url)) as redis:
                    await eventually(lambda: outbox_empty(redis), timeout=10)
                await asyncio.sleep(1.5)  # a claim of the lapsed lease would have sent it again by now
    assert len(receiver.requests) == 1, [r.headers["X-Lagwatch-Attempt"] for r in receiver.requests]
