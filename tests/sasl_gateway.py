"""A SASL front (OAUTHBEARER or PLAIN) for the Kafka mock, for tests: librdkafka's mock cluster has no SASL at all.

The gateway listens in front of a one-broker mock and the mock advertises the gateway's address, so every
connection of a client (bootstrap, then the broker it learns from metadata) goes through it. On each connection
it answers the SASL handshake itself (Kafka's SaslHandshake v0-1 and SaslAuthenticate v0-1), checking the client's
OAUTHBEARER message (RFC 7628) with `accept(token, extensions)`, or a PLAIN one (RFC 4616) with
`accept(username, {"password": password})`; until a client has logged in, any other request
than ApiVersions closes the connection, as a broker's SASL listener does. After the login it relays bytes both
ways unchanged. The mock's ApiVersions answer is amended to list the two SASL requests.

`require_login(client_id)` says whose connections must log in (the Kafka request header names the client): test
helpers that write the offsets topic or commit as a consumer group get through without, lagwatch's clients not.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
import threading
from collections.abc import Callable

from lagwatch.devkit.mock_kafka import MockKafkaCluster, _lib

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED, ILLEGAL_SASL_STATE = 33, 58, 34


def _string(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def parse_plain(message: bytes) -> tuple[str, dict[str, str]]:
    """The user name and password of a PLAIN message: `authzid NUL authcid NUL passwd`."""
    _authzid, username, password = message.decode().split("\0")
    return username, {"password": password}


def parse_oauthbearer(message: bytes) -> tuple[str, dict[str, str]]:
    """The token and extensions of an OAUTHBEARER client-first message (`n,,^Aauth=Bearer T^Ak=v^A^A`)."""
    text = message.decode()
    _gs2, _, rest = text.partition("\x01")
    fields = dict(item.split("=", 1) for item in rest.split("\x01") if "=" in item)
    auth = fields.pop("auth", "")
    if not auth.startswith("Bearer "):
        raise ValueError(f"no bearer token in {text!r}")
    return auth.removeprefix("Bearer "), fields


class SaslGateway:
    def __init__(
        self,
        upstream: tuple[str, int],
        accept: Callable[[str, dict[str, str]], bool],
        require_login: Callable[[str], bool] = lambda _client_id: True,
        mechanism: str = "OAUTHBEARER",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.upstream = upstream
        self.tls = tls  # the clients' side speaks TLS (SASL_SSL) with this server context
        self.accept = accept
        self.mechanism = mechanism
        self.parse = parse_plain if mechanism == "PLAIN" else parse_oauthbearer
        self.require_login = require_login
        self.logins: list[tuple[str, dict[str, str], bool]] = []  # (token or user, extensions or password, accepted)
        self.logged_in_clients: set[str] = set()  # client ids that logged in
        self.unauthenticated_requests = 0  # from clients that had to log in
        self.plain_connections = 0  # of clients that need not
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sasl-gateway", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(10)

    def _run(self) -> None:
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stopping.wait()
        server.close()
        connections = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in connections:
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        try:
            first = await _frame(reader)
            client_id = _client_id(first)
            if not self.require_login(client_id):
                self.plain_connections += 1
                up_writer.write(struct.pack(">i", len(first)) + first)
                await asyncio.gather(_relay(reader, up_writer), _relay(up_reader, writer))
            elif await self._login(first, reader, writer, up_reader, up_writer):
                self.logged_in_clients.add(client_id)
                await asyncio.gather(_relay(reader, up_writer), _relay(up_reader, writer))
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError, ssl.SSLError):
            pass
        finally:
            for w in (writer, up_writer):
                w.close()

    async def _login(self, request: bytes, reader, writer, up_reader, up_writer) -> bool:
        mechanism = None
        while True:
            key, version, correlation = struct.unpack(">hhi", request[:8])
            if key == API_VERSIONS:
                up_writer.write(struct.pack(">i", len(request)) + request)
                answer = await _frame(up_reader)
                writer.write(_with_sasl_versions(answer, version))
            elif key == SASL_HANDSHAKE:
                body = _after_header(request)
                mechanism = body[2 : 2 + struct.unpack(">h", body[:2])[0]].decode()
                error = 0 if mechanism == self.mechanism else UNSUPPORTED_SASL_MECHANISM
                payload = struct.pack(">hi", error, 1) + _string(self.mechanism)
                writer.write(_response(correlation, payload))
            elif key == SASL_AUTHENTICATE and mechanism == self.mechanism:
                body = _after_header(request)
                size = struct.unpack(">i", body[:4])[0]
                try:
                    token, extensions = self.parse(body[4 : 4 + size])
                    ok = self.accept(token, extensions)
                except ValueError:
                    token, extensions, ok = "", {}, False
                self.logins.append((token, extensions, ok))
                error, message = (0, None) if ok else (SASL_AUTHENTICATION_FAILED, "token refused")
                payload = struct.pack(">h", error) + _string(message) + struct.pack(">i", 0)
                if version >= 1:
                    payload += struct.pack(">q", 0)  # session lifetime: no re-authentication required
                writer.write(_response(correlation, payload))
                await writer.drain()
                return ok
            else:
                self.unauthenticated_requests += 1
                return False
            await writer.drain()
            request = await _frame(reader)


def _client_id(request: bytes) -> str:
    size = struct.unpack(">h", request[8:10])[0]
    return request[10 : 10 + size].decode() if size > 0 else ""


def _after_header(request: bytes) -> bytes:
    """A request's body after its v1 header (api key, version, correlation id, client id)."""
    client_id = struct.unpack(">h", request[8:10])[0]
    return request[10 + max(client_id, 0) :]


def _response(correlation: int, payload: bytes) -> bytes:
    body = struct.pack(">i", correlation) + payload
    return struct.pack(">i", len(body)) + body


def _with_sasl_versions(answer: bytes, version: int) -> bytes:
    """The mock's ApiVersions answer (v0-2 layout) with SaslHandshake v0-1 and SaslAuthenticate v0-1 added."""
    correlation, error, count = struct.unpack(">ihi", answer[:10])
    if error or version > 2:
        return struct.pack(">i", len(answer)) + answer
    entries, rest = answer[10 : 10 + 6 * count], answer[10 + 6 * count :]
    added = struct.pack(">hhh", SASL_HANDSHAKE, 0, 1) + struct.pack(">hhh", SASL_AUTHENTICATE, 0, 1)
    body = struct.pack(">ihi", correlation, error, count + 2) + entries + added + rest
    return struct.pack(">i", len(body)) + body


async def _frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


async def _relay(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    sink.close()


@contextlib.contextmanager
def sasl_kafka(
    accept: Callable[[str, dict[str, str]], bool],
    require_login: Callable[[str], bool] = lambda _client_id: True,
    mechanism: str = "OAUTHBEARER",
    tls: ssl.SSLContext | None = None,
):
    """A one-broker Kafka mock reachable only through a SASL gateway (OAUTHBEARER or PLAIN, over TLS when given a
    server context): (cluster, gateway)."""
    with MockKafkaCluster() as cluster:
        cluster.start()
        host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
        gateway = SaslGateway((host, int(port)), accept, require_login, mechanism, tls)
        gateway.start()
        try:
            _lib().rd_kafka_mock_broker_set_host_port(cluster._mcluster, 1, b"127.0.0.1", gateway.port)
            yield cluster, gateway
        finally:
            gateway.stop()
