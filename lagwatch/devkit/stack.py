"""Local infrastructure for `lagwatch dev up`: a Redis server and the Kafka mock cluster in its own process.

`local_infra` starts both (with lagwatch's topics) and stops them; `run_local_stack` is `lagwatch dev up
--no-demo`: just the two, until Ctrl-C. (The whole system with a demo workload is `demo_system.run_demo`.)

Addresses are handed on through `<state-dir>/env` (`REDIS_URL=...`, `KAFKA_BOOTSTRAP_SERVERS=...`,
`KAFKA_CONTROL_URL=...`, one a line), so other processes can read it or a shell load it (`shell_command`).

With a fixed `kafka_port`, Kafka can be restarted in place (`LocalInfra.stop_kafka`, `start_kafka`; the fault
drills do): same bootstrap and control addresses, its topics and seeded `groups` re-created, but empty — the mock
keeps records, committed offsets and group members in memory only. Redis restarts in place with its append-only
file (`LocalInfra.redis.restart()`).
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from lagwatch.devkit.mock_kafka import MockKafkaControl, start_mock_kafka_process, stop_process
from lagwatch.devkit.offsets_topic_writer import DEFAULT_PARTITIONS, OFFSETS_TOPIC
from lagwatch.devkit.redis_server import RedisServer

# Topics every local run needs: the coordinator's, and lagwatch's own (docs/architecture.md).
LOCAL_TOPICS = {OFFSETS_TOPIC: DEFAULT_PARTITIONS, "lagwatch.status": 6, "lagwatch.changes": 6, "lagwatch.dlq": 3}
ENV_FILE = "env"


@dataclass
class KafkaProcess:
    """The Kafka mock in its own process (`mock_kafka.serve`); with a fixed port, restartable at the same addresses."""

    state_dir: Path
    topics: Mapping[str, int]
    port: int | None = None
    groups: Sequence[str] = ()
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    control: MockKafkaControl | None = None

    def start(self) -> MockKafkaControl:
        # The control endpoint keeps its port across restarts too (the first start picks a free one).
        control_port = urlsplit(self.control.control_url).port if self.control is not None else None
        self.proc, self.control = start_mock_kafka_process(
            self.state_dir, self.topics, port=self.port, groups=self.groups, control_port=control_port
        )
        return self.control

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None


@dataclass(frozen=True)
class LocalInfra:
    redis: RedisServer
    kafka: MockKafkaControl
    topics: Mapping[str, int]
    kafka_process: KafkaProcess | None = field(default=None, repr=False, compare=False)

    def stop_kafka(self) -> None:
        """Stop the Kafka process: connections drop and everything it held is gone; `start_kafka` brings it back."""
        self._restartable_kafka().stop()

    def start_kafka(self) -> None:
        """Start Kafka again at the same addresses: its topics (and seeded groups) exist again, empty."""
        self._restartable_kafka().start()

    def _restartable_kafka(self) -> KafkaProcess:
        if self.kafka_process is None or self.kafka_process.port is None:
            raise RuntimeError("Kafka can be restarted in place only when it was started with a fixed kafka_port")
        return self.kafka_process

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
            f'  Kafka control API: {self.kafka.control_url}  (POST /topics {{"name", "partitions"}};'
            " POST /brokers/down, /brokers/up)"
        )


@contextlib.contextmanager
def local_infra(
    state_dir: Path,
    *,
    redis_port: int | None = None,
    kafka_port: int | None = None,
    extra_topics: Mapping[str, int] | None = None,
    groups: Sequence[str] = (),
) -> Iterator[LocalInfra]:
    """Redis (data in `<state_dir>/redis`) and the Kafka mock (log in `<state_dir>/kafka`), stopped on exit.
    `groups` are seeded in Kafka at each start, so their aiokafka members rejoin a restarted mock (mock_kafka.py)."""
    topics = {**LOCAL_TOPICS, **(extra_topics or {})}
    redis = RedisServer(port=redis_port, dir=state_dir / "redis", appendonly=True)
    redis.start()
    kafka = KafkaProcess(state_dir / "kafka", topics, kafka_port, tuple(groups))
    try:
        yield LocalInfra(redis, kafka.start(), topics, kafka)
    finally:
        kafka.stop()
        redis.stop()


def write_env_file(state_dir: Path, env: Mapping[str, str]) -> Path:
    path = state_dir / ENV_FILE
    path.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    return path


def shell_command(env_file: Path) -> str:
    """What another shell runs to have the addresses: exported (`set -a`), or `lagwatch` started from that shell
    would not see `LAGWATCH_CONFIG`, `REDIS_URL` or `KAFKA_BOOTSTRAP_SERVERS`, as a plain `source` leaves them."""
    return f"set -a; . {shlex.quote(str(env_file))}; set +a"


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
                f"  Addresses for other shells: {shell_command(env_file)}",
                flush=True,
            )
            stop.wait()
            print("lagwatch local stack: stopping", flush=True)
    finally:
        (state_dir / ENV_FILE).unlink(missing_ok=True)
