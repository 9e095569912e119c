"""``just up --ha`` (``python -m ticketry_devstack up --ha``) run for real: three
hosts (network namespaces) with Redis primary + replica + Sentinels, two apis
and two notifiers behind HAProxy, a scaler with renderers on two hosts, the
store and the S3 object store on the third. An order placed through the load
balancer completes, seen on its progress WebSocket through the load balancer,
its buyer's page is served through it and shows 100 % in Chromium, the
operator's status names the renderers of both hosts through either api, both
apis served requests, and SIGTERM
leaves nothing behind: no process, no namespace, no bridge.

The run honours the caller's environment like ``just up``: it is given a
JWT secret of its own, and the tokens here are minted with that one, and the
load balancer's port."""

from __future__ import annotations

import asyncio
import re
import secrets
import signal
from pathlib import Path

import httpx
import pytest
from playwright.async_api import expect
from ticketry.auth import issue_token
from ticketry_devstack.haproxy import stats_csv
from ticketry_devstack.hosts import can_make_hosts, netns_exists, netns_pids

from tests.devstack_run import alive, lines, stop, up
from tests.e2e.pages_support import browser
from tests.helpers import collect_progress, create_event, eventually, place_order

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


async def _both_apis_served(stats: str, lb: str) -> None:
    """Requests through the load balancer until each api has had a session
    (leastconn over idle servers takes turns: two or three requests do it)."""
    async with httpx.AsyncClient(base_url=lb, timeout=30) as client:

        async def both() -> bool:
            await asyncio.gather(*(client.get("/readyz") for _ in range(4)))
            rows = stats_csv((await client.get(stats + ";csv")).text)
            return all(int(r["stot"]) > 0 for r in rows if r["pxname"] == "api" and r["svname"].startswith("api-"))

        await eventually(both, "a session on each api", timeout_s=120)


async def test_up_ha_serves_an_order_through_the_load_balancer_and_stops_clean(tmp_path: Path) -> None:
    # Not skipped: CI runs as root with iproute2 (infra/bootstrap.sh), as `up --ha` needs.
    assert can_make_hosts() is None, can_make_hosts()
    secret = secrets.token_hex(32)
    proc = up(
        tmp_path / "data", "--ha", TICKETRY_LOG_LEVEL="WARNING", TICKETRY_JWT_SECRET=secret, TICKETRY_DEV_LB_PORT="8090"
    )
    seen: list[str] = []
    namespaces: list[str] = []
    pids: set[int] = set()
    try:
        # Given `up --ha` printing its hosts and the load balancer's line
        for line in lines(proc):
            seen.append(line)
            if m := re.search(r"\(netns (\S+)\)", line):
                namespaces.append(m.group(1))
            if "load balancer:" in line:
                break
        else:
            pytest.fail(f"never up: {seen[-30:]}")
        lb = next(m.group(1) for line in seen if (m := re.search(r"load balancer: (http://\S+)", line)))
        stats = next(m.group(1) for line in seen if (m := re.search(r"HAProxy stats\s+(http://\S+)", line)))
        hosts = [m.group(1) for line in seen if (m := re.match(r"\s+host [abc]\s+(\S+)", line))]
        assert len(hosts) == 3 and len(namespaces) == 3, seen[-12:]
        assert lb == f"http://{hosts[2]}:8090", (lb, hosts)
        for ns in namespaces:
            pids.update(netns_pids(ns))
        # (2 Redis, 3 sentinels, 2 apis, 2 notifiers, 2 scalers and their renderers, HAProxy, FerretDB, S3)
        assert len(pids) >= 15, pids

        organizer = issue_token("ha-org", "organizer", key=secret)
        buyer = issue_token("ha-buyer", "buyer", key=secret)
        async with httpx.AsyncClient(base_url=lb, timeout=60) as api:
            # When an order is placed through the load balancer
            event = await create_event(api, organizer, capacity=100)
            resp = await place_order(api, buyer, event["id"], 5, idempotency_key="ha-order-1")
            assert resp.status_code == 202, resp.text
            order = resp.json()
            # Then its progress socket and its buyer's page are the load balancer's
            ws_lb = "ws://" + lb.removeprefix("http://")
            assert order["progress_url"].startswith(f"{ws_lb}/v1/orders/"), order["progress_url"]
            assert order["status_page_url"].startswith(f"{lb}/o/"), order["status_page_url"]
            # … the socket, through HAProxy to a notifier, sees the order complete, each ticket once
            msgs = await collect_progress(order["progress_url"], buyer, timeout_s=300)
            rendered = [m["ticket_id"] for m in msgs if m["type"] == "ticket.rendered"]
            assert sorted(set(rendered)) == sorted(order["tickets"])
            assert msgs[-1]["type"] == "order.completed" and msgs[-1]["rendered"] == 5, msgs[-1]
            # … the buyer's page answers through it, and in a browser shows the order at 100 %
            page = await api.get(order["status_page_url"].partition("#")[0].removeprefix(lb))
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html"), page.text[:200]
            async with browser(tmp_path / "profile") as context:
                tab = await context.new_page()
                await tab.goto(order["status_page_url"])
                await expect(tab.get_by_test_id("order-status")).to_have_text("completed")
                await expect(tab.get_by_test_id("order-progress")).to_have_text("5 / 5")
                await expect(tab.locator("a[data-testid=ticket-link]")).to_have_count(5)
            # … and the operator's status through it, whichever api answers, has the renderers of both hosts
            admin = issue_token("ha-admin", "admin", key=secret)
            for _ in range(4):
                async with httpx.AsyncClient(base_url=lb, timeout=60) as fresh:
                    got = await fresh.get("/v1/ops/status", headers={"Authorization": f"Bearer {admin}"})
                assert got.status_code == 200, got.text[:200]
                scalers = {r["consumer"].rpartition("-r")[0] for r in got.json()["renderers"]}
                assert len(scalers) == 2, got.json()["renderers"]
            # … and a PDF, written by a renderer on a or b into the shared S3 store, is served by the apis
            pdf = await api.get(f"/v1/tickets/{order['tickets'][0]}/pdf", headers={"Authorization": f"Bearer {buyer}"})
            assert pdf.status_code in (200, 302, 307), pdf.text[:200]
            # And both apis served requests, the notifiers the socket, all UP in HAProxy's eyes
            await _both_apis_served(stats, lb)
            rows = stats_csv((await api.get(stats + ";csv")).text)
        servers = {r["svname"]: r for r in rows if r["svname"].startswith(("api-", "notifier-"))}
        assert sorted(servers) == ["api-0", "api-1", "notifier-0", "notifier-1"]
        assert all(r["status"] == "UP" for r in servers.values()), servers
        assert int(servers["notifier-0"]["stot"]) + int(servers["notifier-1"]["stot"]) >= 1
        for ns in namespaces:
            pids.update(netns_pids(ns))
    finally:
        code = stop(proc, signal.SIGTERM, 180)
    # When stopped (SIGTERM), it exits cleanly, and nothing of it is left
    assert code == 0, seen[-20:]
    assert not [p for p in pids if alive(p)]
    assert not [ns for ns in namespaces if netns_exists(ns)]
    subnet = hosts[0].split(".")[2]
    assert not Path(f"/sys/class/net/tkt{subnet}br").exists()
