"""A door scanner that names the guest offline: a check-in list's tickets for
offline use (``GET /v1/checkin-lists/{id}/tickets``), and the scanner page that
keeps them (IndexedDB) and shows the holder and tier of a code it judged on
the device, in a real headless Chromium against the real stack.

Every wait is for something to happen, bounded far above need (``WAIT_MS``);
nothing is timed.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Page, expect
from ticketry.auth import issue_token
from ticketry.settings import DEV_JWT_SECRET
from ticketry_devstack.procs import Stack

from tests.conftest import TokenFactory
from tests.e2e.pages_support import WAIT_MS, browser
from tests.helpers import bearer, checkin_list, codes_of, create_event, place_order, scan

pytestmark = pytest.mark.e2e

TIERS = [
    {"id": "standard", "name": "Standard", "price": "39.00"},
    {"id": "vip", "name": "VIP Lounge", "price": "120.00", "lane": "vip"},
]


def staff_token(sub: str, events: list[str]) -> str:
    return issue_token(sub, "staff", key=DEV_JWT_SECRET, events=events)


async def all_pages(api: httpx.AsyncClient, list_id: str, tok: str, limit: int) -> list[list[dict[str, Any]]]:
    """Every page of the list's tickets, following ``next``."""
    out: list[list[dict[str, Any]]] = []
    cursor: str | None = None
    while True:
        params: dict[str, str | int] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        r = await api.get(f"/v1/checkin-lists/{list_id}/tickets", params=params, headers=bearer(tok))
        assert r.status_code == 200, r.text
        out.append(r.json()["items"])
        cursor = r.json()["next"]
        if cursor is None:
            return out


async def test_a_lists_tickets_are_paged_marked_and_kept_to_whoever_may_scan_on_it(
    api: httpx.AsyncClient, token: TokenFactory
) -> None:
    org, buyer = token("offline-org-1", "organizer"), token("offline-buyer-1", "buyer")
    # Given an event with two tiers, a door for all of them and one for VIP only
    event = await create_event(api, org, capacity=50, tiers=TIERS)
    other = await create_event(api, org, capacity=50)
    door = await checkin_list(api, org, event["id"], name="Main door")
    vip_door = await checkin_list(api, org, event["id"], tiers=["vip"], name="VIP entrance")
    # ...orders of 3 standard (named), 2 VIP and 1 cancelled standard ticket, and another event's order
    named = ["Zoë Ångström", "Łukasz Żółć", "Ada Lovelace"]
    a = (await place_order(api, buyer, event["id"], 3, holder_name="Zoë Ångström", holders=named)).json()
    b = (await place_order(api, buyer, event["id"], 2, tier="vip", holder_name="Grace Hopper")).json()
    c = (await place_order(api, buyer, event["id"], 1, holder_name="Alan Turing")).json()
    await place_order(api, buyer, other["id"], 1, holder_name="Not This Event")
    assert (await api.post(f"/v1/orders/{c['id']}/cancel", headers=bearer(buyer))).status_code == 200
    # ...and one VIP ticket admitted at the VIP entrance
    staff = staff_token("offline-door-1", [event["id"]])
    [vip_code, _] = await codes_of(api, b, buyer)
    assert (await scan(api, staff, vip_code, vip_door)).status_code == 200

    # When the door's tickets are read two at a time
    pages = await all_pages(api, door, staff, limit=2)
    # Then every ticket of the event comes once, in ticket-id order, over pages that split orders
    assert [len(p) for p in pages] == [2, 2, 2]
    tickets = {t["id"]: t for p in pages for t in p}
    expected = a["tickets"] + b["tickets"] + c["tickets"]
    assert [t["id"] for p in pages for t in p] == sorted(expected)
    # ...each with its holder, its tier's id and name, and its status on this list
    assert [tickets[t]["holder_name"] for t in a["tickets"]] == named
    assert {tickets[t]["holder_name"] for t in b["tickets"]} == {"Grace Hopper"}
    assert tickets[b["tickets"][0]]["tier"] == {"id": "vip", "name": "VIP Lounge"}
    assert tickets[a["tickets"][0]]["tier"] == {"id": "standard", "name": "Standard"}
    assert tickets[c["tickets"][0]]["status"] == "cancelled"
    assert {tickets[t]["status"] for t in a["tickets"] + b["tickets"]} == {"valid"}  # admitted elsewhere only
    # ...and at the VIP entrance only its tier, the admitted ticket checked in
    [vip] = await all_pages(api, vip_door, staff, limit=1000)
    head = await api.get(f"/v1/checkin-lists/{vip_door}/tickets", headers=bearer(staff))
    assert head.json()["tiers"] == [{"id": "vip", "name": "VIP Lounge"}]
    assert [t["id"] for t in vip] == sorted(b["tickets"])
    statuses = {t["id"]: (t["status"], t["checked_in_at"] is not None) for t in vip}
    assert statuses == {b["tickets"][0]: ("checked_in", True), b["tickets"][1]: ("valid", False)}

    # Whoever may scan on the list may read it: its organiser, admin; nobody else
    path = f"/v1/checkin-lists/{door}/tickets"
    assert (await api.get(path, headers=bearer(org))).status_code == 200
    assert (await api.get(path, headers=bearer(token("offline-admin-1", "admin")))).status_code == 200
    refused = await api.get(path, headers=bearer(staff_token("offline-door-2", [other["id"]])))
    assert refused.status_code == 403 and refused.headers["content-type"] == "application/problem+json"
    assert (await api.get(path, headers=bearer(buyer))).status_code == 403
    assert (await api.get(path, headers=bearer(token("offline-org-2", "organizer")))).status_code == 404
    assert (await api.get(path)).status_code == 401
    unknown = await api.get("/v1/checkin-lists/cl_00000000000000000000/tickets", headers=bearer(staff))
    assert unknown.status_code == 404 and unknown.headers["content-type"] == "application/problem+json"
    assert (await api.get(path, params={"cursor": "bm90LW91cnM"}, headers=bearer(staff))).status_code == 422


# How many tickets the scanner keeps in IndexedDB (its database, read from the page's origin).
KEPT = """() => new Promise((resolve, reject) => {
  const open = indexedDB.open("ticketry-scan");
  open.onerror = () => reject(open.error);
  open.onsuccess = () => {
    const db = open.result;
    const count = db.transaction("tickets").objectStore("tickets").count();
    count.onsuccess = () => { db.close(); resolve(count.result); };
    count.onerror = () => reject(count.error);
  };
})"""


async def until_kept(page: Page, n: int) -> None:
    """Wait (bounded) until the device keeps ``n`` tickets."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while (kept := await page.evaluate(KEPT)) != n:
        assert time.monotonic() < deadline, kept
        await asyncio.sleep(0.05)


async def test_scanner_offline_names_the_holder_and_tier_then_uploads_one_admission(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory, tmp_path: Path
) -> None:
    org, buyer = token("offline-org-3", "organizer"), token("offline-buyer-3", "buyer")
    # Given an event with a door and two named VIP tickets
    event = await create_event(api, org, capacity=50, tiers=TIERS)
    door = await checkin_list(api, org, event["id"], name="North door")
    holders = ["Zoë Ångström", "Łukasz Żółć"]
    order = (await place_order(api, buyer, event["id"], 2, tier="vip", holder_name=holders[0], holders=holders)).json()
    [_, code] = await codes_of(api, order, buyer)
    staff = staff_token("offline-door-3", [event["id"]])

    async with browser(tmp_path / "profile") as context:
        page = await context.new_page()
        # When door staff open the scanner on the door, it downloads the door's tickets
        await page.goto(f"{stack.api_url}/scan#token={staff}&list={door}")
        await expect(page.get_by_role("heading", level=1)).to_have_text("North door")
        synced = page.get_by_test_id("scan-sync")
        await expect(synced).to_have_attribute("data-state", "kept")
        await expect(synced).to_have_attribute("data-count", "2")
        # ...and a ticket is sold after that download
        late = (await place_order(api, buyer, event["id"], 1, holder_name="Grace Hopper")).json()
        [late_code] = await codes_of(api, late, buyer)
        result, queue = page.get_by_test_id("scan-result"), page.get_by_test_id("scan-queue")
        code_box, submit = page.get_by_test_id("scan-input"), page.get_by_test_id("scan-submit")

        # Given the network is gone
        await context.set_offline(True)
        await expect(page.get_by_test_id("scan-network")).to_have_attribute("data-online", "false")
        # When a kept ticket's code is typed in, it is admitted on the device with its holder and tier's name
        await code_box.fill(code)
        await submit.click()
        await expect(result).to_have_attribute("data-outcome", "admitted")
        await expect(page.locator("#holder")).to_have_text("Łukasz Żółć")
        await expect(page.locator("#detail")).to_contain_text("Tier: VIP Lounge")
        await expect(queue).to_have_attribute("data-count", "1")
        # ...the ticket sold after the download is admitted too (its signature says so), without a name
        await code_box.fill(late_code)
        await submit.click()
        await expect(queue).to_have_attribute("data-count", "2")
        await expect(result).to_have_attribute("data-outcome", "admitted")
        await expect(page.locator("#holder")).to_have_text("Name unknown")
        await expect(page.locator("#detail")).to_contain_text("Tier: Standard")
        # ...and the first again is already in, still named
        await code_box.fill(code)
        await submit.click()
        await expect(result).to_have_attribute("data-outcome", "already")
        await expect(page.locator("#holder")).to_have_text("Łukasz Żółć")
        await expect(queue).to_have_attribute("data-count", "2")

        # When the network is back, the scans are uploaded and the tickets downloaded again
        await context.set_offline(False)
        await expect(queue).to_have_attribute("data-count", "0")
        await expect(synced).to_have_attribute("data-count", "3")
        await expect(page.get_by_test_id("scan-conflict")).to_have_count(0)
        # Then the server holds one admission of the ticket, from this door's upload
        again = await scan(api, staff, code, door)
        assert again.status_code == 409 and "checked_in_at" in again.json(), again.text
        [kept] = await all_pages(api, door, staff, limit=1000)
        statuses = {t["id"]: t["status"] for t in kept}
        assert statuses == {
            order["tickets"][0]: "valid",
            order["tickets"][1]: "checked_in",
            late["tickets"][0]: "checked_in",
        }

        # When the list changes, the names go; picking the list again downloads them again
        await until_kept(page, 3)
        await page.get_by_role("button", name="Change list").click()
        await until_kept(page, 0)
        await page.get_by_role("button", name="Show its check-in lists").click()
        await page.get_by_role("button", name="North door (all tiers)").click()
        await expect(synced).to_have_attribute("data-count", "3")
        await until_kept(page, 3)
        # ...and signing the device out keeps none
        await page.get_by_role("button", name="Sign out this device").click()
        await until_kept(page, 0)
