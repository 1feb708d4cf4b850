"""The one clock: wall-clock time in epoch milliseconds, the unit of every timestamp lagwatch stores or exchanges
(Kafka record and commit timestamps, Redis scores, event fields)."""

from __future__ import annotations

import time


def now_ms() -> int:
    return int(time.time() * 1000)
