"""Local infrastructure for `lagwatch dev up`: a Redis server and the Kafka mock cluster in its own process.

`local_infra` starts both (with lagwatch's topics) and stops them; `run_local_stack` is `lagwatch dev up
--no-demo`: just the two, until Ctrl-C. (The whole system with a demo workload is `demo_system.run_demo`.)

Addresses are handed on through `<state-dir>/env` (shell syntax: `REDIS_URL=...`, `KAFKA_BOOTSTRAP_SERVERS=...`,
`KAFKA_CONTROL_URL=...`), so other processes can `source` it or read it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from lagwatch.shared.local.mock_kafka import MockKafkaControl, start_mock_kafka_process, stop_process
from lagwatch.shared.local.offsets_topic_writer import DEFAULT_PARTITIONS, OFFSETS_TOPIC
from lagwatch.shared.local.redis_server import RedisServer

# Topics every local run needs: the coordinator's, and lagwatch's own (docs/architecture.md).
LOCAL_TOPICS = {OFFSETS_TOPIC: DEFAULT_PARTITIONS, "lagwatch.status": 6, "lagwatch.changes": 6, "lagwatch.dlq": 3}
ENV_FILE = "env"


@dataclass(frozen=True)
class LocalInfra:
    redis: RedisServer
    kafka: MockKafkaControl
    topics: Mapping[str, int]

    def env(self) -> dict[str, str]:
        return {
            "REDIS_URL": self.redis.url,
            "KAFKA_BOOTSTRAP_SERVERS": self.kafka.bootstrap,
            "KAFKA_CONTROL_URL": self.kafka.control_url,
        }

    def describe(self) -> str:
        topics = ", ".join(f"{t}[{n}]" for t, n in self.topics.items())
        return (
            f"  Redis:  {self.redis.url}   (data in {self.redis.dir}, append-only file on)\n"
            f"  Kafka:  {self.kafka.bootstrap}   (librdkafka mock cluster; topics: {topics})\n"
            f'  Kafka control API: {self.kafka.control_url}  (POST /topics {{"name", "partitions"}})'
        )


@contextlib.contextmanager
def local_infra(
    state_dir: Path,
    *,
    redis_port: int | None = None,
    kafka_port: int | None = None,
    extra_topics: Mapping[str, int] | None = None,
) -> Iterator[LocalInfra]:
    """Redis (data in `<state_dir>/redis`) and the Kafka mock (log in `<state_dir>/kafka`), stopped on exit."""
    topics = {**LOCAL_TOPICS, **(extra_topics or {})}
    redis = RedisServer(port=redis_port, dir=state_dir / "redis", appendonly=True)
    redis.start()
    kafka_proc = None
    try:
        kafka_proc, kafka = start_mock_kafka_process(state_dir / "kafka", topics, port=kafka_port)
        yield LocalInfra(redis, kafka, topics)
    finally:
        if kafka_proc is not None:
            stop_process(kafka_proc)
        redis.stop()


def write_env_file(state_dir: Path, env: Mapping[str, str]) -> Path:
    path = state_dir / ENV_FILE
    path.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    return path


def run_local_stack(state_dir: Path, *, redis_port: int | None = None, kafka_port: int | None = None) -> None:
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        with local_infra(state_dir, redis_port=redis_port, kafka_port=kafka_port) as infra:
            env_file = write_env_file(state_dir, infra.env())
            print(
                "lagwatch local stack is up (Ctrl-C stops it)\n"
                f"{infra.describe()}\n"
                f"  Addresses for other shells: source {env_file}",
                flush=True,
            )
            stop.wait()
            print("lagwatch local stack: stopping", flush=True)
    finally:
        (state_dir / ENV_FILE).unlink(missing_ok=True)
