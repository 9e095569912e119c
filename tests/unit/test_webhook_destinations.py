"""Where webhooks may go: http(s) URLs to public addresses only, unless allowed."""

from __future__ import annotations

import ipaddress

import pytest
from ticketry_api.webhooks.destinations import RefusedDestination, check_destination, check_url, is_public


@pytest.mark.parametrize(
    ("addr", "public"),
    [
        ("127.0.0.1", False),
        ("127.8.9.10", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("172.31.255.255", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),  # cloud metadata
        ("100.64.0.1", False),  # CGNAT
        ("0.0.0.0", False),  # noqa: S104
        ("224.0.0.1", False),
        ("255.255.255.255", False),
        ("::1", False),
        ("::", False),
        ("fc00::1", False),
        ("fe80::1", False),
        ("::ffff:127.0.0.1", False),  # IPv4-mapped loopback
        ("::ffff:10.0.0.1", False),
        ("2002:0a00:0001::1", False),  # 6to4 of 10.0.0.1
        ("ff02::1", False),
        # IPv6 forms that reach IPv4 or local networks
        ("::7f00:1", False),  # IPv4-compatible 127.0.0.1
        ("::a9fe:a9fe", False),  # IPv4-compatible 169.254.169.254
        ("::808:808", False),  # IPv4-compatible, deprecated whatever it embeds
        ("64:ff9b::a00:5", False),  # NAT64 of 10.0.0.5
        ("64:ff9b::7f00:1", False),  # NAT64 of 127.0.0.1
        ("64:ff9b::a9fe:a9fe", False),  # NAT64 of the metadata service
        ("64:ff9b:1::a00:5", False),  # local-use NAT64
        ("64:ff9b:1::808:808", False),
        ("fec0::1", False),  # site-local
        ("feff::1", False),
        ("::ffff:169.254.169.254", False),
        ("::ffff:100.64.0.1", False),
        ("2002:7f00:1::1", False),  # 6to4 of 127.0.0.1
        ("2002:a9fe:a9fe::1", False),  # 6to4 of the metadata service
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", False),  # Teredo
        ("2001::1", False),
        ("ff0e::1", False),  # global-scope multicast
        ("2001:db8::1", False),  # documentation
        ("3fff::1", False),
        ("192.0.2.1", False),
        ("198.51.100.1", False),
        ("203.0.113.1", False),
        ("240.0.0.1", False),  # reserved
        ("100::1", False),  # discard-only
        ("93.184.216.34", True),
        ("8.8.8.8", True),
        ("2606:4700::1111", True),
        ("::ffff:8.8.8.8", True),
        ("64:ff9b::808:808", True),  # NAT64 of 8.8.8.8
        ("2002:808:808::1", True),  # 6to4 of 8.8.8.8
        ("2a00:1450:4001:80b::200e", True),
    ],
)
def test_is_public(addr: str, public: bool) -> None:
    assert is_public(ipaddress.ip_address(addr)) is public


@pytest.mark.parametrize(
    "url",
    [
        "ftp://93.184.216.34/hook",
        "file:///etc/passwd",
        "gopher://93.184.216.34/",
        "http:///nohost",
        "https://user:pw@93.184.216.34/hook",
        "https://93.184.216.34/hook#frag",
        "https://93.184.216.34:99999/hook",
        "javascript:alert(1)",
    ],
)
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(RefusedDestination):
        check_url(url)


def test_ports_default_by_scheme() -> None:
    assert check_url("https://93.184.216.34/x") == ("93.184.216.34", 443)
    assert check_url("http://93.184.216.34/x") == ("93.184.216.34", 80)
    assert check_url("http://[2606:4700::1111]:8080/x") == ("2606:4700::1111", 8080)


# No request leaves the machine: IP literals and ``localhost`` resolve locally.
@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:9/hook", "http://localhost:9/hook", "http://10.0.0.1/hook", "http://[::1]:9/",
     "http://169.254.169.254/latest/meta-data/", "http://0.0.0.0:80/", "http://[::ffff:127.0.0.1]/"],
)  # fmt: skip
async def test_private_destinations_are_refused_unless_allowed(url: str) -> None:
    with pytest.raises(RefusedDestination, match="non-public"):
        await check_destination(url, allow_private=False)
    await check_destination(url, allow_private=True)


async def test_public_literal_is_accepted() -> None:
    await check_destination("https://93.184.216.34/hook", allow_private=False)
    # (the same check, one address over into a private range, refuses: it did look)
    with pytest.raises(RefusedDestination):
        await check_destination("https://10.184.216.34/hook", allow_private=False)


@pytest.mark.parametrize("url", ["http://" + "a" * 70 + ".invalid/x", "http://exa\u0000mple/x", "http://a..b/x"])
async def test_hosts_that_cannot_resolve_are_refused_not_errors(url: str) -> None:
    with pytest.raises(RefusedDestination):
        await check_destination(url, allow_private=True)


@pytest.mark.parametrize("host", ["exa\u0000mple", "a..b", "-lead", "under_score", "sp ace", "a" * 64])
def test_host_names_are_checked_before_any_lookup(host: str) -> None:
    with pytest.raises(RefusedDestination, match="host name"):
        check_url(f"http://{host}/x")


def test_idn_host_names_are_accepted() -> None:
    assert check_url("https://bücher.example/x")[0] == "bücher.example"
