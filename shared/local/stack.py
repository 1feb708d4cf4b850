"""`lagwatch dev up`: local Redis and the local Kafka mock cluster, running until Ctrl-C.

Addresses are handed on through `<state-dir>/env` (shell syntax: `REDIS_URL=...`, `KAFKA_BOOTSTRAP_SERVERS=...`,
`KAFKA_CONTROL_URL=...`), so other processes can `source` it or read it.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

from lagwatch.shared.local.mock_kafka import start_mock_kafka_process, stop_process
from lagwatch.shared.local.offsets_topic_writer import DEFAULT_PARTITIONS, OFFSETS_TOPIC
from lagwatch.shared.local.redis_server import RedisServer

# Topics every local run needs: the coordinator's, and lagwatch's own status-change topic.
LOCAL_TOPICS = {OFFSETS_TOPIC: DEFAULT_PARTITIONS, "lagwatch.status": 6}
ENV_FILE = "env"


def run_local_stack(state_dir: Path, *, redis_port: int | None = None, kafka_port: int | None = None) -> None:
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    redis = RedisServer(port=redis_port, dir=state_dir / "redis", appendonly=True)
    redis.start()
    kafka_proc = None
    try:
        kafka_proc, kafka = start_mock_kafka_process(state_dir / "kafka", LOCAL_TOPICS, port=kafka_port)
        env = {
            "REDIS_URL": redis.url,
            "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap,
            "KAFKA_CONTROL_URL": kafka.control_url,
        }
        (state_dir / ENV_FILE).write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        print(
            "lagwatch local stack is up (Ctrl-C stops it)\n"
            f"  Redis:  {redis.url}   (data in {redis.dir}, append-only file on)\n"
            f"  Kafka:  {kafka.bootstrap}   (librdkafka mock cluster; topics: "
            f"{', '.join(f'{t}[{n}]' for t, n in LOCAL_TOPICS.items())})\n"
            f'  Kafka control API: {kafka.control_url}  (POST /topics {{"name", "partitions"}})\n'
            f"  Addresses for other shells: source {state_dir / ENV_FILE}",
            flush=True,
        )
        stop.wait()
    finally:
        print("lagwatch local stack: stopping", flush=True)
        if kafka_proc is not None:
            stop_process(kafka_proc)
        redis.stop()
        (state_dir / ENV_FILE).unlink(missing_ok=True)
