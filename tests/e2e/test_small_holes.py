"""Small holes a hostile client could use against everyone else, each tried for
real: an organiser creating events (designs) in a loop, check-in nonces kept
for ever, the api's /metrics open to anyone, and a waiting-room link whose
return address sends the buyer to another "checkout"."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import expect
from ticketry.db import connect_mongo
from ticketry.documents import ScanAnswer
from ticketry_api.service_layer.checkins import forget_old_nonces
from ticketry_api.store import Store
from ticketry_devstack.procs import Stack

from tests.conftest import SHOP_ORIGIN, TokenFactory, stack_of_its_own
from tests.e2e.pages_support import browser
from tests.helpers import bearer, checkin_list, codes_of, create_event, place_order, scan

pytestmark = pytest.mark.e2e

EVENTS_PER_MIN = 4
DESIGNS_PER_MIN = 10
METRICS_TOKEN = "scrape-me-0123456789abcdef"


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    env = {
        "TICKETRY_RATE_EVENTS_PER_MIN": str(EVENTS_PER_MIN),
        "TICKETRY_RATE_DESIGNS_PER_MIN": str(DESIGNS_PER_MIN),
        "TICKETRY_METRICS_TOKEN": METRICS_TOKEN,
        # An hour's window: however slowly this host builds designs, the loop stays in one.
        "TICKETRY_RATE_WINDOW_S": "3600",
    }
    with stack_of_its_own(tmp_path_factory, "small-holes", renderers=1, extra_env=env) as s:
        yield s


@pytest.fixture
async def own_api(own: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=own.api_url, timeout=60) as client:
        yield client


def event_body(name: str, tiers: int) -> dict[str, Any]:
    return {
        "name": name, "venue": "Loopback Arena", "starts_at": "2027-06-01T19:30:00Z", "capacity": 1000,
        "price": "25.00", "currency": "EUR",
        "tiers": [{"id": f"t{i}", "name": f"Tier {i}", "price": "25.00"} for i in range(tiers)],
    }  # fmt: skip


async def own_events(api: httpx.AsyncClient, org: str) -> int:
    r = await api.get("/v1/events", params={"limit": 100}, headers=bearer(org))
    assert r.status_code == 200, r.text
    return len(r.json()["items"])


def assert_problem(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = r.json()
    assert body["status"] == status and body["title"] and body["detail"]
    return body


# --- an organiser creating events (and their designs) in a loop -------------------


async def test_an_organiser_creating_events_in_a_loop_is_refused_and_others_are_not(
    own_api: httpx.AsyncClient, token: TokenFactory
) -> None:
    # Given an organiser who posts one-tier events in a loop, and another who
    # posts events of six tiers (six designs each)
    looper, wide, other = (token(f"holes-org-{n}", "organizer") for n in ("loop", "wide", "other"))
    buyer = token("holes-buyer", "buyer")
    answers = [
        await own_api.post("/v1/events", json=event_body(f"Loop {i}", 1), headers=bearer(looper)) for i in range(10)
    ]
    wide_answers = [
        await own_api.post("/v1/events", json=event_body(f"Wide {i}", 6), headers=bearer(wide)) for i in range(3)
    ]
    # Then the loop gets its limit of events and 429 after, with Retry-After
    assert [r.status_code for r in answers] == [201] * EVENTS_PER_MIN + [429] * (10 - EVENTS_PER_MIN)
    refused = assert_problem(answers[-1], 429)
    assert int(answers[-1].headers["retry-after"]) >= 1 and "events" in refused["detail"]
    # And the wide one its designs' worth: one event of six, not a second (twelve > ten)
    assert [r.status_code for r in wide_answers] == [201, 429, 429]
    assert "tiers" in assert_problem(wide_answers[1], 429)["detail"]
    # And nothing more was created than the 201s say
    assert await own_events(own_api, looper) == EVENTS_PER_MIN
    assert await own_events(own_api, wide) == 1
    # While another organiser still creates an event, a buyer orders (202) and the api is ready
    event = await create_event(own_api, other, capacity=10)
    assert (await place_order(own_api, buyer, event["id"], 1)).status_code == 202
    assert (await own_api.get("/readyz")).status_code == 200


# --- check-in nonces have a lifetime ----------------------------------------------


async def test_check_in_nonces_older_than_their_lifetime_are_swept_and_younger_ones_answer(
    api: httpx.AsyncClient, token: TokenFactory, stack: Stack
) -> None:
    # Given a ticket admitted by an offline scanner's upload under a nonce
    org, buyer = token("holes-org-door", "organizer"), token("holes-buyer-door", "buyer")
    staff = token("holes-staff-door", "staff", org="holes-org-door")
    event = await create_event(api, org)
    door = await checkin_list(api, org, event["id"])
    order = (await place_order(api, buyer, event["id"], 1)).json()
    (code,) = await codes_of(api, order, buyer)
    first = await scan(api, staff, code, door, nonce="holes-nonce-0001")
    assert first.status_code == 200, first.text
    ttl_s = 7 * 24 * 3600
    mongo = await connect_mongo(stack.env["TICKETRY_MONGO_URL"], create_indexes=False)
    try:
        db = Store.create()
        key = "holes-staff-door\x1fholes-nonce-0001"
        kept_at = (await db.checkins.answer(key) or {})["at"]
        # When the sweep runs a second before the nonce's lifetime ends
        await forget_old_nonces(db, ttl_s, now=kept_at + timedelta(seconds=ttl_s - 1))
        # Then the re-upload still gets its first answer
        again = await scan(api, staff, code, door, nonce="holes-nonce-0001")
        assert (again.status_code, again.json()) == (200, first.json())
        # When it runs a second after, the nonce is gone from the store
        gone = await forget_old_nonces(db, ttl_s, now=kept_at + timedelta(seconds=ttl_s + 1))
        assert gone >= 1
        assert await db.checkins.answer(key) is None
        assert await ScanAnswer.get_pymongo_collection().count_documents({"at": {"$lte": kept_at}}) == 0
        # And a late upload is judged afresh: the ticket still admits only once
        late = await scan(api, staff, code, door, nonce="holes-nonce-0001")
        assert late.status_code == 409 and late.json()["ticket_id"] == order["tickets"][0], late.text
        assert (await db.checkins.answer(key) or {}).get("status") == 409
    finally:
        await mongo.close()


# --- /metrics is no public page ---------------------------------------------------


async def test_metrics_need_the_token_where_one_is_set(own_api: httpx.AsyncClient) -> None:
    # Given an api with a metrics token: anyone without it, loopback included, is refused
    assert_problem(await own_api.get("/metrics"), 401)
    assert_problem(await own_api.get("/metrics", headers=bearer("not-the-token-0123456789")), 401)
    # And with it the series are there
    ok = await own_api.get("/metrics", headers=bearer(METRICS_TOKEN))
    assert ok.status_code == 200 and "ticketry_orders_total" in ok.text


async def test_metrics_without_a_token_answer_loopback_clients_only(api: httpx.AsyncClient) -> None:
    # Given an api without a metrics token: a client elsewhere (here through a
    # proxy on this host, which uvicorn trusts to name it) is refused
    assert_problem(await api.get("/metrics", headers={"X-Forwarded-For": "203.0.113.7"}), 403)
    # And this host's Prometheus reads the series
    ok = await api.get("/metrics")
    assert ok.status_code == 200 and "ticketry_orders_total" in ok.text


# --- a waiting-room page links back to the shop only ------------------------------


async def test_a_places_page_links_back_to_the_registered_shop_only(
    api: httpx.AsyncClient, token: TokenFactory, tmp_path: Path
) -> None:
    # Given a room with two places, one page opened with a return address on
    # another origin (a link anyone can write), the other on the shop's
    org = token("holes-room-org", "organizer")
    eid = (await create_event(api, org, capacity=5, waiting_room=True))["id"]
    assert (await api.post(f"/v1/events/{eid}/queue/pause", headers=bearer(org))).status_code == 200
    places = []
    for who in ("holes-room-a", "holes-room-b"):
        r = await api.post(f"/v1/events/{eid}/queue", headers=bearer(token(who, "buyer")))
        assert r.status_code == 201, r.text
        places.append(r.json())
    elsewhere, shop = "https://shop.example.evil.test/checkout", f"{SHOP_ORIGIN}/checkout"
    async with browser(tmp_path / "profile") as context:
        pages = []
        for place, back in zip(places, (elsewhere, shop), strict=True):
            page = await context.new_page()
            await page.goto(place["status_page_url"] + "&r=" + back)
            await expect(page.get_by_test_id("queue-status")).to_have_attribute("data-status", "paused")
            pages.append(page)
        # When their turn comes
        assert (await api.post(f"/v1/events/{eid}/queue/resume", headers=bearer(org))).status_code == 200
        for page in pages:
            await expect(page.get_by_test_id("queue-status")).to_have_attribute("data-status", "admitted")
        # Then the shop's address is a link, the other one is not there at all
        await expect(pages[1].get_by_test_id("queue-continue")).to_have_attribute("href", shop)
        await expect(pages[0].locator("#next")).to_contain_text("Go back to the shop")
        assert await pages[0].get_by_test_id("queue-continue").count() == 0
        assert await pages[0].locator("a[href*='evil']").count() == 0
        # And a reload (the address read back from the tab's storage) shows none either
        await pages[0].reload()
        await expect(pages[0].get_by_test_id("queue-status")).to_have_attribute("data-status", "admitted")
        assert await pages[0].get_by_test_id("queue-continue").count() == 0
