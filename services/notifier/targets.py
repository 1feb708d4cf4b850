"""Where the notifier may send requests: a guard against server-side request forgery (SSRF).

* http and https only, with a host;
* never link-local addresses (169.254.0.0/16, fe80::/10) or cloud metadata endpoints (169.254.169.254,
  fd00:ec2::254, metadata.google.internal), nor unspecified/multicast/reserved addresses;
* private addresses (10/8, 172.16/12, 192.168/16, 127/8, 100.64/10, ::1, fc00::/7) only when
  `notifier.allow-private-targets` is true.

`check_url` is run when a subscription is created or changed (resolving the host name: every address it resolves
to must be allowed); at send time the URL is checked again without a lookup and the `GuardedResolver` used by the
HTTP client refuses disallowed addresses, so a name that later resolves elsewhere (DNS rebinding) is caught too.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata.goog", "metadata", "instance-data"})
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200")
)
LINK_LOCAL = tuple(ipaddress.ip_network(n) for n in ("169.254.0.0/16", "fe80::/10"))
PRIVATE = tuple(
    ipaddress.ip_network(n)
    for n in (
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "127.0.0.0/8",
        "100.64.0.0/10",
        "::1/128",
        "fc00::/7",
    )
)
NEVER = tuple(
    ipaddress.ip_network(n) for n in ("0.0.0.0/8", "224.0.0.0/4", "240.0.0.0/4", "::/128", "ff00::/8", "64:ff9b::/96")
)


class TargetError(ValueError):
    """A URL the notifier must not call."""


class ForbiddenAddress(OSError):
    """Raised by GuardedResolver: the host resolves only to addresses the notifier must not call."""


def address_problem(address: str, *, allow_private: bool) -> str | None:
    """Why requests must not go to this IP address (None = allowed)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"{address!r} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip in METADATA_ADDRESSES:
        return f"{ip} is a cloud metadata address"
    if any(ip in net for net in LINK_LOCAL):
        return f"{ip} is a link-local address"
    if any(ip in net for net in NEVER):
        return f"{ip} is not a unicast address"
    if not allow_private and any(ip in net for net in PRIVATE):
        return f"{ip} is a private address (allowed only with notifier.allow-private-targets)"
    return None


def _split(url: str) -> tuple[str, str, int]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise TargetError(f"not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise TargetError("only http and https URLs are allowed")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise TargetError("the URL has no host")
    return host, parts.scheme, port or (443 if parts.scheme == "https" else 80)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


def check_url_static(url: str, *, allow_private: bool) -> str:
    """Scheme, host name and literal addresses, without a DNS lookup; returns the host."""
    host, _, _ = _split(url)
    if host in METADATA_HOSTS:
        raise TargetError(f"{host} is a cloud metadata endpoint")
    if _is_ip(host):
        problem = address_problem(host, allow_private=allow_private)
        if problem:
            raise TargetError(problem)
    return host


async def check_url(url: str, *, allow_private: bool, resolve: bool = True) -> None:
    """Raise TargetError when the notifier must not call `url`; resolves a host name and checks every address."""
    host = check_url_static(url, allow_private=allow_private)
    if _is_ip(host) or not resolve:
        return
    _, _, port = _split(url)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise TargetError(f"cannot resolve {host}: {exc}") from None
    for info in infos:
        problem = address_problem(str(info[4][0]), allow_private=allow_private)
        if problem:
            raise TargetError(f"{host} resolves to {problem}")


def destination(url: str) -> str:
    """The per-destination queue a URL belongs to: scheme://host:port (never the path, which may be a secret)."""
    try:
        host, scheme, port = _split(url)
    except TargetError:
        return "invalid"
    return f"{scheme}://{host}:{port}"


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
