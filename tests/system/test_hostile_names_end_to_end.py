"""A consumer group named to forge log lines — a line break, a record of its own after it, terminal escape
sequences — goes through `lagwatch run evaluator` (its own process, logging as every service does: lagwatch/cli.py)
and its log still has one line per record, the name's control characters written as escapes."""

import re
import signal
import time

from lagwatch.shared.windows.store import WindowStore
from tests.kafka_helpers import CLUSTER, evaluator_process, make_config
from tests.services.evaluator.test_evaluator import STATUS_TOPIC, StatusTopic, commits

FORGED = "2030-01-01 00:00:00,000 INFO lagwatch.services.evaluator: forged"
GROUP = f"billing\n{FORGED}\x1b[2J\x1b[31m\r"
RECORD_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ \S+: ")


async def test_a_group_name_cannot_forge_a_line_in_a_services_log(kafka, redis_server, redis, tmp_path):
    kafka.create_topic(STATUS_TOPIC, 3)
    kafka.create_topic("lagwatch.changes", 4)
    store = WindowStore(redis, make_config(kafka.bootstrap, redis_server.url).window())
    now = int(time.time() * 1000)
    await store.writes.add_broker_offsets(CLUSTER, "orders", [100], sampled_at=now)
    await store.writes.add_commits(CLUSTER, commits(GROUP, [100], now - 1000), now_ms=now)
    log_path = tmp_path / "evaluator.log"
    with log_path.open("w") as log:
        evaluator = evaluator_process(kafka.bootstrap, redis_server.url, log, EVALUATOR__SWEEP_INTERVAL="0.5")
        try:
            async with StatusTopic(kafka.bootstrap) as topic:
                assert await topic.until(GROUP, 1, timeout=60) == [("NOTFOUND", "OK")]  # evaluated, and said so
        finally:
            evaluator.send_signal(signal.SIGTERM)
            evaluator.wait(timeout=30)
    raw = log_path.read_bytes()
    assert b"\x1b" not in raw and b"\r" not in raw
    lines = raw.decode().splitlines()
    quoting = [line for line in lines if "forged" in line]
    assert quoting, lines  # the evaluator's line naming the group's new status
    assert all(RECORD_LINE.match(line) and "billing\\n2030-01-01" in line for line in quoting), quoting
    assert not any(line.startswith(FORGED) for line in lines)
    assert evaluator.returncode == 0, lines[-20:]
