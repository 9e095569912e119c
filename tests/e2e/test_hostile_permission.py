"""A queue permission as an attack, on the real stack: the first buyer a
waiting room admits cannot order the whole event with it; it orders at most
the event's ``max_tickets_per_permission`` tickets, and an order past that
reserves nothing and leaves the permission as it was."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import TokenFactory
from tests.helpers import bearer, create_event, eventually

pytestmark = pytest.mark.e2e


async def admitted(api: httpx.AsyncClient, tok: str, event_id: str) -> dict[str, Any] | None:
    r = await api.post(f"/v1/events/{event_id}/queue", headers=bearer(tok))
    assert r.status_code == 201, r.text
    place: dict[str, Any] = r.json()
    return place if place["admitted"] else None


async def order(api: httpx.AsyncClient, tok: str, event_id: str, quantity: int, permission: str) -> httpx.Response:
    body = {"event_id": event_id, "quantity": quantity, "holder_name": "Ada Lovelace", "tier": "standard"}
    return await api.post("/v1/orders", json=body, headers={**bearer(tok), "Queue-Permission": permission})


async def sold(api: httpx.AsyncClient, event_id: str, tok: str) -> int:
    return int((await api.get(f"/v1/events/{event_id}", headers=bearer(tok))).json()["sold"])


def assert_limit_refusal(r: httpx.Response, limit: int) -> None:
    assert r.status_code == 409, r.text
    assert r.headers["content-type"] == "application/problem+json"
    got = r.json()
    assert got["type"].endswith("/permission-limit") and got["title"] == "limit per permission", got
    assert f"at most {limit} tickets" in got["detail"], got


async def test_an_admitted_buyer_orders_at_most_the_rooms_tickets_per_permission(
    api: httpx.AsyncClient, token: TokenFactory
) -> None:
    # Given a room of 100 tickets whose permissions are good for 3 tickets, and one with the default
    org = token("permission-org", "organizer")
    event = await create_event(api, org, capacity=100, waiting_room=True, max_tickets_per_permission=3)
    default = await create_event(api, org, capacity=100, waiting_room=True)
    assert event["max_tickets_per_permission"] == 3 and default["max_tickets_per_permission"] == 10
    shown = (await api.get(f"/v1/events/{event['id']}", headers=bearer(org))).json()
    assert shown["max_tickets_per_permission"] == 3

    # And a buyer admitted to each
    greedy, other = token("permission-greedy", "buyer"), token("permission-other", "buyer")
    place = await eventually(lambda: admitted(api, greedy, event["id"]), "the buyer is admitted")
    other_place = await eventually(lambda: admitted(api, other, default["id"]), "the other buyer is admitted")

    # When they ask for the whole event, or one ticket past the limit, with their permissions
    refused = [
        (await order(api, greedy, event["id"], 100, place["permission"]), 3),
        (await order(api, greedy, event["id"], 4, place["permission"]), 3),
        (await order(api, other, default["id"], 11, other_place["permission"]), 10),
    ]

    # Then each is refused 409 naming the limit, and nothing is reserved
    for r, limit in refused:
        assert_limit_refusal(r, limit)
    assert await sold(api, event["id"], org) == 0 and await sold(api, default["id"], org) == 0

    # And the same permissions order within the limit (202), once
    r = await order(api, greedy, event["id"], 3, place["permission"])
    assert r.status_code == 202, r.text
    r = await order(api, other, default["id"], 10, other_place["permission"])
    assert r.status_code == 202, r.text
    assert await sold(api, event["id"], org) == 3 and await sold(api, default["id"], org) == 10
    r = await order(api, greedy, event["id"], 1, place["permission"])
    assert r.status_code == 403 and r.json()["title"] == "queue permission used", r.text


@pytest.mark.parametrize(
    "over",
    [
        {"waiting_room": True, "max_tickets_per_permission": 0},
        {"waiting_room": True, "max_tickets_per_permission": 1_000_001},
    ],
)
async def test_a_tickets_per_permission_limit_out_of_range_is_refused(
    api: httpx.AsyncClient, token: TokenFactory, over: dict[str, Any]
) -> None:
    base = {
        "name": "Night of Tests", "venue": "Loopback Arena", "starts_at": "2027-06-01T19:30:00Z",
        "capacity": 10, "price": "25.00", "currency": "EUR",
    }  # fmt: skip
    r = await api.post("/v1/events", json={**base, **over}, headers=bearer(token("permission-org-2", "organizer")))
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json", r.text
    plain = await create_event(api, token("permission-org-2", "organizer"), capacity=10)
    assert plain["max_tickets_per_permission"] is None
    # Without a room there are no permissions: a limit given is accepted, and ignored.
    organizer = bearer(token("permission-org-2", "organizer"))
    roomless = await api.post("/v1/events", json={**base, "max_tickets_per_permission": 3}, headers=organizer)
    assert roomless.status_code == 201 and roomless.json()["max_tickets_per_permission"] is None, roomless.text
