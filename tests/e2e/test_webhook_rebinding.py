"""DNS rebinding against the webhook sender, end to end.

The api runs on a "host" of its own (a network namespace, tests/netns.py)
whose resolver is a DNS server whose answers the test plans
(tests/dns_rebinder.py, on dnslib; TTL 0). The shop listens on a public
address (added inside the namespace only, so it reaches nothing outside) and
a canary on 127.0.0.1, same port, as an internal service would.

Registration checks the name's addresses. Then the name rebinds the way an
attacker's does: its answers alternate, public, loopback, public… one per
query. A sender that looked the name up to check it and again to connect
would get a public answer for the check and loopback for the connection.
Ours looks it up once per connection (the shop closes each, so every delivery
opens one), checks that answer and connects to it: so each delivery made
meanwhile either reaches the shop or is refused (a dead letter naming the
loopback address), the name is asked exactly once per delivery, and the canary
gets nothing. Once the name answers the public address again, the refused
deliveries, re-driven, reach the shop: nothing is lost. Redis and FerretDB
stay in the root namespace, reached over the host's link. Needs root
(namespaces), like the multi-host test.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from ticketry_devstack.procs import Proc, Stack, running

from tests.conftest import TokenFactory
from tests.helpers import bearer, create_event, eventually, place_order, start_api_of_its_own
from tests.netns import Host, can_make_hosts

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

why_not = can_make_hosts()
PUBLIC = "203.0.114.7"  # a global address, which exists here inside the namespace only
LOOPBACK = "127.0.0.1"
SHOP_PORT = 8080
NAME = "shop.rebind.test"
DELIVERIES = 6  # made while the name rebinds: half reach the shop, half are refused
HOST_INDEX = 12  # 127.77.12.0/24 (tests/chaos/test_multihost.py: 1, 2; test_s3_storage: 9)


@dataclass
class Names:
    """The namespace's DNS server (tests/dns_rebinder.py) and its plan for :data:`NAME`."""

    host: Host
    plan: Path

    def answer(self, *addresses: str) -> None:
        """From the next query on, :data:`NAME`'s A answers cycle through ``addresses``."""
        aside = self.plan.with_suffix(".new")
        aside.write_text("\n".join((NAME, *addresses)) + "\n")
        aside.replace(self.plan)  # the server never reads half a plan

    def queries(self) -> list[str]:
        """The address each A query for :data:`NAME` got, in order."""
        log = self.plan.with_suffix(".log")
        return log.read_text().split() if log.exists() else []

    def lookup(self) -> list[str]:
        """What the namespace's resolver answers for :data:`NAME` now (glibc, as the api's)."""
        argv = self.host.argv(["getent", "ahostsv4", NAME])
        out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
        return sorted({line.split()[0] for line in out.splitlines() if line.strip()})

    async def rebind(self, address: str) -> None:
        """:data:`NAME` answers ``address`` from now on (once the resolver says so)."""
        self.answer(address)
        await eventually(lambda: asyncio.to_thread(lambda: self.lookup() == [address]), f"{NAME} → {address}")


@pytest.fixture(scope="module")
def host() -> Iterator[Host]:
    if why_not is not None:
        pytest.skip(why_not)
    made = Host(f"tkt-dns-{os.getpid()}", HOST_INDEX).create()
    etc = Path("/etc/netns") / made.ns  # `ip netns exec` mounts these over /etc
    try:
        subprocess.run(made.argv(["ip", "addr", "add", f"{PUBLIC}/32", "dev", "lo"]), check=True)
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "resolv.conf").write_text(f"nameserver {LOOPBACK}\noptions attempts:1 timeout:30\n")
        yield made
    finally:
        made.destroy()
        shutil.rmtree(etc, ignore_errors=True)


@pytest.fixture(scope="module")
def names(host: Host, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Names]:
    made = Names(host, tmp_path_factory.mktemp("rebind-dns") / "plan")
    made.answer(PUBLIC)
    argv = host.argv([sys.executable, "-m", "tests.dns_rebinder", str(made.plan), LOOPBACK])
    server = Proc("dns", argv, dict(os.environ), made.plan.with_name("dns.out")).start()
    try:
        yield made
    finally:
        server.stop()


@dataclass
class Shop:
    """The shop (the public address) and the canary (loopback): one receiver
    process in the namespace, and the log of what reached either."""

    log: Path
    out: Path

    async def listening(self) -> None:
        await eventually(lambda: asyncio.to_thread(lambda: "listening" in self.out.read_text()), "the shop listening")

    def arrivals(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def shop(host: Host, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    root = tmp_path_factory.mktemp("rebind-shop")
    made = Shop(root / "received.jsonl", root / "sink.out")
    made.log.touch()
    argv = [sys.executable, "-m", "tests.hook_sink", str(made.log), f"{PUBLIC}:{SHOP_PORT}", f"{LOOPBACK}:{SHOP_PORT}"]
    sink = Proc("hook-sink", host.argv(argv), dict(os.environ), made.out).start()
    try:
        yield made
    finally:
        sink.stop()


@pytest.fixture(scope="module")
def api_url(host: Host, names: Names, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Redis and FerretDB here, listening on the host's link too; the api inside the host."""
    stack = Stack(
        tmp_path_factory.mktemp("rebind-stack"),
        env={"TICKETRY_DEV_MODE": "1", "TICKETRY_LOG_LEVEL": "WARNING"},
        redis_bind=(LOOPBACK, host.gateway),
        mongo_host=host.gateway,
    )
    with running(stack):
        stack.start_infra()
        redis = {"TICKETRY_REDIS_URL": f"redis://{host.gateway}:{stack.redis_port}/0"}
        stack.procs["api"] = start_api_of_its_own(stack, "api", stack.api_port, redis, host=host)
        yield f"http://{host.address}:{stack.api_port}"


@pytest.fixture
async def api(api_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=api_url, timeout=60) as client:
        yield client


async def cancelled_order(api: httpx.AsyncClient, buyer: str, event_id: str) -> str:
    """A new order of one ticket, cancelled by its buyer: an ``order.cancelled`` webhook."""
    r = await place_order(api, buyer, event_id, 1)
    assert r.status_code == 202, r.text
    order_id: str = r.json()["id"]
    r = await api.post(f"/v1/orders/{order_id}/cancel", headers=bearer(buyer))
    assert r.status_code == 200, r.text
    return order_id


async def test_a_rebinding_name_reaches_the_shop_or_nothing(
    api: httpx.AsyncClient, names: Names, shop: Shop, token: TokenFactory
) -> None:
    organizer, buyer = token("rebind-org", "organizer"), token("rebind-buyer", "buyer")
    admin = token("rebind-admin", "admin")
    event = await create_event(api, organizer)
    register = {"url": f"http://{NAME}:{SHOP_PORT}/hooks", "types": ["order.cancelled"]}
    await shop.listening()
    # A name that answers loopback is refused at registration (the check the rest gets past)
    await names.rebind(LOOPBACK)
    r = await api.post(f"/v1/events/{event['id']}/webhooks", json=register, headers=bearer(organizer))
    assert r.status_code == 422 and LOOPBACK in r.text, r.text
    # Given the shop registered while its name answers the public address, and a first delivery there
    await names.rebind(PUBLIC)
    r = await api.post(f"/v1/events/{event['id']}/webhooks", json=register, headers=bearer(organizer))
    assert r.status_code == 201, r.text
    await cancelled_order(api, buyer, event["id"])
    first = await eventually(lambda: asyncio.to_thread(shop.arrivals), "the first delivery at the shop")
    assert [(a["to"], a["path"]) for a in first] == [(PUBLIC, "/hooks")], first

    # When the name's answers alternate public / loopback while deliveries are made
    before = len(names.queries())
    names.answer(PUBLIC, LOOPBACK)
    orders = [await cancelled_order(api, buyer, event["id"]) for _ in range(DELIVERIES)]

    async def dead() -> list[dict[str, Any]]:
        r = await api.get("/v1/ops/dead-letters", headers=bearer(admin))
        assert r.status_code == 200, r.text
        return [d for d in r.json()["webhooks"] if d.get("order_id") in orders]

    async def settled() -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        refused, arrived = await dead(), shop.arrivals()[1:]
        return (refused, arrived) if len(refused) + len(arrived) >= DELIVERIES else None

    refused, arrived = await eventually(settled, "every delivery made or refused")
    # Then the name was asked once per delivery, its answers alternating ...
    assert names.queries()[before:] == [PUBLIC, LOOPBACK] * (DELIVERIES // 2), names.queries()
    # ... each public answer delivered to the shop, each loopback one refused at once
    assert [a["to"] for a in arrived] == [PUBLIC] * (DELIVERIES // 2), arrived
    assert len(refused) == DELIVERIES // 2, refused
    for letter in refused:
        assert "non-public address" in letter["reason"] and LOOPBACK in letter["reason"], letter
        assert letter["attempts"] == 1 and letter["type"] == "order.cancelled", letter
    # ... and nothing reached the canary, nor anything twice
    everything = shop.arrivals()
    assert {a["to"] for a in everything} == {PUBLIC} and len({a["id"] for a in everything}) == len(everything)

    # When the name answers the public address again and the refused deliveries are re-driven
    await names.rebind(PUBLIC)
    reason = {letter["reason"] for letter in refused}
    assert len(reason) == 1, reason
    r = await api.post(
        "/v1/ops/dead-letters/webhooks/redrive-reason", json={"reason": reason.pop()}, headers=bearer(admin)
    )
    assert r.status_code == 200 and len(r.json()["outcomes"]) == len(refused), r.text
    # Then every delivery reached the shop once, and the canary still nothing
    total = 1 + DELIVERIES
    done = await eventually(lambda: asyncio.to_thread(lambda: (a := shop.arrivals())[total - 1 :] and a), "re-driven")
    assert len(done) == total and {a["to"] for a in done} == {PUBLIC}, done
    assert {a["id"] for a in done[1 + DELIVERIES // 2 :]} == {letter["webhook_id"] for letter in refused}
