"""Where webhooks may go (SSRF).

An endpoint URL is ``http`` or ``https`` with a host and no credentials. Unless
``TICKETRY_WEBHOOKS_ALLOW_PRIVATE`` is set, every address its host resolves to
must be globally routable: loopback, private (RFC 1918, ULA), link-local (the
cloud metadata service at 169.254.169.254), CGNAT, multicast, reserved,
documentation and unspecified addresses are refused, and so are the IPv6
forms that reach IPv4 or local networks: IPv4-compatible (``::a.b.c.d``),
IPv4-mapped, NAT64 (``64:ff9b::/96`` judged by the IPv4 inside, its local-use
``64:ff9b:1::/48`` always), 6to4 (judged by the IPv4 inside), Teredo and
site-local (``fec0::/10``). The check runs when the endpoint is registered and
again at every connection the sender opens, on the very addresses it then
connects to (:class:`PinnedBackend`): the name is resolved once per
connection, so a name that changes its answer after the check (DNS
rebinding) cannot redirect a delivery. The sender never follows redirects.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Iterable
from typing import Protocol
from urllib.parse import urlsplit

import httpcore
from httpcore._backends.base import SOCKET_OPTION

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
RESOLVE_TIMEOUT_S = 5.0


class RefusedDestination(ValueError):
    """A URL that webhooks may not be sent to (the message says why)."""


class Unresolvable(RefusedDestination):
    """The host does not resolve (now: at delivery time this is retried)."""


# IPv6 ranges refused whatever they embed, with why. ::/96 (IPv4-compatible,
# deprecated by RFC 4291) covers :: and ::1 too.
_REFUSED_V6 = tuple(
    (ipaddress.IPv6Network(net), why)
    for net, why in (
        ("::/96", "IPv4-compatible"),
        ("64:ff9b:1::/48", "local-use NAT64"),
        ("100::/64", "discard-only"),
        ("2001::/32", "Teredo"),
        ("2001:db8::/32", "documentation"),
        ("3fff::/20", "documentation"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
    )
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def embedded_ipv4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address that ``addr`` reaches, where it is one of the IPv6
    forms of one (IPv4-mapped, NAT64 well-known prefix, 6to4)."""
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr in _NAT64:
        return ipaddress.IPv4Address(int(addr) & 0xFFFF_FFFF)
    return addr.sixtofour


def is_public(addr: IPAddress) -> bool:
    """True for an address on the public internet."""
    if isinstance(addr, ipaddress.IPv6Address):
        if any(addr in net for net, _ in _REFUSED_V6):
            return False
        inner = embedded_ipv4(addr)
        if inner is not None:
            return is_public(inner)
    return addr.is_global and not (addr.is_multicast or addr.is_unspecified or addr.is_reserved)


def check_url(url: str) -> tuple[str, int]:
    """``(host, port)`` of an acceptable endpoint URL (syntax only)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise RefusedDestination(f"not a valid URL: {exc}") from exc
    if parts.scheme not in ("http", "https"):
        raise RefusedDestination("the URL must be http or https")
    if not parts.hostname:
        raise RefusedDestination("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise RefusedDestination("credentials in the URL are not accepted (the signature authenticates us)")
    if parts.fragment:
        raise RefusedDestination("the URL may not have a fragment")
    if not _is_ip(parts.hostname):
        try:
            ascii_host = parts.hostname.encode("idna").decode()
        except UnicodeError as exc:
            raise RefusedDestination(f"not a valid host name: {parts.hostname!r}") from exc
        if not _HOSTNAME.match(ascii_host):
            raise RefusedDestination(f"not a valid host name: {parts.hostname!r}")
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


_HOSTNAME = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?$")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


class Resolver(Protocol):
    """Every address a host name resolves to (injected: tests answer for names)."""

    async def __call__(self, host: str, port: int) -> list[IPAddress]: ...


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to (an IP literal is itself)."""
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_S):
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, TimeoutError) as exc:  # gaierror is an OSError; IDNA refusals are UnicodeErrors
        raise Unresolvable(f"the host {host!r} does not resolve") from exc
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


async def checked_addresses(
    host: str, port: int, *, allow_private: bool, resolver: Resolver = resolve
) -> list[IPAddress]:
    """What ``host`` resolves to, once, each address checked: raise
    :class:`RefusedDestination` if any is not public (unless allowed)."""
    addresses = await resolver(host, port)
    if not addresses:
        raise Unresolvable(f"the host {host!r} does not resolve")
    if not allow_private and (bad := sorted({str(a) for a in addresses if not is_public(a)})):
        raise RefusedDestination(
            f"{host} resolves to a non-public address ({', '.join(bad)}); "
            "set TICKETRY_WEBHOOKS_ALLOW_PRIVATE=1 to allow it"
        )
    return addresses


async def check_destination(url: str, *, allow_private: bool, resolver: Resolver = resolve) -> None:
    """Raise :class:`RefusedDestination` unless webhooks may go to ``url``."""
    host, port = check_url(url)
    await checked_addresses(host, port, allow_private=allow_private, resolver=resolver)


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend for the sender: each new connection resolves
    its host once, checks every answer and connects to a checked address. The
    URL keeps the name, so the Host header, TLS SNI and the certificate check
    are the name's; only where the TCP connection goes is pinned."""

    def __init__(self, *, allow_private: bool, resolver: Resolver = resolve) -> None:
        self.allow_private = allow_private
        self.resolver = resolver
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109  (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await checked_addresses(host, port, allow_private=self.allow_private, resolver=self.resolver)
        last: Exception | None = None
        for addr in addresses:
            try:
                return await self._inner.connect_tcp(str(addr), port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None  # addresses is never empty
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109  (httpcore's signature)
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise RefusedDestination("webhooks go over TCP only")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)
