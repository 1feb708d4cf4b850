"""The Kafka client libraries' repeated lines, thinned (shared/runtime/log_throttle.py)."""

import logging

from lagwatch.shared.runtime.log_throttle import RepeatThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def record(name: str, msg: str, *args, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_a_repeated_line_passes_once_per_interval_and_then_says_how_many_were_held():
    clock = Clock()
    throttle = RepeatThrottle(["aiokafka"], every=10, clock=clock)
    passed = []
    for i in range(100):  # a hundred a second, as aiokafka logs while the brokers are away
        clock.now += 0.01
        line = record("aiokafka.conn", "Unable connect to %s: %s", f"node-{i % 3}", "refused")
        if throttle.filter(line):
            passed.append(line.getMessage())
    assert passed == ["Unable connect to node-0: refused"]
    clock.now += 10
    line = record("aiokafka.conn", "Unable connect to %s: %s", "node-1", "refused")
    assert throttle.filter(line)
    assert line.getMessage() == "Unable connect to node-1: refused [99 more like this in the last 11 s]"


def test_other_templates_levels_and_loggers_pass_on_their_own():
    throttle = RepeatThrottle(["aiokafka"], every=10, clock=Clock())
    assert throttle.filter(record("aiokafka.conn", "Unable connect to %s", "a"))
    assert throttle.filter(record("aiokafka.conn", "Unable connect to %s", "a", level=logging.WARNING))
    assert throttle.filter(record("aiokafka.cluster", "Unable connect to %s", "a"))
    assert throttle.filter(record("aiokafka.conn", "Metadata refresh failed"))
    for _ in range(5):  # lagwatch's own lines are never thinned
        assert throttle.filter(record("lagwatch.services.ingest", "Kafka unreachable"))


def test_librdkafkas_lines_are_told_apart_by_facility_and_text_whatever_logger_carries_them():
    """confluent-kafka logs every librdkafka line with one template through the logger its client was given:
    repeats of a text (numbers aside) are thinned, other texts and facilities pass, lagwatch's own lines too."""
    clock = Clock()
    throttle = RepeatThrottle(["aiokafka"], every=10, clock=clock)

    def librdkafka(fac: str, text: str) -> logging.LogRecord:
        return record("lagwatch.shared.windows.changes", "%s [%s] %s", fac, "lagwatch#producer-1", text)

    refused = "[thrd:10.0.0.{n}:9092/bootstrap]: Connect to ipv4#10.0.0.{n}:9092 failed (after {n}ms in state CONNECT)"
    passed = [throttle.filter(librdkafka("FAIL", refused.format(n=n))) for n in range(155)]
    assert passed.count(True) == 1
    assert throttle.filter(librdkafka("FAIL", "[thrd:main]: SSL handshake failed"))
    assert throttle.filter(librdkafka("ERROR", refused.format(n=1)))
    assert throttle.filter(record("lagwatch.shared.windows.changes", "change notices not sent: %s", "x"))
    assert throttle.filter(record("lagwatch.shared.windows.changes", "change notices not sent: %s", "x"))
    clock.now += 10
    line = librdkafka("FAIL", refused.format(n=7))
    assert throttle.filter(line) and line.getMessage().endswith("[154 more like this in the last 10 s]")
