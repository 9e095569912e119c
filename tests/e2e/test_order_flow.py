"""The walking skeleton, end to end: order → stream → PDFs → WebSocket → check-in."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable

import httpx
import pytest
from ticketry import streams
from ticketry_devstack.procs import Stack

from tests.chaos.support import redis_of, wait_until
from tests.conftest import TokenFactory
from tests.e2e.flows import order_renders_and_checks_in_once
from tests.helpers import (
    bearer,
    collect_progress,
    create_event,
    honouring_retry_after,
    place_order,
)

pytestmark = pytest.mark.e2e


async def test_twenty_tickets_render_and_check_in_once(api: httpx.AsyncClient, token: TokenFactory) -> None:
    await order_renders_and_checks_in_once(api, token, "flow")


async def test_other_buyer_cannot_see_order_or_pdfs(api: httpx.AsyncClient, token: TokenFactory) -> None:
    owner, other = token("buyer-a", "buyer"), token("buyer-b", "buyer")
    event = await create_event(api, token("org-2", "organizer"), capacity=10)
    order = (await place_order(api, owner, event["id"], 2)).json()
    await collect_progress(order["progress_url"], owner)
    for path in (f"/v1/orders/{order['id']}", f"/v1/tickets/{order['tickets'][0]}",
                 f"/v1/tickets/{order['tickets'][0]}/pdf"):  # fmt: skip
        r = await api.get(path, headers=bearer(other))
        assert r.status_code in (403, 404), (path, r.status_code)
        assert r.headers["content-type"] == "application/problem+json"
        assert (await api.get(path, headers=bearer(owner))).status_code == 200
        assert (await api.get(path)).status_code == 401


async def test_sold_out_event_answers_409(api: httpx.AsyncClient, token: TokenFactory) -> None:
    buyer = token("buyer-c", "buyer")
    event = await create_event(api, token("org-3", "organizer"), capacity=3)
    assert (await place_order(api, buyer, event["id"], 2)).status_code == 202
    r = await place_order(api, buyer, event["id"], 2)
    assert r.status_code == 409
    assert r.json()["status"] == 409 and r.json()["title"]
    assert (await place_order(api, buyer, event["id"], 1)).status_code == 202
    got = (await api.get(f"/v1/events/{event['id']}", headers=bearer(buyer))).json()
    assert got["sold"] == 3


async def test_concurrent_orders_never_oversell(api: httpx.AsyncClient, token: TokenFactory) -> None:
    event = await create_event(api, token("org-4", "organizer"), capacity=25)
    buyers = [token(f"rush-{i}", "buyer") for i in range(40)]
    # Each under one key (keys are per buyer): a retry cannot make a second order.
    orders = (functools.partial(place_order, api, b, event["id"], 1, idempotency_key="rush-order") for b in buyers)
    results = await asyncio.gather(*(honouring_retry_after(place) for place in orders))
    codes = sorted(r.status_code for r in results)
    assert codes.count(202) == 25 and codes.count(409) == 15
    got = (await api.get(f"/v1/events/{event['id']}", headers=bearer(buyers[0]))).json()
    assert got["sold"] == 25


async def test_unknown_event_and_bad_body(api: httpx.AsyncClient, token: TokenFactory) -> None:
    buyer = token("buyer-d", "buyer")
    r = await place_order(api, buyer, "ev_00000000000000000000", 1)
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"
    r = await api.post("/v1/orders", json={"event_id": "x", "quantity": -1}, headers=bearer(buyer))
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    r = await api.post(
        "/v1/orders", content=b"{not json", headers={**bearer(buyer), "content-type": "application/json"}
    )
    assert r.status_code == 422


async def test_snapshot_after_the_live_counters_expired(
    api: httpx.AsyncClient, token: TokenFactory, stack: Stack
) -> None:
    # Given a completed 2-ticket order whose Redis progress hash has expired
    buyer = token("snapshot-buyer", "buyer")
    event = await create_event(api, token("snapshot-org", "organizer"), capacity=5)
    order = (await place_order(api, buyer, event["id"], 2)).json()
    await collect_progress(order["progress_url"], buyer)
    redis = redis_of(stack)
    try:

        async def projected() -> bool:
            got = (await api.get(f"/v1/orders/{order['id']}", headers=bearer(buyer))).json()
            return bool(got["status"] == "completed")

        await wait_until(projected, 60)
        await redis.delete(streams.order_progress(order["id"]))
    finally:
        await redis.aclose()
    # Then the socket's snapshot and the API both answer from the projected outcome
    (snapshot,) = await collect_progress(order["progress_url"], buyer, after=None, stop_after=1)
    assert snapshot["type"] == "snapshot"
    assert (snapshot["total"], snapshot["rendered"], snapshot["failed"], snapshot["completed"]) == (2, 2, 0, True)
    got = (await api.get(f"/v1/orders/{order['id']}", headers=bearer(buyer))).json()
    assert (got["status"], got["rendered"], got["failed"]) == ("completed", 2, 0)


async def test_a_new_event_has_its_designs_before_its_first_order(
    api: httpx.AsyncClient, token: TokenFactory, stack: Stack
) -> None:
    """Creating an event asks the renderers for one design per tier (stored in
    Redis for every process), without any order placed."""
    redis = redis_of(stack)

    async def stored() -> set[str]:
        keys = {k.decode() async for k in redis.scan_iter(match=streams.design("*"))}
        return {k for k in keys if not k.endswith(":building")}

    try:
        before = await stored()
        tiers = [
            {"id": "standard", "name": "Standard", "price": "25.00"},
            {"id": "vip", "name": "VIP Lounge", "price": "90.00", "lane": "vip"},
            {"id": "balcony", "name": "Balcony", "price": "40.00"},
        ]
        await create_event(api, token("org-designs", "organizer"), name="Designs Ahead Night", tiers=tiers)
        await wait_until(lambda: _grown(stored, before, len(tiers)), 120)
        assert len(await stored() - before) == len(tiers)
    finally:
        await redis.aclose()


async def _grown(stored: Callable[[], Awaitable[set[str]]], before: set[str], by: int) -> bool:
    return len(await stored() - before) >= by


def event_with(field: str, text: str) -> dict[str, object]:
    """An event's body whose ``field`` (name, venue or tier name) is ``text``."""
    body: dict[str, object] = {
        "name": "Night of Tests", "venue": "Loopback Arena", "starts_at": "2027-06-01T19:30:00Z",
        "capacity": 10, "price": "25.00", "currency": "EUR",
    }  # fmt: skip
    if field == "tier name":
        body["tiers"] = [{"id": "standard", "name": text, "price": "25.00"}]
    else:
        body[field] = text
    return body


@pytest.mark.parametrize("field", ["name", "venue", "tier name"])
async def test_an_event_text_no_font_can_draw_is_refused(
    api: httpx.AsyncClient, token: TokenFactory, field: str
) -> None:
    """Never boxes on a ticket: a character no font of the chain draws is a 422 at creation."""
    undrawable = "Runes ᚠᚢᚦ"  # Runic: not in the ticket's font chain
    organizer = token("org-glyphs", "organizer")
    r = await api.post("/v1/events", json=event_with(field, undrawable), headers=bearer(organizer))
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert f"{field} cannot be printed" in r.json()["title"] and "U+16A0" in r.json()["detail"]


@pytest.mark.parametrize("field", ["name", "venue", "tier name"])
async def test_an_event_text_too_long_for_its_line_is_refused(
    api: httpx.AsyncClient, token: TokenFactory, field: str
) -> None:
    """Never wrapped on a ticket: a text within the length limit that does not
    fit its line even at the smallest size is a 422 at creation; a long one that
    fits once shrunk is accepted."""
    wide = {"name": "W" * 120, "venue": "W" * 120, "tier name": "W" * 40}[field]
    shrinks = {"name": "Night " * 8, "venue": "Hall " * 10, "tier name": "Balcony Row"}[field].strip()
    organizer = token("org-long", "organizer")
    for text, expected in ((wide, 422), (shrinks, 201)):
        r = await api.post("/v1/events", json=event_with(field, text), headers=bearer(organizer))
        assert r.status_code == expected, (text, r.text)
        if expected == 422:
            assert r.json()["title"] == "text too long" and r.json()["detail"].startswith(field), r.text
