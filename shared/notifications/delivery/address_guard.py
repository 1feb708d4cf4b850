"""Where lagwatch may send requests: one guard against server-side request forgery (SSRF), for the subscriptions of
the configuration file and of the api alike, and for every connection the notifier's HTTP client opens. What it
refuses: docs/webhooks.md, "Which URLs are allowed".

The host is judged as the HTTP client connects to it, never as typed: parsed by yarl (aiohttp's URL library), so
Unicode look-alikes are normalised (NFKC and IDNA) as for the client, and numeric IPv4 spellings (`0x7f.1`) are read
as the resolver reads them. `check_url` runs when a subscription is created or changed (every address a host name
resolves to must be allowed); `check_url_static` (no lookup) when the configuration file is loaded and before every
request. At connect time the HTTP client uses `GuardedResolver` (so a name that later resolves elsewhere — DNS
rebinding — is caught) and `guarded_socket_factory`, which checks the very address each socket is about to connect
to, IP literals included (aiohttp does not resolve those).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Callable
from typing import Any, NamedTuple

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata.goog", "metadata", "instance-data"})
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200")
)
LINK_LOCAL = tuple(ipaddress.ip_network(n) for n in ("169.254.0.0/16", "fe80::/10"))
PRIVATE = tuple(
    ipaddress.ip_network(n)
    for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.0/8", "100.64.0.0/10", "::1/128", "fc00::/7")
)
NEVER = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "192.0.0.0/24",  # IETF protocol assignments
        "198.18.0.0/15",  # benchmarking
        "224.0.0.0/4",
        "240.0.0.0/4",
        "::/96",  # unspecified and IPv4-compatible (::a.b.c.d; ::1 is checked before, as private)
        "::ffff:0:0:0/96",  # IPv4-translated
        "64:ff9b::/96",  # NAT64
        "64:ff9b:1::/48",  # local-use NAT64
        "2002::/16",  # 6to4
        "2001::/32",  # Teredo
        "fec0::/10",  # site-local (deprecated)
        "ff00::/8",
    )
)
ALLOW_PRIVATE = "notifier.allow-private-targets"
NUMERIC_IPV4 = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+)){0,3}\Z")
HOST_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\Z")


class TargetError(ValueError):
    """A URL lagwatch must not call."""


class ForbiddenAddress(OSError):
    """Raised at connect time: the host resolves only to addresses lagwatch must not call."""


class Target(NamedTuple):
    scheme: str
    host: str  # normalised: ASCII (IDNA), lower case, no trailing dot; an IP address in its canonical form
    port: int
    ip: IPAddress | None  # when the host is an address


def as_ip(host: str) -> IPAddress | None:
    """The address a host stands for without a lookup, numeric IPv4 spellings included; None for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if NUMERIC_IPV4.match(host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def parse_target(url: str) -> Target:
    """Scheme, normalised host and port of `url`, as the HTTP client will see them; TargetError otherwise."""
    try:
        parsed = URL(url)
        host, port = parsed.raw_host, parsed.port
    except (ValueError, UnicodeError, TypeError) as exc:
        raise TargetError(f"not a valid URL: {exc}") from None
    if parsed.scheme not in ("http", "https"):
        raise TargetError("only http and https URLs are allowed")
    host = (host or "").rstrip(".").lower()
    if not host:
        raise TargetError("the URL has no host")
    if "%" in host:
        raise TargetError("IPv6 zone ids are not allowed")
    ip = as_ip(host)
    if ip is None and not HOST_NAME.match(host):
        raise TargetError(f"{host!r} is not a valid host name")
    return Target(parsed.scheme, str(ip) if ip is not None else host, port or 0, ip)


def address_problem(address: str | IPAddress, *, allow_private: bool) -> str | None:
    """Why requests must not go to this IP address (None = allowed)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0] if isinstance(address, str) else address)
    except ValueError:
        return f"{address!r} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip in METADATA_ADDRESSES:
        return f"{ip} is a cloud metadata address"
    if any(ip in net for net in LINK_LOCAL):
        return f"{ip} is a link-local address"
    if any(ip in net for net in PRIVATE):
        return None if allow_private else f"{ip} is a private address (allowed only with {ALLOW_PRIVATE})"
    if any(ip in net for net in NEVER) or not ip.is_global:
        return f"{ip} is not a global unicast address"
    return None


def check_url_static(url: str, *, allow_private: bool) -> Target:
    """Scheme, host name and literal addresses, without a DNS lookup; returns the parsed target."""
    target = parse_target(url)
    if target.host in METADATA_HOSTS:
        raise TargetError(f"{target.host} is a cloud metadata endpoint")
    problem = address_problem(target.ip, allow_private=allow_private) if target.ip is not None else None
    if problem:
        raise TargetError(problem)
    return target


async def check_url(url: str, *, allow_private: bool, resolve: bool = True) -> None:
    """Raise TargetError when lagwatch must not call `url`; resolves a host name and checks every address."""
    target = check_url_static(url, allow_private=allow_private)
    host = target.host
    if target.ip is not None or not resolve:
        return
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, target.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise TargetError(f"cannot resolve {host}: {exc}") from None
    for info in infos:
        problem = address_problem(str(info[4][0]), allow_private=allow_private)
        if problem:
            raise TargetError(f"{host} resolves to {problem}")


def destination(url: str) -> str:
    """The per-destination queue a URL belongs to: scheme://host:port (never the path, which may be a secret)."""
    try:
        target = parse_target(url)
    except TargetError:
        return "invalid"
    host = f"[{target.host}]" if isinstance(target.ip, ipaddress.IPv6Address) else target.host
    return f"{target.scheme}://{host}:{target.port}"


class GuardedResolver(AbstractResolver):
    """aiohttp resolver that drops disallowed addresses (and fails when none is left)."""

    def __init__(self, *, allow_private: bool, inner: AbstractResolver | None = None) -> None:
        self.allow_private = allow_private
        self._inner = inner or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host.rstrip(".").lower() in METADATA_HOSTS:
            raise ForbiddenAddress(f"{host} is a cloud metadata endpoint")
        results = await self._inner.resolve(host, port, family)
        allowed = [r for r in results if address_problem(r["host"], allow_private=self.allow_private) is None]
        if not allowed:
            problem = address_problem(results[0]["host"], allow_private=self.allow_private) if results else "no address"
            raise ForbiddenAddress(f"{host}: {problem}")
        return allowed

    async def close(self) -> None:
        await self._inner.close()


AddrInfo = tuple[int, int, int, str, tuple[Any, ...]]


def guarded_socket_factory(*, allow_private: bool) -> Callable[[AddrInfo], socket.socket]:
    """For `aiohttp.TCPConnector(socket_factory=...)`: the last check, on the address a socket connects to."""

    def create(addr_info: AddrInfo) -> socket.socket:
        family, type_, proto, _, sockaddr = addr_info
        problem = address_problem(str(sockaddr[0]), allow_private=allow_private)
        if problem:
            raise ForbiddenAddress(problem)
        return socket.socket(family=family, type=type_, proto=proto)

    return create
