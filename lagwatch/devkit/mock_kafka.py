"""librdkafka's mock cluster as the local Kafka for tests and the demo.

The librdkafka inside the confluent-kafka wheel contains a mock cluster: a real Kafka wire-protocol server on
localhost (produce, fetch, list offsets, consumer groups, offset commits), driven here through ctypes.
`MockKafkaCluster` runs it in-process; `python -m lagwatch.devkit.mock_kafka` (`start_mock_kafka_process`) runs it in
its own process with an HTTP control endpoint (`MockKafkaControl`), so Kafka can be killed, restarted, or have its
brokers taken down and up (`POST /brokers/down`, `/brokers/up`: an outage that keeps the data).

Fixed ports: the mock binds every broker to an ephemeral port (`rd_kafka_mock_broker_set_host_port` only changes the
*advertised* address), so a fixed `port` is served by a TCP forwarder in front of each broker (broker i at
`port + i - 1`), advertised, so clients reconnect to the same address after a restart. A restarted cluster is empty.

Mock behaviours that differ from real Kafka (verified with librdkafka 2.16):

* A Metadata request that names an unknown topic with auto-creation allowed (librdkafka and
  aiokafka *producers* do this) creates it with 4 partitions.  List all topics instead.
* No CreateTopics/ListGroups/DescribeGroups: topics come from this module, lag tooling must read
  committed offsets with OffsetFetch (`committed()`), not list groups.
* Once a consumer group exists (any member ever joined it, or it was seeded), OffsetCommits that
  carry no member id - "simple" commits from an `assign()`-only consumer - fail with
  UNKNOWN_MEMBER_ID.  Simple commits to a group nobody has joined work.
* Heartbeats for a group the mock does not know fail with GROUP_ID_NOT_FOUND, which aiokafka
  treats as fatal, so after a restart an aiokafka group member is stuck unless its group was
  seeded (`groups=`/`--group`); it then gets UNKNOWN_MEMBER_ID and rejoins in about a second.
  librdkafka consumers rejoin either way.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import glob
import importlib.util
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Self, cast
from urllib.parse import quote, unquote

from lagwatch.devkit.processes import log_tail, stop_process

_ERR_TOPIC_ALREADY_EXISTS = 36
_RD_KAFKA_PRODUCER = 1
_ERRSTR_SIZE = 512
LOG_LEVEL = 3  # librdkafka syslog level: error, hiding the notices the mock prints for every client hiccup
STATE_FILE_NAME = "mock_kafka.json"
LOG_FILE_NAME = "mock_kafka.log"


class MockKafkaError(RuntimeError):
    """The mock cluster (or its control endpoint) could not do what was asked."""


def find_librdkafka() -> Path:
    """The librdkafka shared library: `$LAGWATCH_LIBRDKAFKA`, else the confluent-kafka wheel's copy (the version it
    was tested with, always with the mock API), else the system's."""
    override = os.environ.get("LAGWATCH_LIBRDKAFKA")
    if override:
        if not Path(override).is_file():
            raise MockKafkaError(f"$LAGWATCH_LIBRDKAFKA points to {override!r}, which does not exist")
        return Path(override)
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is None or not spec.submodule_search_locations:
        raise MockKafkaError(
            "confluent-kafka is not installed; its wheel ships the librdkafka used as local Kafka "
            "(pip install 'confluent-kafka>=2.3,<3')"
        )
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    # auditwheel puts vendored libraries next to the package (Linux); delocate inside it (macOS).
    patterns = [
        package_dir.parent / "confluent_kafka.libs" / "librdkafka*.so*",
        package_dir / ".dylibs" / "librdkafka*.dylib",
        package_dir / "librdkafka*",
    ]
    for pattern in patterns:
        if matches := sorted(glob.glob(str(pattern))):
            return Path(matches[0])
    if system := ctypes.util.find_library("rdkafka"):
        return Path(system)
    raise MockKafkaError(f"no librdkafka found in the confluent-kafka installation at {package_dir}")


@functools.cache
def _lib() -> ctypes.CDLL:
    """librdkafka with every function we call declared: without argtypes ctypes would truncate 64-bit pointers."""
    lib = ctypes.CDLL(str(find_librdkafka()))
    vp, cp, i32, err = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int
    signatures: dict[str, tuple[list[Any], Any]] = {
        "rd_kafka_conf_new": ([], vp),
        "rd_kafka_conf_set": ([vp, cp, cp, cp, ctypes.c_size_t], ctypes.c_int),
        "rd_kafka_conf_destroy": ([vp], None),
        "rd_kafka_new": ([ctypes.c_int, vp, cp, ctypes.c_size_t], vp),
        "rd_kafka_destroy": ([vp], None),
        "rd_kafka_err2str": ([err], cp),
        "rd_kafka_mock_cluster_new": ([vp, ctypes.c_int], vp),
        "rd_kafka_mock_cluster_destroy": ([vp], None),
        "rd_kafka_mock_cluster_bootstraps": ([vp], cp),
        "rd_kafka_mock_set_controller_id": ([vp, i32], err),
        "rd_kafka_mock_group_initial_rebalance_delay_ms": ([vp, i32], err),
        "rd_kafka_mock_topic_create": ([vp, cp, ctypes.c_int, ctypes.c_int], err),
        "rd_kafka_mock_topic_delete": ([vp, cp], err),
        "rd_kafka_mock_broker_set_down": ([vp, i32], err),
        "rd_kafka_mock_broker_set_up": ([vp, i32], err),
        "rd_kafka_mock_partition_set_leader": ([vp, cp, i32, i32], err),
        "rd_kafka_mock_broker_set_host_port": ([vp, i32, cp, ctypes.c_int], None),
        "rd_kafka_mock_coordinator_set": ([vp, cp, cp, i32], err),
    }
    for name, (argtypes, restype) in signatures.items():
        try:
            func = getattr(lib, name)
        except AttributeError as exc:
            raise MockKafkaError(f"{lib._name} lacks {name}; librdkafka >= 2.3 is required") from exc
        func.argtypes = argtypes
        func.restype = restype
    return lib


def _check(code: int, what: str) -> None:
    if code:
        raw = _lib().rd_kafka_err2str(code)
        raise MockKafkaError(f"{what}: {raw.decode() if raw else f'error {code}'}")


def _quiet_shutdown(sock: socket.socket) -> None:
    # shutdown() (unlike close()) wakes a thread blocked in recv() on the socket.
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    _quiet_shutdown(src)
    _quiet_shutdown(dst)


class _Forwarder(socketserver.ThreadingTCPServer):
    """Listens on a fixed localhost port and forwards every connection to a mock broker."""

    allow_reuse_address = True  # a restarted cluster rebinds while old connections sit in TIME_WAIT
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, listen_port: int, target: tuple[str, int]) -> None:
        self.target = target
        self.links: set[socket.socket] = set()  # both ends of every open link, shut down by close()
        try:
            super().__init__(("127.0.0.1", listen_port), _Link)
        except OSError as exc:
            raise MockKafkaError(f"cannot listen on 127.0.0.1:{listen_port}: {exc}") from exc
        self.port: int = self.server_address[1]
        name = f"mock-kafka-fwd-{self.port}"
        threading.Thread(target=self.serve_forever, args=(0.05,), name=name, daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()
        for sock in list(self.links):
            _quiet_shutdown(sock)


class _Link(socketserver.BaseRequestHandler):
    """One client connection, pumped both ways to the broker until either side closes (then both are closed)."""

    server: _Forwarder

    def handle(self) -> None:
        try:
            upstream = socket.create_connection(self.server.target, timeout=5)
        except OSError:
            return
        upstream.settimeout(None)
        link = (self.request, upstream)
        for sock in link:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.links.update(link)
        back = threading.Thread(target=_pump, args=(upstream, self.request), daemon=True)
        back.start()
        _pump(self.request, upstream)
        back.join()
        self.server.links.difference_update(link)
        upstream.close()


def _new_handle() -> int:
    """The rd_kafka_t a mock cluster hangs off."""
    lib = _lib()
    conf = lib.rd_kafka_conf_new()
    errstr = ctypes.create_string_buffer(_ERRSTR_SIZE)
    for key, value in (("log_level", str(LOG_LEVEL)), ("client.id", "lagwatch-mock-kafka")):
        if lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), errstr, _ERRSTR_SIZE) != 0:
            lib.rd_kafka_conf_destroy(conf)
            raise MockKafkaError(f"librdkafka rejected {key}={value}: {errstr.value.decode()}")
    # rd_kafka_new takes ownership of conf on success only.
    rk = lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, errstr, _ERRSTR_SIZE)
    if not rk:
        lib.rd_kafka_conf_destroy(conf)
        raise MockKafkaError(f"rd_kafka_new failed: {errstr.value.decode()}")
    return rk


def _join_and_leave(config: dict[str, Any], topic: str, timeout: float) -> None:
    """Join the consumer group of `config` on `topic` (the mock creates a group on its first JoinGroup), then leave."""
    from confluent_kafka import Consumer  # lazy: heavy, and optional for importers

    # Short, so a seed member whose LeaveGroup got lost never delays a real join long.
    consumer = Consumer(
        {**config, "enable.auto.commit": False, "session.timeout.ms": 1000, "heartbeat.interval.ms": 200}
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while not consumer.assignment():
            if time.monotonic() > deadline:
                raise MockKafkaError(f"could not join consumer group {config['group.id']!r} in {timeout}s")
            consumer.poll(0.05)
    finally:
        consumer.close()


class MockKafkaCluster:
    """An in-process librdkafka mock cluster.

    `port`: if given, broker i is reachable (and advertised) at 127.0.0.1:`port + i - 1` through
    a forwarder, so a cluster restarted with the same port has the same bootstrap address.

    `topics` and `groups` are set up by `start()` *before* a fixed port accepts connections:
    otherwise clients reconnecting after a restart would race the setup, e.g. a producer's
    metadata request auto-creating a topic with the mock's default 4 partitions.  Seed only
    groups whose members `subscribe()` (so aiokafka members rejoin after a restart): a seeded
    group rejects member-less "simple" offset commits (see the module docstring).
    """

    def __init__(
        self, *, port: int | None = None, topics: Mapping[str, int] | None = None, groups: Sequence[str] = ()
    ) -> None:
        self._fixed_port = port
        self._initial_topics = dict(topics or {})
        self._initial_groups = tuple(groups)
        self._rk: int | None = None
        self._mcluster: int | None = None
        self._bootstrap: str | None = None
        self._forwarders: list[_Forwarder] = []
        self._lock = threading.Lock()

    def start(self, brokers: int = 1) -> None:
        """Start the cluster with `brokers` brokers; a no-op if it is already running."""
        with self._lock:
            if self._mcluster is not None:
                return
            if brokers < 1:
                raise ValueError(f"brokers must be >= 1, got {brokers}")
            self._create_cluster(brokers)
            try:
                for name, partitions in self._initial_topics.items():
                    self.create_topic(name, partitions)
                self.seed_groups(self._initial_groups)
                if self._fixed_port is not None:
                    self._bootstrap = self._expose_on_fixed_ports(self._fixed_port)
            except BaseException:
                self._destroy()
                raise

    def _create_cluster(self, brokers: int) -> None:
        self._rk = _new_handle()
        lib = _lib()
        mcluster = lib.rd_kafka_mock_cluster_new(self._rk, brokers)
        if not mcluster:
            lib.rd_kafka_destroy(self._rk)
            self._rk = None
            raise MockKafkaError("rd_kafka_mock_cluster_new failed (see librdkafka logs)")
        self._mcluster = mcluster
        lib.rd_kafka_mock_set_controller_id(mcluster, 1)
        # Kafka's default 3 s group.initial.rebalance.delay.ms would slow every first join.
        lib.rd_kafka_mock_group_initial_rebalance_delay_ms(mcluster, 0)
        self._bootstrap = lib.rd_kafka_mock_cluster_bootstraps(mcluster).decode()

    def stop(self) -> None:
        """Destroy the cluster (idempotent).  Connected clients see their connections drop."""
        with self._lock:
            self._destroy()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __del__(self) -> None:
        # Best effort: a forgotten cluster must not keep its broker threads alive.
        with contextlib.suppress(Exception):
            self._destroy()

    @property
    def running(self) -> bool:
        return self._mcluster is not None

    @property
    def bootstrap(self) -> str:
        """Comma-separated `host:port` list for `bootstrap.servers` / `bootstrap_servers`."""
        if self._bootstrap is None:
            raise MockKafkaError("mock cluster is not started")
        return self._bootstrap

    def seed_groups(self, groups: Sequence[str], timeout: float = 10.0) -> None:
        """Make the groups exist (empty) by joining and leaving each with a throwaway consumer: the mock has no API
        for groups, a JoinGroup is the only way to create one."""
        if not groups:
            return
        seed_topic = f"__lagwatch_group_seed_{os.getpid()}_{id(self):x}"
        self.create_topic(seed_topic, 1)
        try:
            for group in groups:
                _join_and_leave(self._client_config(**{"group.id": group}), seed_topic, timeout)
        finally:
            self.delete_topic(seed_topic)

    def create_topic(self, name: str, partitions: int, replication_factor: int = 1) -> None:
        """Create a topic; re-creating one with the same partition count is a no-op."""
        if not name or not isinstance(name, str):
            raise ValueError(f"invalid topic name {name!r}")
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise ValueError(f"partitions must be a positive int, got {partitions!r}")
        code = _lib().rd_kafka_mock_topic_create(self._require(), name.encode(), partitions, replication_factor)
        if code == _ERR_TOPIC_ALREADY_EXISTS:
            existing = self.topics().get(name)
            if existing == partitions:
                return
            raise MockKafkaError(f"topic {name!r} already exists with {existing} partitions, not {partitions}")
        _check(code, f"cannot create topic {name!r}")

    def delete_topic(self, name: str) -> None:
        """Delete a topic with its records; raises `MockKafkaError` if it does not exist."""
        _check(_lib().rd_kafka_mock_topic_delete(self._require(), name.encode()), f"cannot delete topic {name!r}")

    def topics(self, timeout: float = 5.0) -> dict[str, int]:
        """Topic name -> partition count, read over the wire (includes auto-created topics)."""
        return {name: len(meta.partitions) for name, meta in self._metadata(timeout).topics.items()}

    def set_broker_down(self, broker_id: int = -1) -> None:
        """Close the broker's connections and refuse new ones (-1: all brokers)."""
        _check(_lib().rd_kafka_mock_broker_set_down(self._require(), broker_id), "set_broker_down failed")

    def set_broker_up(self, broker_id: int = -1) -> None:
        _check(_lib().rd_kafka_mock_broker_set_up(self._require(), broker_id), "set_broker_up failed")

    def set_partition_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Make `broker_id` lead the partition (one of its replicas: create the topic with as many replicas as
        brokers), so one broker's outage takes some partitions away and leaves the others."""
        code = _lib().rd_kafka_mock_partition_set_leader(self._require(), topic.encode(), partition, broker_id)
        _check(code, "set_partition_leader failed")

    def set_group_coordinator(self, group: str, broker_id: int) -> None:
        """Make `broker_id` the coordinator of consumer group `group` (the mock otherwise picks one by a hash), so a
        test can take another broker down without taking the group's commits with it."""
        code = _lib().rd_kafka_mock_coordinator_set(self._require(), b"group", group.encode(), broker_id)
        _check(code, "set_group_coordinator failed")

    def delete_records(self, topic: str, partition: int, before: int) -> None:
        """Move a partition's log start to `before`, as retention or DeleteRecords do (librdkafka 2.10 and later)."""
        func = getattr(_lib(), "rd_kafka_mock_partition_delete_records", None)
        if func is None:
            raise MockKafkaError("this librdkafka's mock cluster cannot delete records")
        func.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int64]
        func.restype = ctypes.c_int
        _check(func(self._require(), topic.encode(), partition, before), "delete_records failed")

    def take_over_address(self, port: int) -> str:
        """Serve from now on where a cluster started with `port` served (broker i at `port + i - 1`, advertised so):
        another cluster behind a stopped one's address, as a Kafka cluster replaced behind the same address."""
        with self._lock:
            self._require()
            self._bootstrap = self._expose_on_fixed_ports(port)
            return self._bootstrap

    def _expose_on_fixed_ports(self, base_port: int) -> str:
        # Broker id -> real listener, asked over the wire rather than assuming bootstrap order.
        brokers = {b.id: (cast(str, b.host), b.port) for b in self._metadata(10).brokers.values()}
        addresses = []
        for offset, (broker_id, target) in enumerate(sorted(brokers.items())):
            forwarder = _Forwarder(base_port + offset, target)
            self._forwarders.append(forwarder)
            # Metadata and FindCoordinator responses must point clients at the forwarder too.
            _lib().rd_kafka_mock_broker_set_host_port(self._mcluster, broker_id, b"127.0.0.1", forwarder.port)
            addresses.append(f"127.0.0.1:{forwarder.port}")
        return ",".join(addresses)

    def _client_config(self, **settings: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "log_level": LOG_LEVEL, **settings}

    def _metadata(self, timeout: float) -> Any:
        from confluent_kafka.admin import AdminClient  # lazy: heavy, and optional for importers

        # No topic argument: a Metadata request naming a topic may auto-create it.
        return AdminClient(self._client_config()).list_topics(timeout=timeout)

    def _require(self) -> int:
        if self._mcluster is None:
            raise MockKafkaError("mock cluster is not started")
        return self._mcluster

    def _destroy(self) -> None:
        for forwarder in self._forwarders:
            forwarder.close()
        self._forwarders = []
        lib = _lib()
        # Order matters: librdkafka asserts that mock clusters die before their rd_kafka_t.
        if self._mcluster is not None:
            lib.rd_kafka_mock_cluster_destroy(self._mcluster)
            self._mcluster = None
        if self._rk is not None:
            lib.rd_kafka_destroy(self._rk)
            self._rk = None
        self._bootstrap = None


class _ControlHandler(BaseHTTPRequestHandler):
    """The control endpoint of a `serve` process: topics, health, and brokers down or up."""

    cluster: MockKafkaCluster  # set on the subclass `serve` builds

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request on stderr is noise in test logs

    def do_GET(self) -> None:
        path = self.path.rstrip("/")
        if path == "/health":
            self._reply(HTTPStatus.OK, {"status": "ok", "bootstrap": self.cluster.bootstrap})
        elif path == "/topics":
            self._guarded(lambda: {"topics": self.cluster.topics()})
        else:
            self._reply(HTTPStatus.NOT_FOUND, {"error": f"no route GET {self.path}"})

    def do_POST(self) -> None:
        cluster, path = self.cluster, self.path.rstrip("/")
        if path in ("/brokers/down", "/brokers/up"):  # every broker down (connections refused, the data kept) or up
            up = path.endswith("up")
            self._guarded(cluster.set_broker_up if up else cluster.set_broker_down, {"brokers": "up" if up else "down"})
            return
        if path != "/topics":
            self._reply(HTTPStatus.NOT_FOUND, {"error": f"no route POST {self.path}"})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null")
            name, partitions = body["name"], body["partitions"]
        except (ValueError, KeyError, TypeError) as exc:
            self._reply(HTTPStatus.BAD_REQUEST, {"error": f"expected JSON {{'name': str, 'partitions': int}}: {exc!r}"})
            return
        self._guarded(lambda: cluster.create_topic(name, partitions), {"name": name, "partitions": partitions})

    def do_DELETE(self) -> None:
        prefix = "/topics/"
        if not self.path.startswith(prefix) or len(self.path) == len(prefix):
            self._reply(HTTPStatus.NOT_FOUND, {"error": f"no route DELETE {self.path}"})
            return
        name = unquote(self.path[len(prefix) :])
        self._guarded(lambda: self.cluster.delete_topic(name), {"deleted": name})

    def _guarded(self, action: Callable[[], Any], answer: Mapping[str, Any] | None = None) -> None:
        """`action`'s answer (or `answer`, once it is done), or why it failed."""
        try:
            result = action()
        except (MockKafkaError, ValueError, TypeError) as exc:
            self._reply(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
        else:
            self._reply(HTTPStatus.OK, result if answer is None else answer)

    def _reply(self, status: HTTPStatus, payload: Mapping[str, Any]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def serve(settings: Mapping[str, Any]) -> None:
    """Run a mock cluster with a control endpoint (`settings`: as `start_mock_kafka_process` writes them) until
    SIGTERM/SIGINT, or until its parent is gone (a crashed test run cannot leak it). The state file ({"bootstrap",
    "control_url", "pid"}) is written, then renamed into place (readers poll for it: never half a document), once
    everything is ready, and removed on exit."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    cluster = MockKafkaCluster(port=settings["port"], topics=settings["topics"], groups=settings["groups"])
    cluster.start(settings["brokers"])
    handler = type("Handler", (_ControlHandler,), {"cluster": cluster})
    server = ThreadingHTTPServer(("127.0.0.1", settings["control_port"] or 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="mock-kafka-control", daemon=True).start()
    state_file = Path(settings["state_file"])
    try:
        state = {"bootstrap": cluster.bootstrap, "control_url": f"http://127.0.0.1:{server.server_address[1]}"}
        tmp = state_file.with_name(f".{state_file.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**state, "pid": os.getpid()}))
        os.replace(tmp, state_file)
        # Short waits keep the main thread responsive to signals and notice an orphaning.
        while not stop.wait(0.2) and os.getppid() == settings["parent_pid"]:
            pass
    finally:
        server.shutdown()
        server.server_close()
        state_file.unlink(missing_ok=True)
        cluster.stop()


@dataclass
class MockKafkaControl:
    """Synchronous client for a `serve` process's control endpoint (`control_url`, as `serve` writes it)."""

    bootstrap: str
    control_url: str
    pid: int | None = None
    timeout: float = 10.0

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/health")

    def topics(self) -> dict[str, int]:
        """Topic name -> partition count as the cluster reports it."""
        return self._request("GET", "/topics")["topics"]

    def create_topic(self, name: str, partitions: int) -> None:
        self._request("POST", "/topics", {"name": name, "partitions": partitions})

    def delete_topic(self, name: str) -> None:
        self._request("DELETE", f"/topics/{quote(name, safe='')}")

    def brokers_down(self) -> None:
        """A Kafka outage that keeps the data: connections are closed and refused until `brokers_up`."""
        self._request("POST", "/brokers/down", {})

    def brokers_up(self) -> None:
        self._request("POST", "/brokers/up", {})

    def _request(self, method: str, path: str, payload: Any = None) -> dict[str, Any]:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(
            self.control_url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                reason = str(json.loads(exc.read()).get("error"))
            except (ValueError, AttributeError):
                reason = exc.reason
            raise MockKafkaError(f"{method} {path} -> {exc.code}: {reason}") from exc
        except urllib.error.URLError as exc:
            raise MockKafkaError(f"mock Kafka control endpoint {self.control_url} unreachable: {exc.reason}") from exc


def start_mock_kafka_process(
    state_dir: Path,
    topics: Mapping[str, int],
    port: int | None = None,
    timeout: float = 20,
    brokers: int = 1,
    groups: Sequence[str] = (),
    control_port: int | None = None,
) -> tuple[subprocess.Popen[bytes], MockKafkaControl]:
    """Run `serve` in a child process and wait until it is ready.

    The child's output goes to `state_dir/mock_kafka.log` (appended, so restarts accumulate).
    It lives in its own session (a Ctrl-C meant for pytest does not reach it) and exits by itself
    if this process dies.  Pass the same `port` (and `groups`) again to restart it in place.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    state_file, log_file = state_dir / STATE_FILE_NAME, state_dir / LOG_FILE_NAME
    # A SIGKILLed predecessor leaves its state file behind; never mistake it for ours.
    state_file.unlink(missing_ok=True)
    settings = {"state_file": str(state_file), "topics": dict(topics), "port": port, "brokers": brokers,
                "groups": list(groups), "control_port": control_port, "parent_pid": os.getpid()}  # fmt: skip
    cmd = [sys.executable, "-m", "lagwatch.devkit.mock_kafka", json.dumps(settings)]
    with log_file.open("ab") as log:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if state_file.exists() and (state := json.loads(state_file.read_text()))["pid"] == proc.pid:
                return proc, MockKafkaControl(state["bootstrap"], state["control_url"], proc.pid)
            if proc.poll() is not None:
                raise MockKafkaError(
                    f"mock Kafka process exited with {proc.returncode}; log tail:\n{log_tail(log_file, 30)}"
                )
            time.sleep(0.05)
        raise MockKafkaError(f"mock Kafka process not ready after {timeout}s; log tail:\n{log_tail(log_file, 30)}")
    except BaseException:
        stop_process(proc)
        raise


if __name__ == "__main__":  # start_mock_kafka_process's child: its settings are the one argument
    serve(json.loads(sys.argv[1]))
