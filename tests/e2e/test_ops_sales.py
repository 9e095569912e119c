"""The operator's console's sales panel (``/ops``, docs/contract.md) in a real
headless Chromium at phone width: an event's sold / capacity per tier and its
orders by status, and a waiting room paused, resumed and closed from the page through
the room's own routes, each written to the audit log. Against a stack of its
own, so the panel lists this module's events only. Every wait is for
something to happen, bounded far above need.

With ``TICKETRY_DOCS_SCREENSHOTS=1`` the console under load is saved as
docs/img/ops-console.png (what docs/operations.md shows); otherwise into the
test's temporary folder, so a run leaves the tree as it was."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Dialog, Page, expect
from ticketry_devstack.procs import Stack

from tests.conftest import TokenFactory, stack_of_its_own
from tests.e2e.pages_support import WAIT_MS
from tests.e2e.pages_support import browser as chromium
from tests.helpers import bearer, create_event, eventually, place_order, wait_rendered

pytestmark = pytest.mark.e2e

WAIT_S = WAIT_MS / 1000
XSS = "<img src=x onerror=alert(1)>"
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"


@pytest.fixture(scope="module")
def sales_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with stack_of_its_own(tmp_path_factory, "ops-sales", renderers=1) as s:
        yield s


@pytest.fixture
async def sapi(sales_stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=sales_stack.api_url, timeout=60) as client:
        yield client


async def test_sales_panel_shows_sold_of_capacity_and_pauses_and_resumes_a_room(
    sales_stack: Stack, sapi: httpx.AsyncClient, token: TokenFactory, tmp_path: Path
) -> None:
    admin, org = token("ops-sales-admin", "admin"), token("ops-sales-org", "organizer")
    # Given an event whose name is markup, two tiers, and a completed order of three VIP tickets
    tiers = [
        {"id": "standard", "name": "Standard", "price": "20.00", "capacity": 6},
        {"id": "vip", "name": "VIP", "price": "90.00", "capacity": 4, "lane": "vip"},
    ]
    sold = await create_event(sapi, org, capacity=10, name=XSS, tiers=tiers)
    buyer = token("ops-sales-buyer", "buyer")
    placed = await place_order(sapi, buyer, sold["id"], 3, tier="vip")
    assert placed.status_code == 202, placed.text
    assert (await wait_rendered(sapi, placed.json()["id"], buyer, WAIT_S))["status"] == "completed"
    # ... and a waiting room before its on-sale, one buyer in line (it admits nobody yet)
    on_sale = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    room = await create_event(sapi, org, capacity=5, name="Queue Night", waiting_room=True, on_sale_at=on_sale)
    joined = await sapi.post(f"/v1/events/{room['id']}/queue", headers=bearer(token("ops-sales-q", "buyer")))
    assert joined.status_code == 201, joined.text

    # The JSON the page reads says so too
    async def panel() -> dict[str, Any]:
        got = (await sapi.get("/v1/ops/status", headers=bearer(admin))).json()["sales"]
        rows = {r["event_id"]: r for r in got or []}
        return rows if sold["id"] in rows and rows[sold["id"]]["orders"]["completed"] == 1 else {}

    rows = await eventually(panel, "the sales rows", WAIT_S)
    assert rows[sold["id"]]["sold"] == 3 and rows[sold["id"]]["capacity"] == 10
    assert {t["id"]: (t["sold"], t["capacity"]) for t in rows[sold["id"]]["tiers"]} == {
        "standard": (0, 6),
        "vip": (3, 4),
    }
    assert rows[room["id"]]["room"]["waiting"] == 1 and rows[room["id"]]["room"]["paused"] is False

    confirms: list[str] = []
    alerts: list[str] = []

    async def on_dialog(dialog: Dialog) -> None:
        (confirms if dialog.type == "confirm" else alerts).append(dialog.message)
        await dialog.accept()

    async with chromium(tmp_path / "profile") as context:
        page = await context.new_page()
        page.on("dialog", on_dialog)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        await page.goto(f"{sales_stack.api_url}/ops#token={admin}")
        # Then the panel shows the event's sold / capacity, per tier, its orders, its name as text
        sale = page.locator(f"[data-testid=ops-sale][data-event='{sold['id']}']")
        await expect(sale).to_have_attribute("data-sold", "3")
        await expect(sale).to_have_attribute("data-capacity", "10")
        await expect(sale.get_by_test_id("ops-sale-sold")).to_contain_text("sold 3 / 10")
        await expect(sale.locator("[data-testid=ops-tier][data-tier=vip]")).to_contain_text("3 / 4")
        await expect(sale.get_by_test_id("ops-orders")).to_contain_text("completed 1")
        await expect(sale.locator(".name")).to_have_text(XSS)
        assert await page.locator("#sales img").count() == 0
        # When the admin pauses the room from the page (confirmed)
        shown = page.locator(f"[data-testid=ops-sale][data-event='{room['id']}']")
        await expect(shown.get_by_test_id("ops-room")).to_have_attribute("data-paused", "false")
        await shown.get_by_test_id("ops-room-pause").click()
        # Then it is paused, and the audit log names the admin
        await expect(shown.get_by_test_id("ops-room")).to_have_attribute("data-paused", "true")
        paused = page.locator("[data-testid=ops-audit][data-who='ops-sales-admin'][data-action=pause]")
        await expect(paused).to_have_count(1)
        await expect(paused).to_contain_text(room["id"])
        # When the admin resumes it: admitting again, audited
        await shown.get_by_test_id("ops-room-resume").click()
        await expect(shown.get_by_test_id("ops-room")).to_have_attribute("data-paused", "false")
        resumed = page.locator("[data-testid=ops-audit][data-who='ops-sales-admin'][data-action=resume]")
        await expect(resumed).to_have_count(1)
        # When the admin closes it: closed for good (no action left on it), audited
        await shown.get_by_test_id("ops-room-close").click()
        await expect(shown.get_by_test_id("ops-room")).to_have_attribute("data-closed", "true")
        await expect(shown.get_by_test_id("ops-room-pause")).to_have_count(0)
        await expect(shown.get_by_test_id("ops-room-close")).to_have_count(0)
        closed = page.locator("[data-testid=ops-audit][data-who='ops-sales-admin'][data-action=close]")
        await expect(closed).to_have_count(1)
        assert len(confirms) == 3 and all("Queue Night" in c for c in confirms), confirms
        # The page fits a phone's width
        assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        assert alerts == [] and errors == [], (alerts, errors)
    log = (await sapi.get("/v1/ops/audit", headers=bearer(admin))).json()
    mine = [(a["action"], a["kind"], a["target"]) for a in log if a["who"] == "ops-sales-admin"]
    assert mine == [("close", "room", room["id"]), ("resume", "room", room["id"]), ("pause", "room", room["id"])]
    # ... and the room is closed for joins too
    join = await sapi.post(f"/v1/events/{room['id']}/queue", headers=bearer(token("ops-sales-late-buyer", "buyer")))
    assert join.status_code == 409 and join.json()["type"].endswith("/queue-closed"), join.text


async def test_a_room_action_on_an_event_not_there_is_404_problem_json(
    sapi: httpx.AsyncClient, token: TokenFactory
) -> None:
    admin = token("ops-sales-admin-2", "admin")
    for action in ("pause", "resume", "close"):
        r = await sapi.post(f"/v1/events/ev_00000000000000000000/queue/{action}", headers=bearer(admin))
        assert r.status_code == 404, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
    log = (await sapi.get("/v1/ops/audit", headers=bearer(admin))).json()
    assert not [a for a in log if a["who"] == "ops-sales-admin-2"]


async def test_a_screenshot_of_the_console_under_load(
    sales_stack: Stack, sapi: httpx.AsyncClient, token: TokenFactory, tmp_path: Path
) -> None:
    admin, org = token("ops-shot-admin", "admin"), token("ops-shot-org", "organizer")
    async with chromium(tmp_path / "profile") as context:
        page = await context.new_page()
        await page.set_viewport_size({"width": 1280, "height": 900})
        await page.goto(f"{sales_stack.api_url}/ops#token={admin}")
        await expect(page.get_by_test_id("ops-live")).to_have_attribute("data-state", "live")
        await _load_and_shoot(page, sapi, token, org, tmp_path)


async def _load_and_shoot(page: Page, sapi: httpx.AsyncClient, token: TokenFactory, org: str, tmp_path: Path) -> None:
    """With the console open (its chart starts before the load): an event
    with two tiers and a waiting room; orders for the first; the screenshot
    while they render."""
    tiers = [
        {"id": "standard", "name": "Standard", "price": "35.00", "capacity": 1500},
        {"id": "vip", "name": "VIP", "price": "120.00", "capacity": 500, "lane": "vip"},
    ]
    event = await create_event(sapi, org, capacity=2000, name="Harbour Lights Festival", tiers=tiers)
    on_sale = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    room = await create_event(sapi, org, capacity=800, name="Midnight Choir", waiting_room=True, on_sale_at=on_sale)
    for n in range(3):
        r = await sapi.post(f"/v1/events/{room['id']}/queue", headers=bearer(token(f"ops-shot-q{n}", "buyer")))
        assert r.status_code == 201, r.text
    # ... whose renderer has rendered a ticket of each tier (the load shows a warm stack)
    warm = token("ops-shot-warm", "buyer")
    for tier in ("standard", "vip"):
        first = await place_order(sapi, warm, event["id"], 1, tier=tier)
        assert first.status_code == 202, first.text
        await wait_rendered(sapi, first.json()["id"], warm, WAIT_S)
    # When buyers place orders, ten at once (one client may send 16 bodies at a time),
    # more tickets than the one renderer renders in a poll or two
    sizes = [("standard", 30)] * 10 + [("vip", 4)] * 10
    for wave in (0, 10):
        placed = await asyncio.gather(*(
            place_order(sapi, token(f"ops-shot-buyer-{n}", "buyer"), event["id"], quantity, tier=tier)
            for n, (tier, quantity) in enumerate(sizes[wave : wave + 10], start=wave)
        ))  # fmt: skip
        assert [r.status_code for r in placed] == [202] * 10, [r.text for r in placed]
    # Then, while they render, the chart draws them and the panel shows what sold
    await expect(page.get_by_test_id("ops-throughput")).not_to_have_attribute("data-peak", "0")
    sale = page.locator(f"[data-testid=ops-sale][data-event='{event['id']}']")
    await expect(sale).to_have_attribute("data-sold", str(2 + sum(q for _, q in sizes)))
    await expect(page.get_by_test_id("ops-latency")).not_to_have_attribute("data-p50", "")
    # ... the small orders' fast lane done and a few large ones (the chart has a slope to show)
    done = sale.get_by_test_id("ops-orders")
    await expect(done).to_have_attribute("data-completed", re.compile(r"^(1[5-9]|2[0-2])$"))
    where = DOCS_IMG if os.environ.get("TICKETRY_DOCS_SCREENSHOTS") == "1" else tmp_path
    where.mkdir(parents=True, exist_ok=True)
    shot = where / "ops-console.png"
    await page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000
