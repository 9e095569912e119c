"""Where webhooks may go (SSRF).

An endpoint URL is ``http`` or ``https`` with a host and no credentials. Unless
``TICKETRY_WEBHOOKS_ALLOW_PRIVATE`` is set, every address its host resolves to
must be globally routable: loopback, private (RFC 1918, ULA), link-local (the
cloud metadata service at 169.254.169.254), CGNAT, multicast, reserved and
unspecified addresses are refused, and so are IPv4-mapped/compatible IPv6 forms
of them. The check runs when the endpoint is registered and again before every
attempt (a name can be re-pointed at an internal address later), and the
sender never follows redirects. A name that changes its answer between our
check and the connection (DNS rebinding within seconds) is not covered: put
the api behind an egress proxy where that matters.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
RESOLVE_TIMEOUT_S = 5.0


class RefusedDestination(ValueError):
    """A URL that webhooks may not be sent to (the message says why)."""


class Unresolvable(RefusedDestination):
    """The host does not resolve (now: at delivery time this is retried)."""


def is_public(addr: IPAddress) -> bool:
    """True for an address on the public internet."""
    if isinstance(addr, ipaddress.IPv6Address):
        inner = addr.ipv4_mapped or addr.sixtofour
        if inner is not None:
            return is_public(inner)
    return addr.is_global and not addr.is_multicast


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


async def check_destination(url: str, *, allow_private: bool) -> None:
    """Raise :class:`RefusedDestination` unless webhooks may go to ``url``."""
    host, port = check_url(url)
    addresses = await resolve(host, port)
    if allow_private:
        return
    if bad := sorted({str(a) for a in addresses if not is_public(a)}):
        raise RefusedDestination(
            f"{host} resolves to a non-public address ({', '.join(bad)}); "
            "set TICKETRY_WEBHOOKS_ALLOW_PRIVATE=1 to allow it"
        )
