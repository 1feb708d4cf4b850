"""The embedded local infrastructure: librdkafka's mock Kafka cluster and a real redis-server."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient

from lagwatch.devkit import redis_server as redis_server_module
from lagwatch.devkit import stack
from lagwatch.devkit.mock_kafka import (
    STATE_FILE_NAME,
    MockKafkaCluster,
    MockKafkaError,
    start_mock_kafka_process,
    stop_process,
)
from lagwatch.devkit.redis_server import RedisServer, RedisServerError
from tests.net_helpers import free_port

# -- helpers -------------------------------------------------------------------------------------


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _partition_counts(bootstrap: str) -> dict[str, int]:
    # All-topics metadata: asking for one named topic could auto-create it on the mock.
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {name: len(topic.partitions) for name, topic in metadata.topics.items()}


def _produce(bootstrap: str, topic: str, count: int, partitions: int, **conf: object) -> list[int]:
    """Produce `count` records round-robin over partitions; returns the delivered offsets."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **conf})
    offsets: list[int] = []

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        assert err is None, err
        offsets.append(msg.offset())  # type: ignore[attr-defined]

    for i in range(count):
        producer.produce(
            topic, value=f"v{i}".encode(), key=f"k{i}".encode(), partition=i % partitions, on_delivery=on_delivery
        )
    assert producer.flush(10) == 0
    return offsets


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def cluster() -> Iterator[MockKafkaCluster]:
    with MockKafkaCluster() as mock:
        yield mock


# -- in-process mock cluster ---------------------------------------------------------------------


def test_topics_have_exact_partition_counts(cluster: MockKafkaCluster) -> None:
    cluster.create_topic("one", 1)
    cluster.create_topic("seven", 7)
    cluster.create_topic("seven", 7)  # same count again: a no-op

    counts = _partition_counts(cluster.bootstrap)

    assert counts["one"] == 1
    assert counts["seven"] == 7
    assert cluster.topics() == counts


def test_create_topic_rejects_conflicts_and_bad_counts(cluster: MockKafkaCluster) -> None:
    cluster.create_topic("t", 3)
    with pytest.raises(MockKafkaError, match="already exists with 3 partitions"):
        cluster.create_topic("t", 4)
    with pytest.raises(ValueError):
        cluster.create_topic("zero", 0)


def test_delete_topic_removes_it_from_metadata(cluster: MockKafkaCluster) -> None:
    cluster.create_topic("doomed", 2)
    cluster.create_topic("kept", 1)
    assert "doomed" in _partition_counts(cluster.bootstrap)

    cluster.delete_topic("doomed")

    counts = _partition_counts(cluster.bootstrap)
    assert "doomed" not in counts
    assert counts["kept"] == 1
    with pytest.raises(MockKafkaError, match="Unknown topic"):
        cluster.delete_topic("doomed")


def test_start_is_idempotent_and_stop_releases_the_port() -> None:
    mock = MockKafkaCluster()
    with pytest.raises(MockKafkaError, match="not started"):
        _ = mock.bootstrap
    mock.start()
    bootstrap = mock.bootstrap
    mock.start()
    assert mock.bootstrap == bootstrap
    port = int(bootstrap.rsplit(":", 1)[1])
    assert _port_open(port)

    mock.stop()
    mock.stop()

    assert not mock.running
    assert not _port_open(port)


def test_confluent_produce_consume_and_commit_round_trip(cluster: MockKafkaCluster) -> None:
    topic, group = _unique("orders"), _unique("group")
    cluster.create_topic(topic, 3)
    assert sorted(_produce(cluster.bootstrap, topic, 9, 3)) == [0, 0, 0, 1, 1, 1, 2, 2, 2]

    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        values = []
        deadline = time.monotonic() + 10
        while len(values) < 9 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
        assert sorted(values) == sorted(f"v{i}".encode() for i in range(9))

        consumer.commit(asynchronous=False)
        committed = consumer.committed([CKTopicPartition(topic, p) for p in range(3)], timeout=10)
        assert {tp.partition: tp.offset for tp in committed} == {0: 3, 1: 3, 2: 3}
        low, high = consumer.get_watermark_offsets(CKTopicPartition(topic, 0), timeout=10)
        assert (low, high) == (0, 3)
    finally:
        consumer.close()


async def test_aiokafka_produce_fetch_and_commit_round_trip(cluster: MockKafkaCluster) -> None:
    topic, group = _unique("events"), _unique("group")
    cluster.create_topic(topic, 2)

    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap)
    await producer.start()
    try:
        for i in range(6):
            await producer.send_and_wait(topic, f"a{i}".encode(), partition=i % 2)
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=cluster.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        values: list[bytes] = []
        deadline = time.monotonic() + 10
        while len(values) < 6 and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=200)
            values += [record.value for records in batches.values() for record in records]
        assert sorted(values) == sorted(f"a{i}".encode() for i in range(6))

        await consumer.commit()
        assert [await consumer.committed(TopicPartition(topic, p)) for p in range(2)] == [3, 3]
        assert await consumer.end_offsets([TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): 3}
    finally:
        await consumer.stop()


def test_fixed_port_cluster_serves_groups_through_the_forwarder() -> None:
    port = free_port()
    with MockKafkaCluster(port=port) as mock:
        assert mock.bootstrap == f"127.0.0.1:{port}"
        metadata = AdminClient({"bootstrap.servers": mock.bootstrap}).list_topics(timeout=10)
        # Clients must be told about the fixed address, not the mock's ephemeral one.
        assert [(b.host, b.port) for b in metadata.brokers.values()] == [("127.0.0.1", port)]

        mock.create_topic("fixed", 2)
        _produce(mock.bootstrap, "fixed", 4, 2)
        consumer = Consumer(
            {"bootstrap.servers": mock.bootstrap, "group.id": _unique("g"), "enable.auto.commit": False}
        )
        try:
            offsets = [CKTopicPartition("fixed", p, 2) for p in range(2)]
            consumer.commit(offsets=offsets, asynchronous=False)
            committed = consumer.committed([CKTopicPartition("fixed", p) for p in range(2)], timeout=10)
            assert [tp.offset for tp in committed] == [2, 2]
        finally:
            consumer.close()
    assert not _port_open(port)


# -- standalone process --------------------------------------------------------------------------


def test_process_mode_serves_and_controls_topics(tmp_path: Path) -> None:
    proc, control = start_mock_kafka_process(tmp_path, {"lag-events": 3, "alerts": 1})
    try:
        assert control.pid == proc.pid
        assert control.health()["status"] == "ok"
        assert _partition_counts(control.bootstrap) == {"lag-events": 3, "alerts": 1}

        control.create_topic("added", 5)
        control.create_topic("added", 5)
        assert _partition_counts(control.bootstrap)["added"] == 5
        assert _produce(control.bootstrap, "added", 1, 5) == [0]

        with pytest.raises(MockKafkaError, match=r"400.*already exists"):
            control.create_topic("added", 2)
        with pytest.raises(MockKafkaError, match="400"):
            control.create_topic("bad", 0)

        control.delete_topic("alerts")
        assert control.topics() == {"lag-events": 3, "added": 5}
    finally:
        assert stop_process(proc) == 0
    assert not (tmp_path / STATE_FILE_NAME).exists()


def test_process_start_failure_reports_log(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(MockKafkaError, match="cannot listen"):
            start_mock_kafka_process(tmp_path, {}, port=port, timeout=15)


async def test_killed_process_restarts_on_the_same_fixed_port(tmp_path: Path) -> None:
    port, topic, group = free_port(), "lag-events", _unique("svc")
    # Seeding the group lets the aiokafka consumer below rejoin after the restart (see module doc).
    proc, control = start_mock_kafka_process(tmp_path, {topic: 2}, port=port, groups=[group])
    restarted = None
    producer = AIOKafkaProducer(bootstrap_servers=control.bootstrap)
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=control.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=2000,
        heartbeat_interval_ms=300,
    )
    await producer.start()
    await consumer.start()
    try:
        await producer.send_and_wait(topic, b"before", partition=1)
        assert await _consume_one(consumer) == b"before"

        proc.kill()  # a crash: no cleanup, stale state file left behind
        proc.wait()
        restarted, control2 = start_mock_kafka_process(tmp_path, {topic: 2}, port=port, groups=[group])

        assert control2.bootstrap == control.bootstrap == f"127.0.0.1:{port}"
        # The same long-lived clients reconnect; the new cluster starts empty.
        sent = await producer.send_and_wait(topic, b"after", partition=1)
        assert sent.offset == 0
        assert await _consume_one(consumer) == b"after"
        await consumer.commit()
        assert await consumer.committed(TopicPartition(topic, 1)) == 1
        assert control2.topics() == {topic: 2}
    finally:
        await consumer.stop()
        await producer.stop()
        stop_process(proc)
        if restarted is not None:
            assert stop_process(restarted) == 0


async def _consume_one(consumer: AIOKafkaConsumer, timeout: float = 10) -> bytes:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batches = await consumer.getmany(timeout_ms=200, max_records=1)
        for records in batches.values():
            return records[0].value
    raise AssertionError("no record consumed")


# -- redis-server --------------------------------------------------------------------------------


def test_redis_start_ping_stop_leaves_no_process() -> None:
    server = RedisServer()
    server.start()
    pid, port = server.pid, server.port
    assert pid is not None
    assert server.url == f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(server.url)
    assert client.ping()
    client.close()

    server.close()

    assert not _pid_alive(pid)
    assert not _port_open(port)
    assert not server.dir.exists()


def test_redis_restart_with_appendonly_keeps_data() -> None:
    with RedisServer(appendonly=True) as server:
        client = redis.Redis.from_url(server.url)
        client.set("lag:orders", "42")
        old_pid, port = server.pid, server.port

        server.restart()

        assert (server.port, server.running) == (port, True)
        assert server.pid != old_pid
        assert redis.Redis.from_url(server.url).get("lag:orders") == b"42"


def test_redis_without_appendonly_restarts_empty(tmp_path: Path) -> None:
    with RedisServer(dir=tmp_path) as server:
        redis.Redis.from_url(server.url).set("k", "v")
        server.restart()
        assert redis.Redis.from_url(server.url).get("k") is None
    assert tmp_path.exists()  # a given directory is never removed


def test_redis_port_conflict_error_includes_log_tail() -> None:
    with RedisServer() as first, pytest.raises(RedisServerError, match="Address already in use"):
        RedisServer(port=first.port).start()


def test_redis_missing_binary_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAGWATCH_REDIS_SERVER", "/nonexistent/redis-server")
    with pytest.raises(RedisServerError, match="LAGWATCH_REDIS_SERVER"):
        RedisServer().start()

    monkeypatch.delenv("LAGWATCH_REDIS_SERVER")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(redis_server_module, "_FALLBACK_DIRS", ())
    with pytest.raises(RedisServerError, match="apt-get install -y redis-server"):
        RedisServer().start()


def test_the_banners_shell_command_exports_the_addresses(tmp_path: Path) -> None:
    """`lagwatch` run from the other shell must see them: a plain `source` of the file sets unexported variables."""
    env_file = stack.write_env_file(tmp_path, {"REDIS_URL": "redis://127.0.0.1:1/0", "LAGWATCH_CONFIG": "/x/demo.yaml"})
    clean = {"PATH": os.environ["PATH"]}
    shell = subprocess.run(
        ["bash", "-c", f"{stack.shell_command(env_file)}; exec env"], env=clean, capture_output=True, text=True
    )
    exported = shell.stdout.splitlines()
    assert "REDIS_URL=redis://127.0.0.1:1/0" in exported and "LAGWATCH_CONFIG=/x/demo.yaml" in exported
