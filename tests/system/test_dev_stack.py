"""`lagwatch dev up --no-demo`: Redis and Kafka (with lagwatch's topics) come up, are reachable, stop on Ctrl-C.
(The whole demo system is tests/system/test_demo_end_to_end.py.)"""

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import redis
from confluent_kafka import Consumer, Producer

LAGWATCH = shutil.which("lagwatch", path=str(Path(sys.executable).parent)) or "lagwatch"


def wait_for(path, proc, timeout=30):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "the stack did not come up"
        time.sleep(0.1)
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_dev_up_serves_redis_and_kafka_until_interrupted(tmp_path):
    proc = subprocess.Popen(
        [LAGWATCH, "dev", "up", "--no-demo", "--state-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        env = wait_for(tmp_path / "env", proc)
        assert redis.Redis.from_url(env["REDIS_URL"]).ping()
        producer = Producer({"bootstrap.servers": env["KAFKA_BOOTSTRAP_SERVERS"]})
        producer.produce("lagwatch.status", b"hello", partition=0)
        assert producer.flush(10) == 0
        consumer = Consumer(
            {
                "bootstrap.servers": env["KAFKA_BOOTSTRAP_SERVERS"],
                "group.id": "dev-up-test",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe(["lagwatch.status"])
        msg = None
        deadline = time.monotonic() + 20
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
        consumer.close()
        assert msg is not None and msg.value() == b"hello"
        metadata = Producer({"bootstrap.servers": env["KAFKA_BOOTSTRAP_SERVERS"]}).list_topics(timeout=10)
        assert len(metadata.topics["__consumer_offsets"].partitions) == 50
        assert {"lagwatch.status", "lagwatch.changes", "lagwatch.dlq"} <= set(metadata.topics)
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "Redis:" in out and "Kafka:" in out
    assert not (tmp_path / "env").exists()
