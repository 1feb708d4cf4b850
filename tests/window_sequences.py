"""Random commit sequences for the agreement tests of the window's implementations (the pure one, the compiled one)."""

from __future__ import annotations

import random
from collections.abc import Iterator

from lagwatch.shared.windows.window import ADMIN_ORDERS_FROM

SECOND = 1000


def switching_sources(rng: random.Random, t0: int, steps: int) -> Iterator[tuple[int, int, int]]:
    """(order, timestamp, offset) of commits whose source switches between the admin poller (orders from
    ADMIN_ORDERS_FROM, stamped when seen) and the offsets topic (positions, some read again, stamped by the
    coordinator up to 30 s before the poller saw them and 15 s after), phase by phase, the offsets mostly rising."""
    admin = rng.random() < 0.7
    position, offset = rng.randint(0, 20), rng.randint(0, 50)
    for step in range(steps):
        if rng.random() < 0.15:
            admin = not admin
        offset = max(0, offset + rng.randint(-5, 20))
        now = t0 + step * SECOND
        if admin:
            yield ADMIN_ORDERS_FROM + step, now, offset
            continue
        position += rng.randint(1, 3)
        order = position if rng.random() < 0.8 else rng.randint(0, position)
        yield order, now + rng.randint(-30, 15) * SECOND, offset
