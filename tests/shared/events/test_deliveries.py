"""InFlight keeps a record's delivery until its caller saw it settled; one nobody asks about again is dropped once
it is settled and old, never while it is still in flight."""

import asyncio

from lagwatch.shared.events import deliveries
from lagwatch.shared.events.deliveries import InFlight


async def test_a_delivery_is_kept_until_settled_and_an_old_unasked_one_is_dropped_once_done(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(deliveries.time, "monotonic", lambda: clock[0])
    loop = asyncio.get_running_loop()
    in_flight: InFlight[str] = InFlight()
    pending, failed = loop.create_future(), loop.create_future()
    in_flight.add("pending", pending)
    in_flight.add("failed", failed)
    failed.set_exception(RuntimeError("no leader"))
    assert in_flight.get("pending") is pending
    clock[0] += deliveries.FORGET_AFTER_S + 1
    in_flight.add("new", loop.create_future())  # adding looks for old settled deliveries
    assert in_flight.get("failed") is None  # settled, old and never asked about: dropped (its error retrieved)
    assert in_flight.get("pending") is pending  # still in flight: kept however old
    in_flight.settle("pending")
    assert in_flight.get("pending") is None


async def test_old_deliveries_are_looked_for_once_a_while_not_at_every_add(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(deliveries.time, "monotonic", lambda: clock[0])
    loop = asyncio.get_running_loop()
    in_flight: InFlight[str] = InFlight()
    done = loop.create_future()
    done.set_result(None)
    in_flight.add("settled", done)
    clock[0] += deliveries.FORGET_AFTER_S - 10
    in_flight.add("looks", loop.create_future())  # looks for old ones: none yet
    clock[0] += 20
    in_flight.add("does not look", loop.create_future())  # looked 20 s ago: "settled", old now, stays a while
    assert in_flight.get("settled") is done
    clock[0] += deliveries.FORGET_EVERY_S
    in_flight.add("looks again", loop.create_future())
    assert in_flight.get("settled") is None
