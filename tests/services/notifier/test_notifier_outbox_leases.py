"""A claimed delivery's lease runs on Redis's clock (outbox.py, `CLAIM_DELIVERIES` and `RENEW_DELIVERY_LEASES`):
notifier instances on hosts whose clocks disagree by more than the lease still send each delivery once. Each worker
here is an `Outbox` whose clock (`now_ms`, what it claims and schedules with) is set an hour off."""

import asyncio

from lagwatch.services.notifier import outbox as outbox_module
from lagwatch.services.notifier.outbox import Delivery, Outbox, delivery_id
from lagwatch.shared.protocol import keys
from lagwatch.shared.runtime.clock import now_ms
from tests.services.notifier.test_notifier_support import typed

HOUR_MS = 3_600_000
LEASE_MS = 600


async def due_long_ago(outbox: Outbox) -> Delivery:
    """A delivery due two hours ago: due for every worker here, whatever its clock."""
    d = Delivery(delivery_id("e1", "hook"), "hook", "open", typed({"event_id": "e1"}), "e1", now_ms())
    assert await outbox.enqueue(d, due_at=now_ms() - 2 * HOUR_MS)
    return d


async def claimed_ids(outbox: Outbox, clock_offset_ms: int) -> list[str]:
    deliveries, _ = await outbox.claim(10, now=now_ms() + clock_offset_ms)
    return [d.id for d in deliveries]


async def test_a_worker_whose_clock_is_an_hour_ahead_does_not_take_a_delivery_another_is_sending(redis):
    sending, ahead = (Outbox(redis, lease_ms=LEASE_MS, seen_ttl_ms=60_000) for _ in range(2))
    d = await due_long_ago(sending)
    assert await claimed_ids(sending, 0) == [d.id]
    assert await claimed_ids(ahead, HOUR_MS) == []  # by its clock the lease ran out an hour ago; by Redis's it has not
    await asyncio.sleep(LEASE_MS / 1000 + 0.2)  # the sending worker died: no renewal
    assert await claimed_ids(ahead, HOUR_MS) == [d.id]  # taken over once the lease is over


async def test_a_worker_whose_clock_is_an_hour_behind_keeps_the_deliveries_it_renews(redis, monkeypatch):
    behind, other = (Outbox(redis, lease_ms=LEASE_MS, seen_ttl_ms=60_000) for _ in range(2))
    d = await due_long_ago(behind)
    assert await claimed_ids(behind, -HOUR_MS) == [d.id]
    monkeypatch.setattr(outbox_module, "now_ms", lambda: now_ms() - HOUR_MS)  # the clock its renewals would read
    for _ in range(4):  # renewed every third of the lease, past the first lease's end
        await behind.renew([d.id])
        assert await claimed_ids(other, 0) == []  # its renewals counted from an hour ago would be long over
        await asyncio.sleep(LEASE_MS / 3000)
    expiry = await redis.zscore(keys.OUTBOX_INFLIGHT, d.id)
    seconds, micros = await redis.time()
    assert 0 < expiry - (seconds * 1000 + micros // 1000) <= LEASE_MS
