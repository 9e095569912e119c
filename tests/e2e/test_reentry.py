"""Re-entry at the door: a check-in list that lets tickets go out and come
back in (``allow_reentry``), scans with a ``direction``, and the list's
``status`` (who is inside, who was ever admitted), against the session's real
stack. The scanner page's entry/exit switch is checked in a real headless
Chromium.

The codes of the concurrency test are made with the stack's own signing key
(Ed25519 is deterministic: the same string its renderers print), so a hundred
tickets need no hundred PDFs read back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import expect
from ticketry.codes import load_keyring
from ticketry_devstack.procs import Stack

from tests.conftest import TokenFactory
from tests.e2e.pages_support import browser
from tests.helpers import bearer, checkin_list, codes_of, create_event, place_order, scan

pytestmark = pytest.mark.e2e


async def reentry_list(api: httpx.AsyncClient, org: str, event_id: str, name: str = "Festival gate") -> str:
    r = await api.post(
        f"/v1/events/{event_id}/checkin-lists", json={"name": name, "allow_reentry": True}, headers=bearer(org)
    )
    assert r.status_code == 201 and r.json()["allow_reentry"] is True, r.text
    return str(r.json()["id"])


async def status(api: httpx.AsyncClient, list_id: str, tok: str) -> dict[str, Any]:
    r = await api.get(f"/v1/checkin-lists/{list_id}/status", headers=bearer(tok))
    assert r.status_code == 200, r.text
    got: dict[str, Any] = r.json()
    return got


async def test_a_ticket_goes_out_and_comes_back_in_and_the_door_counts_it(
    api: httpx.AsyncClient, token: TokenFactory
) -> None:
    org, buyer = token("reentry-org-1", "organizer"), token("reentry-buyer-1", "buyer")
    event = await create_event(api, org, capacity=20)
    gate, plain = await reentry_list(api, org, event["id"]), await checkin_list(api, org, event["id"])
    order = (await place_order(api, buyer, event["id"], 2)).json()
    code, other = await codes_of(api, order, buyer)
    staff = token("reentry-door-1", "staff", events=[event["id"]])

    # An exit of a ticket that never entered is refused
    never = await scan(api, staff, code, gate, direction="exit")
    assert never.status_code == 409 and never.json()["type"].endswith("/not-inside"), never.text
    # Entry, exit, entry: each admitted, saying which way
    for direction in ("entry", "exit", "entry"):
        r = await scan(api, staff, code, gate, direction=direction)
        assert r.status_code == 200 and r.json()["direction"] == direction, (direction, r.text)
    # An entry while inside is refused as already inside; so is a plain second scan (no direction: entry)
    for again in (await scan(api, staff, code, gate, direction="entry"), await scan(api, staff, code, gate)):
        assert again.status_code == 409 and again.json()["type"].endswith("/already"), again.text
    # Out once, then out again while outside: refused
    assert (await scan(api, staff, code, gate, direction="exit")).status_code == 200
    twice = await scan(api, staff, code, gate, direction="exit")
    assert twice.status_code == 409 and twice.json()["type"].endswith("/not-inside"), twice.text
    # The other ticket is inside
    assert (await scan(api, staff, other, gate)).status_code == 200
    assert await status(api, gate, staff) == {"list_id": gate, "inside": 1, "admitted": 2}
    assert await status(api, gate, org) == {"list_id": gate, "inside": 1, "admitted": 2}

    # A list without re-entry still refuses the second scan, and records no exits
    assert (await scan(api, staff, code, plain)).status_code == 200
    second = await scan(api, staff, code, plain)
    assert second.status_code == 409 and second.json()["type"].endswith("/already-checked-in"), second.text
    assert "direction" not in (await scan(api, staff, other, plain)).json()
    out = await scan(api, staff, code, plain, direction="exit")
    assert out.status_code == 409 and out.json()["type"].endswith("/no-reentry"), out.text
    assert await status(api, plain, staff) == {"list_id": plain, "inside": 2, "admitted": 2}
    # Staff of another event may not read the gate's count
    stranger = token("reentry-door-x", "staff", events=["ev_" + "0" * 20])
    assert (await api.get(f"/v1/checkin-lists/{gate}/status", headers=bearer(stranger))).status_code == 403


async def test_an_offline_upload_with_a_direction_gets_its_first_answer_again(
    api: httpx.AsyncClient, token: TokenFactory
) -> None:
    org, buyer = token("reentry-org-2", "organizer"), token("reentry-buyer-2", "buyer")
    event = await create_event(api, org, capacity=20)
    gate = await reentry_list(api, org, event["id"])
    [code] = await codes_of(api, (await place_order(api, buyer, event["id"], 1)).json(), buyer)
    staff = token("reentry-door-2", "staff", events=[event["id"]])
    assert (await scan(api, staff, code, gate)).status_code == 200
    # An offline scanner's exit is uploaded, and uploaded again (the same nonce)
    first = await scan(api, staff, code, gate, direction="exit", nonce="gate-exit-0001")
    again = await scan(api, staff, code, gate, direction="exit", nonce="gate-exit-0001")
    assert first.status_code == again.status_code == 200, (first.text, again.text)
    assert again.json() == first.json() and first.json()["direction"] == "exit"
    # ...and the ticket left once: it is outside, and one entry brings it back
    assert (await status(api, gate, staff))["inside"] == 0
    back = await scan(api, staff, code, gate, direction="entry", nonce="gate-entry-0002")
    assert back.status_code == 200, back.text
    assert (await scan(api, staff, code, gate, direction="entry", nonce="gate-entry-0002")).json() == back.json()
    assert (await status(api, gate, staff))["inside"] == 1


async def test_two_hundred_concurrent_scans_of_a_hundred_tickets_leave_the_counts_right(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory
) -> None:
    org, buyer = token("reentry-org-3", "organizer"), token("reentry-buyer-3", "buyer")
    event = await create_event(api, org, capacity=100)
    gate = await reentry_list(api, org, event["id"])
    order = (await place_order(api, buyer, event["id"], 100)).json()
    assert len(order["tickets"]) == 100, order
    ring = load_keyring(Path(stack.env["TICKETRY_KEYS_DIR"]))
    codes = [ring.sign(t, event["id"], "standard") for t in order["tickets"]]
    staff = token("reentry-door-3", "staff", events=[event["id"]])
    # Half the tickets are inside before the rush
    inside_before = set(range(50, 100))
    for i in sorted(inside_before):
        assert (await scan(api, staff, codes[i], gate)).status_code == 200

    # Two racing scans per ticket: in+in and in+out on tickets outside, out+out and out+in on tickets inside
    pairs = [("entry", "entry")] * 25 + [("entry", "exit")] * 25 + [("exit", "exit")] * 25 + [("exit", "entry")] * 25
    jobs = [(i, d) for i, pair in enumerate(pairs) for d in pair]
    # Sixteen at a time (the bodies the api takes from one address at once), a ticket's two scans side by side
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=120, limits=httpx.Limits(max_connections=16)) as c:
        answers = []
        for k in range(0, len(jobs), 16):
            answers += await asyncio.gather(*(scan(c, staff, codes[i], gate, direction=d) for i, d in jobs[k : k + 16]))
    assert all(r.status_code in (200, 409) for r in answers), {r.status_code for r in answers}

    # Then of two racing scans the same way exactly one passed, and a move the other way always could
    passed: list[list[str]] = [[] for _ in range(100)]
    for (i, d), r in zip(jobs, answers, strict=True):
        if r.status_code == 200:
            passed[i].append(d)
    assert all(p == ["entry"] for p in passed[:25]), passed[:25]
    assert all("entry" in p for p in passed[25:50]), passed[25:50]
    assert all(p == ["exit"] for p in passed[50:75]), passed[50:75]
    assert all("exit" in p for p in passed[75:]), passed[75:]
    # ...so a ticket is inside iff it was, plus its passed entries, minus its passed exits, is 1
    inside = [int(i in inside_before) + passed[i].count("entry") - passed[i].count("exit") for i in range(100)]
    assert set(inside) <= {0, 1}, inside
    # Then the door's counts say the same
    assert await status(api, gate, staff) == {"list_id": gate, "inside": sum(inside), "admitted": 100}


async def test_the_scanner_offers_entry_and_exit_only_where_the_list_allows_reentry(
    stack: Stack, api: httpx.AsyncClient, token: TokenFactory, tmp_path: Path
) -> None:
    org = token("reentry-org-4", "organizer")
    event = await create_event(api, org, capacity=10)
    gate, plain = await reentry_list(api, org, event["id"]), await checkin_list(api, org, event["id"])
    staff = token("reentry-door-4", "staff", events=[event["id"]])
    async with browser(tmp_path / "profile") as context:
        page = await context.new_page()
        await page.goto(f"{stack.api_url}/scan#token={staff}&list={gate}")
        await expect(page.get_by_role("heading", level=1)).to_have_text("Festival gate")
        switch = page.get_by_test_id("scan-direction")
        await expect(switch).to_be_visible()
        await switch.get_by_role("radio", name="Exit").check()
        await expect(page.get_by_test_id("scan-submit")).to_have_text("Check out")
        # The plain list has no switch (a page of its own: a new fragment alone loads nothing)
        plain_page = await context.new_page()
        await plain_page.goto(f"{stack.api_url}/scan#token={staff}&list={plain}")
        await expect(plain_page.get_by_role("heading", level=1)).to_have_text("Main door")
        await expect(plain_page.get_by_test_id("scan-direction")).to_be_hidden()
        await expect(plain_page.get_by_test_id("scan-submit")).to_have_text("Check in")
