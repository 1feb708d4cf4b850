"""Repeated lines from the Kafka client libraries, thinned.

While the brokers are away, aiokafka logs the same connection error about a hundred times a second in every
process: the one line that says what is wrong drowns, and log storage pays. A line of a throttled logger passes at
most once per `every` seconds for each logger, level and message template; the next one says how many were held back.

librdkafka (confluent-kafka's clients) logs through whichever of lagwatch's loggers a client was given, always with
one template (`LIBRDKAFKA_TEMPLATE`: facility, client name, text): its lines are told apart by facility and text with
the numbers masked (addresses, milliseconds), so "Connect to ... failed" repeats are thinned and other texts pass.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable

KAFKA_CLIENT_LOGGERS = ("aiokafka", "faust", "mode")  # mode: Faust's service framework
MAX_TEMPLATES = 1000  # templates remembered; past that the memory starts over (a burst passes once more)
LIBRDKAFKA_TEMPLATE = "%s [%s] %s"  # confluent-kafka's logger call: facility, client name, librdkafka's text
_NUMBERS = re.compile(r"\d+")


class RepeatThrottle(logging.Filter):
    def __init__(
        self, prefixes: Iterable[str], every: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.prefixes = tuple(prefixes)
        self.every = every
        self.clock = clock
        self._seen: dict[tuple[str, int, str], tuple[float, int]] = {}  # template -> (passed at, held since)

    def filter(self, record: logging.LogRecord) -> bool:
        key = _librdkafka_key(record)
        if key is None:
            if not record.name.startswith(self.prefixes):
                return True
            key = (record.name, record.levelno, str(record.msg))
        now = self.clock()
        passed_at, held = self._seen.get(key, (float("-inf"), 0))
        if now - passed_at < self.every:
            self._seen[key] = (passed_at, held + 1)
            return False
        if len(self._seen) >= MAX_TEMPLATES:
            self._seen.clear()
        self._seen[key] = (now, 0)
        if held:  # plain text appended: the template's own %-placeholders still take the record's args
            record.msg = f"{record.msg} [{held} more like this in the last {now - passed_at:.0f} s]"
        return True


def _librdkafka_key(record: logging.LogRecord) -> tuple[str, int, str] | None:
    """A librdkafka line's key (its facility and its text, numbers masked), or None for any other line."""
    args = record.args
    if record.msg != LIBRDKAFKA_TEMPLATE or not isinstance(args, tuple) or len(args) != 3:
        return None
    return record.name, record.levelno, f"{args[0]} {_NUMBERS.sub('#', str(args[2]))}"


def throttle_kafka_client_logs(every: float = 10.0) -> RepeatThrottle:
    """Thin the Kafka client libraries' repeated lines on every handler of the root logger."""
    throttle = RepeatThrottle(KAFKA_CLIENT_LOGGERS, every)
    for handler in logging.getLogger().handlers:
        handler.addFilter(throttle)
    return throttle
