"""Renderers on two "hosts" (network namespaces) share one consumer group; one
host is cut off mid-order and its pending work moves to the other.

Host 2's renderers join once host 1's hold work: started together, host 2 could
render the whole order while host 1's were still importing (a renderer start
costs seconds of CPU), and nothing would be left on host 1 to move."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis
from ticketry import streams
from ticketry_devstack.procs import Stack

from tests.conftest import TokenFactory
from tests.helpers import collect_progress, create_event, eventually, place_order
from tests.netns import Host, can_make_hosts

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

why_not = can_make_hosts()


@pytest.fixture
def hosts() -> Iterator[list[Host]]:
    made = [Host(f"tkt-host{i}-{os.getpid()}", i).create() for i in (1, 2)]
    yield made
    for h in made:
        h.destroy()


@pytest.fixture
def two_host_stack(tmp_path: Path, hosts: list[Host]) -> Iterator[Stack]:
    stack = Stack(
        tmp_path,
        env={"TICKETRY_DEV_MODE": "1", "TICKETRY_LOG_LEVEL": "WARNING"},
        redis_bind=("127.0.0.1", *(h.gateway for h in hosts)),
    )
    try:
        stack.start_infra()
        stack.start_api()
        stack.start_notifier()
        start_renderers(stack, hosts[0])
        yield stack
    finally:
        stack.stop()


def start_renderers(stack: Stack, host: Host) -> None:
    """Two renderers on ``host``, reaching Redis through its gateway."""
    url = f"redis://{host.gateway}:{stack.redis_port}/0"
    for _ in range(2):
        stack.start_renderer({"TICKETRY_REDIS_URL": url, "TICKETRY_CLAIM_IDLE_MS": "3000"}, netns=host.ns)


@pytest.mark.skipif(why_not is not None, reason=why_not or "")
async def test_cut_host_work_moves_to_the_other(two_host_stack: Stack, hosts: list[Host], token: TokenFactory) -> None:
    stack = two_host_stack
    r = aioredis.Redis.from_url(stack.env["TICKETRY_REDIS_URL"])
    buyer = token("multi-host-buyer", "buyer")
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api:
        # Given host 1's renderers holding part of an order (the group's only consumers yet)
        event = await create_event(api, token("multi-host-org", "organizer"), capacity=1000)
        resp = await place_order(api, buyer, event["id"], 200)
        assert resp.status_code == 202, resp.text
        order = resp.json()
        lane = streams.render_lane("standard", 200)
        watcher = asyncio.create_task(collect_progress(order["progress_url"], buyer, timeout_s=400))

        host1 = [p for p in stack.renderers if hosts[0].ns in " ".join(p.argv)]

        async def host1_holds() -> int:
            rows = await r.xpending_range(lane, streams.RENDERERS_GROUP, "-", "+", 1000)
            return sum(1 for row in rows if row["consumer"].decode().startswith(hosts[0].ns))

        await eventually(host1_holds, "host 1 holding work", 300, interval_s=0.05)
        # ... and host 2's renderers joining the group
        start_renderers(stack, hosts[1])

        # When host 1 is cut off (link down) with that work in hand, and its processes die
        hosts[0].cut()
        for p in host1:
            p.kill()

        # Then host 2 claims what host 1 held, and the order completes exactly once
        msgs = await watcher
        rendered = [m["ticket_id"] for m in msgs if m["type"] == "ticket.rendered"]
        assert Counter(rendered).most_common(1)[0][1] == 1, "a ticket was announced twice"
        assert sorted(rendered) == sorted(order["tickets"])
        assert msgs[-1]["type"] == "order.completed" and msgs[-1]["rendered"] == 200
        events = await r.xrange(streams.TICKET_EVENTS, "-", "+")
        mine = [
            f[b"ticket_id"].decode()
            for _, f in events
            if f[b"order_id"].decode() == order["id"] and f[b"type"] == b"ticket.rendered"
        ]
        assert len(mine) == len(set(mine)) == 200
        pending = await r.xpending(lane, streams.RENDERERS_GROUP)
        assert pending["pending"] == 0
        claimed_by_host2 = [p for p in stack.renderers if hosts[1].ns in " ".join(p.argv)]
        assert all(p.alive() for p in claimed_by_host2)
        pdfs = list((Path(stack.env["TICKETRY_STORAGE_DIR"]) / order["id"]).glob("*.pdf"))
        assert len(pdfs) == 200
    await r.aclose()
