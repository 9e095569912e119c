"""A door scanner that names the guest offline: a check-in list's tickets for
offline use (``GET /v1/checkin-lists/{id}/tickets``), against the real stack.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from ticketry.auth import issue_token
from ticketry.settings import DEV_JWT_SECRET

from tests.conftest import TokenFactory
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
