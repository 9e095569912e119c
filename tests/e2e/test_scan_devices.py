"""A door scanner paired as a device, in a real headless Chromium against the
real stack: paired from its pairing link (no staff token on the phone), it
scans online; once revoked, its refresh and uploads get 401, the scan it made
offline after the revocation comes back as a conflict, and the one it made
before waits for a staff sign-in, which uploads it."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from playwright.async_api import expect
from ticketry_devstack.procs import Stack

from tests.conftest import TokenFactory
from tests.e2e.pages_support import QUEUED, browser
from tests.e2e.test_scan_offline_queue import list_status, signed_codes
from tests.helpers import bearer, checkin_list, create_event, place_order, scan

pytestmark = pytest.mark.e2e

# What the device keeps in its database (IndexedDB ``ticketry-scan``): one store's record, or all of one store.
KEPT = """([store, key]) => new Promise((resolve, reject) => {
  const open = indexedDB.open("ticketry-scan");
  open.onerror = () => reject(open.error);
  open.onsuccess = () => {
    const db = open.result;
    const os = db.transaction(store).objectStore(store);
    const req = key === null ? os.getAll() : os.get(key);
    req.onsuccess = () => { db.close(); resolve(req.result === undefined ? null : req.result); };
    req.onerror = () => reject(req.error);
  };
})"""


async def test_a_paired_device_scans_and_once_revoked_its_later_offline_scans_are_conflicts(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory, tmp_path: Path
) -> None:
    org, buyer = token("scan-dev-org-1", "organizer"), token("scan-dev-buyer-1", "buyer")
    # Given a door, three tickets, and a scanner device the organiser created for the door
    event = await create_event(api, org, capacity=20)
    door = await checkin_list(api, org, event["id"], name="Gate A")
    order = (await place_order(api, buyer, event["id"], 3, holder_name="Ada Lovelace")).json()
    codes = signed_codes(stack, event["id"], order["tickets"])
    staff = token("scan-dev-staff-1", "staff", events=[event["id"]])
    r = await api.post(
        f"/v1/events/{event['id']}/devices", json={"list_id": door, "name": "Gate A phone"}, headers=bearer(org)
    )
    assert r.status_code == 201, r.text
    created = r.json()

    async with browser(tmp_path / "profile") as context:
        # When the phone opens the pairing link
        page = await context.new_page()
        await page.goto(created["pairing_url"])
        # Then it is paired on its list, keeping a device secret (and no staff token), the code gone from the URL
        await expect(page.get_by_role("heading", level=1)).to_have_text("Gate A")
        await expect(page.locator("body")).to_have_attribute("data-signin", "device")
        assert page.url == f"{stack.api_url}/scan"
        kept = await page.evaluate(KEPT, ["device", "signin"])
        assert kept["device"]["id"] == created["id"] and kept["device"]["secret"].startswith("dvs_")
        await expect(page.get_by_test_id("scan-sync")).to_have_attribute("data-count", "3")
        result, queue = page.get_by_test_id("scan-result"), page.get_by_test_id("scan-queue")
        code_box, submit = page.get_by_test_id("scan-input"), page.get_by_test_id("scan-submit")
        # ...and scans online
        await code_box.fill(codes[0])
        await submit.click()
        await expect(result).to_have_attribute("data-outcome", "admitted")
        await expect(page.locator("#holder")).to_have_text("Ada Lovelace")
        assert (await list_status(api, door, staff))["admitted"] == 1

        # When the network goes, a ticket is scanned; the organiser revokes the device; another is scanned
        await context.set_offline(True)
        await expect(page.get_by_test_id("scan-network")).to_have_attribute("data-online", "false")
        await code_box.fill(codes[1])
        await submit.click()
        await expect(queue).to_have_attribute("data-count", "1")
        url = f"/v1/events/{event['id']}/devices/{created['id']}"
        assert (await api.delete(url, headers=bearer(org))).status_code == 204
        await code_box.fill(codes[2])
        await submit.click()
        await expect(queue).to_have_attribute("data-count", "2")
        # Then the device's uploads and refreshes, with what it keeps, get 401
        upload = await scan(api, kept["token"], codes[2], door, nonce="scan-dev-late-1")
        refresh = await api.post("/v1/devices/token", json={"secret": kept["device"]["secret"]})
        for answer in (upload, refresh):
            assert answer.status_code == 401 and answer.json()["type"].endswith("/device-revoked"), answer.text

        # When the network is back
        await context.set_offline(False)
        # Then the page says the device was revoked and signs it out
        await expect(page.locator("#setup-notice")).to_contain_text("This device was revoked")
        await expect(page.locator("body")).to_have_attribute("data-signin", "none")
        assert await page.evaluate(KEPT, ["device", "signin"]) is None
        # ...the scan made after the revocation is a conflict, never uploaded; the one before still waits
        conflicts = await page.evaluate(KEPT, ["conflicts", None])
        assert [(c["ticket"], c["kind"]) for c in conflicts] == [(order["tickets"][2], "device_revoked")]
        assert [q["ticket"] for q in await page.evaluate(QUEUED)] == [order["tickets"][1]]
        assert (await list_status(api, door, staff))["admitted"] == 1
        await page.close()

        # When door staff sign in on the phone with a staff token
        page = await context.new_page()
        await page.goto(f"{stack.api_url}/scan#token={staff}&list={door}")
        await expect(page.get_by_role("heading", level=1)).to_have_text("Gate A")
        await expect(page.locator("body")).to_have_attribute("data-signin", "staff")
        # Then the scan made before the revocation is uploaded, and the conflict is listed
        await expect(page.get_by_test_id("scan-queue")).to_have_attribute("data-count", "0")
        listed = page.get_by_test_id("scan-conflict")
        await expect(listed).to_have_count(1)
        await expect(listed).to_have_attribute("data-kind", "device_revoked")
        await expect(listed).to_have_attribute("data-ticket", order["tickets"][2])
    assert (await list_status(api, door, staff))["admitted"] == 2
    # ...and the ticket scanned after the revocation was never checked in
    assert (await scan(api, staff, codes[2], door)).status_code == 200


async def test_a_typed_pairing_code_pairs_and_a_used_one_is_refused(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory, tmp_path: Path
) -> None:
    org = token("scan-dev-org-2", "organizer")
    event = await create_event(api, org, capacity=5)
    door = await checkin_list(api, org, event["id"], name="Gate B")
    r = await api.post(f"/v1/events/{event['id']}/devices", json={"list_id": door, "name": "B"}, headers=bearer(org))
    code = r.json()["pairing_code"]
    async with browser(tmp_path / "profile") as context:
        page = await context.new_page()
        await page.goto(f"{stack.api_url}/scan")
        await expect(page.locator("body")).to_have_attribute("data-signin", "none")
        await page.get_by_test_id("pair-input").fill(code.lower())
        await page.get_by_test_id("pair-submit").click()
        await expect(page.get_by_role("heading", level=1)).to_have_text("Gate B")
        await expect(page.locator("body")).to_have_attribute("data-signin", "device")
        # The same code again, on another phone: refused
        other = await context.new_page()
        await other.goto(f"{stack.api_url}/scan#pair={code}")
        await expect(other.locator("#setup-notice")).to_contain_text("unknown or was used already")
