"""Staff tokens are bound: to an organizer's events (claim ``org``) or to
events (claim ``events``). One bound to neither is refused everywhere (403),
and a bound one opens no other organizer's doors: it neither reads their
lists and guests' names nor uses up their tickets."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import TokenFactory
from tests.helpers import bearer, checkin_list, codes_of, create_event, place_order, scan


def refused(r: httpx.Response) -> bool:
    """A 403 problem+json with status, title and detail."""
    if r.status_code != 403 or not r.headers["content-type"].startswith("application/problem+json"):
        return False
    body: dict[str, Any] = r.json()
    return body.get("status") == 403 and bool(body.get("title")) and bool(body.get("detail"))


async def door_calls(
    api: httpx.AsyncClient, staff: str, event_id: str, list_id: str, code: str
) -> list[httpx.Response]:
    """Everything a staff token does at a door: the event's lists, one list,
    its tickets (the guests' names), the revocations, a scan."""
    get = [
        f"/v1/events/{event_id}/checkin-lists",
        f"/v1/checkin-lists/{list_id}",
        f"/v1/checkin-lists/{list_id}/tickets",
        f"/v1/events/{event_id}/revocations",
    ]
    return [*[await api.get(path, headers=bearer(staff)) for path in get], await scan(api, staff, code, list_id)]


async def test_staff_tokens_open_only_the_doors_they_are_bound_to(api: httpx.AsyncClient, token: TokenFactory) -> None:
    # Given organizer A's event with a door and a sold ticket, and organizer B's the same
    org_a, org_b = token("bind-org-a", "organizer"), token("bind-org-b", "organizer")
    buyer = token("bind-buyer", "buyer")
    event_a, event_b = await create_event(api, org_a, capacity=20), await create_event(api, org_b, capacity=20)
    door_a, door_b = await checkin_list(api, org_a, event_a["id"]), await checkin_list(api, org_b, event_b["id"])
    orders = []
    for event in (event_a, event_b):
        placed = await place_order(api, buyer, event["id"], 1)
        assert placed.status_code == 202, placed.text
        orders.append(placed.json())
    (code_a,), (code_b,) = await codes_of(api, orders[0], buyer), await codes_of(api, orders[1], buyer)

    # When a staff token bound to nothing is used at A's door (and anywhere else)
    unbound = token("bind-staff-none", "staff")
    calls = await door_calls(api, unbound, event_a["id"], door_a, code_a)
    elsewhere = [
        await api.get("/v1/checkins/keys", headers=bearer(unbound)),
        await api.get(f"/v1/events/{event_a['id']}", headers=bearer(unbound)),
        await api.get(f"/v1/tickets/{orders[0]['tickets'][0]}", headers=bearer(unbound)),
        await api.get(f"/v1/orders/{orders[0]['id']}", headers=bearer(unbound)),
    ]
    # Then each call is refused with a 403 problem
    assert [r.status_code for r in calls + elsewhere] == [403] * 9, [r.text for r in calls + elsewhere]
    assert all(refused(r) for r in calls + elsewhere)
    # (an empty events list binds to nothing either)
    assert all(
        refused(r)
        for r in await door_calls(api, token("bind-staff-empty", "staff", events=[]), event_a["id"], door_a, code_a)
    )

    # When B's staff (bound to organizer B) try A's door
    staff_b = token("bind-staff-b", "staff", org="bind-org-b")
    at_a = await door_calls(api, staff_b, event_a["id"], door_a, code_a)
    # Then every call is refused, the scan too
    assert [r.status_code for r in at_a] == [403] * 5, [r.text for r in at_a]
    assert all(refused(r) for r in at_a)
    # And at B's own door they list, read and scan
    at_b = await door_calls(api, staff_b, event_b["id"], door_b, code_b)
    assert [r.status_code for r in at_b] == [200] * 5, [r.text for r in at_b]
    assert [t["id"] for t in at_b[2].json()["items"]] == orders[1]["tickets"]

    # When staff bound to A's event scan there and try B's door
    staff_a = token("bind-staff-a", "staff", events=[event_a["id"]])
    legit = await scan(api, staff_a, code_a, door_a)
    # Then A's ticket was never used up by the refused scans: it admits now, once
    assert legit.status_code == 200, legit.text
    assert legit.json()["ticket_id"] == orders[0]["tickets"][0]
    assert (await scan(api, staff_a, code_a, door_a)).status_code == 409
    at_b = await door_calls(api, staff_a, event_b["id"], door_b, code_b)
    assert [r.status_code for r in at_b] == [403] * 5, [r.text for r in at_b]
    at_a = await door_calls(api, staff_a, event_a["id"], door_a, code_a)
    assert [r.status_code for r in at_a[:4]] == [200] * 4, [r.text for r in at_a]

    # And a staff token bound both ways must fit both: A's event under organizer B fits neither
    both = token("bind-staff-both", "staff", org="bind-org-b", events=[event_a["id"]])
    assert [r.status_code for r in await door_calls(api, both, event_a["id"], door_a, code_a)] == [403] * 5

    # And buyers still buy, and the api is ready, after it all
    assert (await place_order(api, buyer, event_a["id"], 1)).status_code == 202
    assert (await api.get("/readyz")).status_code == 200
