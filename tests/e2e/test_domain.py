"""The ticketing domain over the real stack: tiers and prices, venue time,
check-in lists and event-bound codes, cancellation that stops work, per-buyer
limits, namespaced idempotency, lists with cursors, events from before tiers."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pypdf
import pytest
from prometheus_client.parser import text_string_to_metric_families
from ticketry import streams
from ticketry.auth import issue_token
from ticketry.documents import utcnow
from ticketry.ids import new_id, ticket_ids
from ticketry.settings import DEV_JWT_SECRET
from ticketry_devstack.procs import Stack, free_port, wait_port

from tests.chaos.support import db_of, mongo_of, order_events, redis_of
from tests.conftest import TokenFactory, make_stack
from tests.helpers import bearer, checkin_list, codes_of, create_event, eventually, place_order, scan, wait_rendered

pytestmark = pytest.mark.e2e

TIERS = [
    {"id": "standard", "name": "Standard", "price": "25.00"},
    {"id": "vip", "name": "VIP Lounge", "price": "90.00", "lane": "vip", "capacity": 5, "max_per_buyer": 4},
]
BIG = streams.SMALL_ORDER_MAX + 5  # an order too big for the vip lane's small orders


async def test_tiers_sell_at_their_own_price_lane_and_capacity(
    api: httpx.AsyncClient, token: TokenFactory, stack: Stack
) -> None:
    # Given an event with a standard tier and a VIP tier of 5 (its own price, the vip lane)
    org, buyer = token("dom-org-1", "organizer"), token("dom-buyer-1", "buyer")
    event = await create_event(api, org, capacity=100, tiers=TIERS, timezone="Europe/Berlin")
    assert [(t["id"], t["price"], t["lane"], t["capacity"]) for t in event["tiers"]] == [
        ("standard", "25.00", "standard", None), ("vip", "90.00", "vip", 5),
    ]  # fmt: skip
    # When a buyer orders VIP tickets
    r = await place_order(api, buyer, event["id"], 2, tier="vip")
    assert r.status_code == 202, r.text
    vip = r.json()
    # Then they cost the VIP price, whatever the buyer would like to pay or whichever lane
    assert (vip["tier"], vip["unit_price"], vip["currency"]) == ("vip", "90.00", "EUR")
    for extra in ({"price": "0.00"}, {"lane": "vip"}, {"unit_price": "1.00"}):
        assert (await place_order(api, buyer, event["id"], 1, **extra)).status_code == 422
    assert (await place_order(api, buyer, event["id"], 1, tier="balcony")).status_code == 422
    # And a VIP order too big to ride the vip lane as a small order rides it for its
    # tier, while a big standard order rides the standard lane
    assert (await place_order(api, token("dom-buyer-1b", "buyer"), event["id"], 3, tier="vip")).status_code == 202
    roomy_tiers = [TIERS[0], {**TIERS[1], "capacity": 40, "max_per_buyer": None}]
    roomy = await create_event(api, org, capacity=100, tiers=roomy_tiers)
    big_vip = (await place_order(api, token("dom-buyer-1d", "buyer"), roomy["id"], BIG, tier="vip")).json()
    assert big_vip["quantity"] == BIG > streams.SMALL_ORDER_MAX, big_vip
    big_std = (await place_order(api, buyer, event["id"], 30)).json()
    redis = redis_of(stack)
    try:
        vip_ids = {f[b"data"] for _, f in await redis.xrange(streams.RENDER_VIP, count=100_000)}
        std_ids = {f[b"data"] for _, f in await redis.xrange(streams.RENDER_STD, count=100_000)}
    finally:
        await redis.aclose()
    assert any(big_vip["tickets"][0].encode() in d for d in vip_ids)
    assert any(big_std["tickets"][0].encode() in d for d in std_ids)
    assert not any(big_std["tickets"][0].encode() in d for d in vip_ids)
    # And the tier's capacity holds: 5 VIP in all, whatever the event has left
    assert (await place_order(api, token("dom-buyer-1c", "buyer"), event["id"], 1, tier="vip")).status_code == 409
    got = (await api.get(f"/v1/events/{event['id']}", headers=bearer(org))).json()
    assert got["sold"] == 35 and {t["id"]: t["sold"] for t in got["tiers"]} == {"standard": 30, "vip": 5}
    order = (await api.get(f"/v1/orders/{vip['id']}", headers=bearer(buyer))).json()
    assert (order["tier"], order["unit_price"]) == ("vip", "90.00")


async def test_tier_capacity_is_never_oversold_under_concurrency(api: httpx.AsyncClient, token: TokenFactory) -> None:
    # Given a VIP tier of 5 in an event of 1,000
    org = token("dom-org-2", "organizer")
    tiers = [{"id": "standard", "name": "Standard", "price": "10.00"}, {**TIERS[1], "max_per_buyer": None}]
    event = await create_event(api, org, capacity=1000, tiers=tiers)
    # When 30 buyers race for one or two VIP tickets each
    answers = await asyncio.gather(
        *(place_order(api, token(f"dom-race-{i}", "buyer"), event["id"], 1 + i % 2, tier="vip") for i in range(30))
    )
    # Then exactly what fits was sold, never more
    assert {r.status_code for r in answers} <= {202, 409}
    sold = sum(r.json()["quantity"] for r in answers if r.status_code == 202)
    got = (await api.get(f"/v1/events/{event['id']}", headers=bearer(org))).json()
    assert sold == got["sold"] == {t["id"]: t["sold"] for t in got["tiers"]}["vip"] <= 5
    assert sold >= 4  # the last one or two may not fit a two-ticket order


async def test_max_per_buyer_counts_orders_and_cancels(api: httpx.AsyncClient, token: TokenFactory) -> None:
    org, buyer, other = token("dom-org-3", "organizer"), token("dom-buyer-3", "buyer"), token("dom-buyer-3b", "buyer")
    tiers = [TIERS[0], {**TIERS[1], "capacity": 50}]
    event = await create_event(api, org, capacity=100, tiers=tiers)
    first = await place_order(api, buyer, event["id"], 3, tier="vip")
    assert first.status_code == 202
    # When the buyer would pass the limit of 4 VIP tickets
    over = await place_order(api, buyer, event["id"], 2, tier="vip")
    # Then 409, nothing is taken, and another buyer is not affected
    assert over.status_code == 409 and "per buyer" in over.json()["detail"], over.text
    assert (await place_order(api, other, event["id"], 4, tier="vip")).status_code == 202
    assert (await place_order(api, buyer, event["id"], 1, tier="vip")).status_code == 202
    # And a cancelled order gives the buyer's count back
    assert (await api.post(f"/v1/orders/{first.json()['id']}/cancel", headers=bearer(buyer))).status_code == 200
    assert (await place_order(api, buyer, event["id"], 3, tier="vip")).status_code == 202
    assert (await place_order(api, buyer, event["id"], 1, tier="vip")).status_code == 409


async def test_venue_time_is_validated_and_shown(api: httpx.AsyncClient, token: TokenFactory) -> None:
    org = token("dom-org-4", "organizer")
    event = await create_event(
        api, org, starts_at="2027-06-01T20:00:00+02:00", doors_at="2027-06-01T18:30:00+02:00", timezone="Europe/Berlin"
    )
    assert event["timezone"] == "Europe/Berlin"
    # (stored in UTC, shown in the venue's zone)
    assert (event["starts_at"], event["doors_at"]) == ("2027-06-01T20:00:00+02:00", "2027-06-01T18:30:00+02:00")
    got = (await api.get(f"/v1/events/{event['id']}", headers=bearer(org))).json()
    assert (got["starts_at"], got["doors_at"]) == (event["starts_at"], event["doors_at"])
    base = {"name": "x", "venue": "y", "capacity": 5, "price": "1.00", "currency": "EUR"}
    for bad in (
        {"starts_at": "2027-06-01T20:00:00+02:00", "timezone": "Mars/Olympus_Mons"},
        {"starts_at": "2027-06-01T20:00:00+02:00", "timezone": "../../etc/passwd"},
        {"starts_at": "2027-06-01T20:00:00"},  # no offset: which 20:00?
        {"starts_at": "2027-06-01T20:00:00Z", "doors_at": "2027-06-01T21:00:00Z"},  # doors after the start
        {"starts_at": "2027-06-01T20:00:00Z", "tiers": [TIERS[0], TIERS[0]]},  # one id twice
        {"starts_at": "2027-06-01T20:00:00Z", "tiers": [{**TIERS[0], "capacity": 6}]},  # more than the event
    ):
        r = await api.post("/v1/events", json={**base, **bad}, headers=bearer(org))
        assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json"), (bad, r.text)


async def test_check_in_lists_bind_codes_to_their_event_and_tier(api: httpx.AsyncClient, token: TokenFactory) -> None:
    # Given two events of two organisers, each with a main door; A also has a VIP-only door
    org_a, org_b, buyer = token("dom-org-5a", "organizer"), token("dom-org-5b", "organizer"), token("dom-b5", "buyer")
    a = await create_event(api, org_a, tiers=TIERS)
    b = await create_event(api, org_b, price="5.00")
    door_a, door_b = await checkin_list(api, org_a, a["id"]), await checkin_list(api, org_b, b["id"])
    vip_door = await checkin_list(api, org_a, a["id"], tiers=["vip"], name="VIP entrance")
    # (only an event's organiser makes its lists, of its own tiers)
    for who, body, status in ((org_b, {"name": "x"}, 404), (org_a, {"name": "x", "tiers": ["gold"]}, 409)):
        r = await api.post(f"/v1/events/{a['id']}/checkin-lists", json=body, headers=bearer(who))
        assert r.status_code == status, r.text
    cheap = (await place_order(api, buyer, b["id"], 1)).json()
    std = (await place_order(api, buyer, a["id"], 1)).json()
    (cheap_code,), (std_code,) = await codes_of(api, cheap, buyer), await codes_of(api, std, buyer)
    staff = token("dom-staff-5", "staff", events=[a["id"], b["id"]])

    # When the cheap ticket of event B is scanned at event A's door
    r = await scan(api, staff, cheap_code, door_a)
    # Then it is refused as of another list, and stays unused
    assert r.status_code == 409 and r.json()["type"].endswith("/wrong-list"), r.text
    # And a standard ticket of A does not pass the VIP door either
    r = await scan(api, staff, std_code, vip_door)
    assert r.status_code == 409 and r.json()["type"].endswith("/wrong-list"), r.text
    # And each ticket still admits at its own event's list, with its holder and tier, once
    ok = await scan(api, staff, cheap_code, door_b)
    assert ok.status_code == 200, ok.text
    assert {k: ok.json()[k] for k in ("ticket_id", "event_id", "tier", "holder_name")} == {
        "ticket_id": cheap["tickets"][0], "event_id": b["id"], "tier": "standard", "holder_name": "Ada Lovelace",
    }  # fmt: skip
    assert (await scan(api, staff, cheap_code, door_b)).status_code == 409
    assert (await scan(api, staff, std_code, door_a)).status_code == 200

    # And a staff token limited to event B may not use A's lists
    staff_b = issue_token("dom-staff-5b", "staff", key=DEV_JWT_SECRET, events=[b["id"]])
    assert (await scan(api, staff_b, std_code, door_a)).status_code == 403
    assert (await api.get(f"/v1/events/{a['id']}/checkin-lists", headers=bearer(staff_b))).status_code == 403
    lists = (await api.get(f"/v1/events/{a['id']}/checkin-lists", headers=bearer(staff))).json()["items"]
    assert {lst["id"]: lst["tiers"] for lst in lists} == {door_a: [], vip_door: ["vip"]}
    # (an unknown list is 404)
    assert (await scan(api, staff, std_code, "cl_" + "0" * 20)).status_code == 404


async def test_a_nonce_gets_its_first_answer_again(api: httpx.AsyncClient, token: TokenFactory, stack: Stack) -> None:
    org, buyer, staff = (
        token("dom-org-6", "organizer"),
        token("dom-buyer-6", "buyer"),
        token("dom-staff-6", "staff", org="dom-org-6"),
    )
    event = await create_event(api, org)
    door = await checkin_list(api, org, event["id"])
    order = (await place_order(api, buyer, event["id"], 1)).json()
    (code,) = await codes_of(api, order, buyer)
    # When an offline scanner uploads the same scan three times, twice at once
    first, twin = await asyncio.gather(*(scan(api, staff, code, door, nonce="scan-0001-abc") for _ in range(2)))
    again = await scan(api, staff, code, door, nonce="scan-0001-abc")
    # Then each upload gets the first answer, an admission, and there is one check-in
    assert first.status_code == twin.status_code == again.status_code == 200, (first.text, twin.text)
    assert first.json() == twin.json() == again.json()
    # And another scan of the same ticket (another nonce) is told it was already used
    assert (await scan(api, staff, code, door, nonce="scan-0002-abc")).status_code == 409
    mongo = mongo_of(stack)
    try:
        assert await db_of(mongo).admissions.count_documents({"ticket_id": order["tickets"][0]}) == 1
    finally:
        await mongo.close()


async def test_idempotency_keys_of_two_buyers_never_meet(api: httpx.AsyncClient, token: TokenFactory) -> None:
    # Given buyers `alice` and `alice:x` and keys that spell the same `alice:x:k`
    event = await create_event(api, token("dom-org-7", "organizer"))
    alice, alice_x = token("alice", "buyer"), token("alice:x", "buyer")
    a = await place_order(api, alice, event["id"], 1, idempotency_key="x:k")
    b = await place_order(api, alice_x, event["id"], 1, idempotency_key="k")
    # Then two orders, each its buyer's; and a replay returns each its own
    assert a.status_code == b.status_code == 202 and a.json()["id"] != b.json()["id"]
    assert (await place_order(api, alice_x, event["id"], 1, idempotency_key="k")).json()["id"] == b.json()["id"]
    assert (await place_order(api, alice, event["id"], 1, idempotency_key="x:k")).json()["id"] == a.json()["id"]
    assert (await api.get(f"/v1/orders/{a.json()['id']}", headers=bearer(alice_x))).status_code == 404


@pytest.fixture
def metered_stack(tmp_path: Path) -> Iterator[tuple[Stack, list[int]]]:
    """A stack of its own whose two renderers serve their own ``/metrics``: what
    they skipped and rendered, with no other test's orders in the counts."""
    stack = make_stack(tmp_path / "stack", renderers=0)
    try:
        ports = [free_port() for _ in range(2)]
        for port in ports:
            stack.start_renderer({"TICKETRY_METRICS_PORT": str(port)})
        stack.wait_renderers(len(ports))
        for port, proc in zip(ports, stack.renderers, strict=True):
            wait_port(port, 60, proc.popen)
        yield stack, ports
    finally:
        stack.stop()


async def renderer_counts(ports: list[int]) -> dict[str, float]:
    """Every renderer's ``ticketry_*`` samples summed, by sample name."""
    out: dict[str, float] = {}
    async with httpx.AsyncClient(timeout=30) as client:
        for port in ports:
            r = await client.get(f"http://127.0.0.1:{port}/metrics")
            assert r.status_code == 200, r.text
            for family in text_string_to_metric_families(r.text):
                for sample in family.samples:
                    if sample.name.startswith("ticketry_"):
                        out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


@pytest.fixture
async def metered_api(metered_stack: tuple[Stack, list[int]]) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=metered_stack[0].api_url, timeout=60) as client:
        yield client


@pytest.mark.timeout(900)
async def test_an_immediate_cancel_of_a_big_order_renders_almost_nothing(
    metered_stack: tuple[Stack, list[int]], metered_api: httpx.AsyncClient, token: TokenFactory
) -> None:
    (stack, ports), api = metered_stack, metered_api
    # Given a 10,000-ticket order
    org, buyer = token("dom-org-8", "organizer"), token("dom-buyer-8", "buyer")
    event = await create_event(api, org, capacity=10_000)
    r = await place_order(api, buyer, event["id"], 10_000)
    assert r.status_code == 202, r.text
    order = r.json()
    # When the buyer cancels it at once
    c = await api.post(f"/v1/orders/{order['id']}/cancel", headers=bearer(buyer))
    assert c.status_code == 200, c.text
    redis = redis_of(stack)
    try:
        # Then every request of it is consumed (the render stream's group has nothing of it
        # pending), its last event is order.cancelled, and few tickets were rendered
        async def drained() -> bool:
            info = await redis.xinfo_groups(streams.RENDER_STD)
            group = next(g for g in info if g["name"] == streams.RENDERERS_GROUP.encode())
            return int(group["pending"]) == 0 and int(group.get("lag") or 0) == 0

        await eventually(drained, "the cancelled order's requests consumed", 600)
        events = await order_events(redis, order["id"])
    finally:
        await redis.aclose()
    types = [f["type"] for _, f in events]
    assert types[-1] == "order.cancelled" and types.count("order.cancelled") == 1
    assert "order.completed" not in types
    # And the renderers skipped its requests instead of rendering them (the emit script
    # announces no ticket of a cancelled order, so the events alone cannot tell), and
    # what they did render left (almost) no PDF behind
    counts = await renderer_counts(ports)
    skipped, renders = counts["ticketry_renderer_skipped_total"], counts["ticketry_renderer_rendered_total"]
    order_dir = Path(stack.env["TICKETRY_STORAGE_DIR"]) / order["id"]

    def stored_pdfs() -> int:
        return len(list(order_dir.glob("*.pdf"))) if order_dir.exists() else 0

    async def none_stored() -> bool:
        return stored_pdfs() == 0

    # (a renderer deletes what it stored for an order cancelled meanwhile just after its batch)
    await eventually(none_stored, f"no PDF of the cancelled order left ({stored_pdfs()} at first)")
    stored = stored_pdfs()
    print(
        f"\nCANCEL at once: {int(renders)} of 10,000 tickets rendered, {int(skipped)} skipped, "
        f"{stored} PDFs left in storage; {types.count('ticket.rendered')} announced"
    )
    assert renders < 1000 and skipped + renders >= 10_000, counts
    assert stored == 0 and types.count("ticket.rendered") <= renders
    # And its tickets are cancelled, page by page, each exactly once, and no PDF is served
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 200, **({"cursor": cursor} if cursor else {})}
        page = (await api.get(f"/v1/orders/{order['id']}/tickets", params=params, headers=bearer(buyer))).json()
        assert {t["status"] for t in page["items"]} <= {"cancelled"}
        seen += [t["id"] for t in page["items"]]
        if (cursor := page["next"]) is None:
            break
    assert seen == ticket_ids(order["id"], 10_000)
    for tid in (order["tickets"][0], order["tickets"][-1]):
        assert (await api.get(f"/v1/tickets/{tid}/pdf", headers=bearer(buyer))).status_code == 410
    got = (await api.get(f"/v1/orders/{order['id']}", headers=bearer(buyer))).json()
    assert got["status"] == "cancelled" and len(got["tickets"]) == 64 and got["tickets_next"]
    assert (await api.get(f"/v1/events/{event['id']}", headers=bearer(org))).json()["sold"] == 0


async def test_cancel_cancel_and_scan_never_admit_a_cancelled_ticket(
    api: httpx.AsyncClient, token: TokenFactory
) -> None:
    # Given 20 one-ticket orders whose buyer cancels twice while staff scan
    org, buyer, staff = (
        token("dom-org-9", "organizer"),
        token("dom-buyer-9", "buyer"),
        token("dom-staff-9", "staff", org="dom-org-9"),
    )
    event = await create_event(api, org, capacity=20)
    door = await checkin_list(api, org, event["id"])
    orders = [(await place_order(api, buyer, event["id"], 1)).json() for _ in range(20)]
    all_codes = [(await codes_of(api, o, buyer))[0] for o in orders]

    async def race(order: dict[str, Any], code: str) -> tuple[int, int, int]:
        url = f"/v1/orders/{order['id']}/cancel"
        c1, c2, s = await asyncio.gather(
            api.post(url, headers=bearer(buyer)), api.post(url, headers=bearer(buyer)), scan(api, staff, code, door)
        )
        return c1.status_code, c2.status_code, s.status_code

    results = await asyncio.gather(*(race(o, c) for o, c in zip(orders, all_codes, strict=True)))
    # Then for each order: either the scan admitted and both cancels were refused,
    # or a cancel won and the scan was refused; never both
    cancelled = 0
    for order, code, (c1, c2, s) in zip(orders, all_codes, results, strict=True):
        if s == 200:
            assert (c1, c2) == (409, 409), (c1, c2, s)
        else:
            assert s == 404 and (c1, c2) == (200, 200), (c1, c2, s)
            cancelled += 1
        # And the records agree afterwards: a cancelled ticket never admits, an admitted one stays
        again = await scan(api, staff, code, door)
        assert again.status_code == (409 if s == 200 else 404)
        got = (await api.get(f"/v1/orders/{order['id']}", headers=bearer(buyer))).json()
        assert (got["status"] == "cancelled") == (s != 200)
    sold = (await api.get(f"/v1/events/{event['id']}", headers=bearer(org))).json()["sold"]
    assert sold == 20 - cancelled
    print(f"\nCANCEL/CANCEL/SCAN: {cancelled} cancelled, {20 - cancelled} admitted")


async def test_lists_are_paged_and_own_only(api: httpx.AsyncClient, token: TokenFactory) -> None:
    org, other_org = token("dom-org-10", "organizer"), token("dom-org-10b", "organizer")
    buyer, other = token("dom-buyer-10", "buyer"), token("dom-buyer-10b", "buyer")
    mine = [await create_event(api, org, name=f"Show {i}") for i in range(3)]
    theirs = await create_event(api, other_org)
    # Own events, two to a page
    ids, cursor = [], None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await api.get("/v1/events", params=params, headers=bearer(org))).json()
        ids += [e["id"] for e in page["items"]]
        if (cursor := page["next"]) is None:
            break
    assert sorted(ids) == sorted(e["id"] for e in mine) and theirs["id"] not in ids
    assert (await api.get("/v1/events", params={"cursor": "!!"}, headers=bearer(org))).status_code == 422
    # A buyer's own orders, of one event or all
    placed = [(await place_order(api, buyer, mine[i % 2]["id"], 1)).json()["id"] for i in range(3)]
    await place_order(api, other, mine[0]["id"], 1)
    all_mine = (await api.get("/v1/orders", headers=bearer(buyer))).json()["items"]
    assert sorted(o["id"] for o in all_mine) == sorted(placed)
    of_first = (await api.get("/v1/orders", params={"event_id": mine[0]["id"]}, headers=bearer(buyer))).json()
    assert sorted(o["id"] for o in of_first["items"]) == sorted(placed[0::2])
    # An event's orders, for its organiser only
    r = await api.get(f"/v1/events/{mine[0]['id']}/orders", headers=bearer(org))
    assert r.status_code == 200 and len(r.json()["items"]) == 3
    assert (await api.get(f"/v1/events/{mine[0]['id']}/orders", headers=bearer(other_org))).status_code == 404
    assert (await api.get(f"/v1/events/{mine[0]['id']}/orders", headers=bearer(buyer))).status_code == 403


async def test_an_event_from_before_tiers_sells_one_standard_tier_in_utc(
    api: httpx.AsyncClient, token: TokenFactory, stack: Stack
) -> None:
    # Given an event stored as events were before tiers and time zones
    org, buyer = token("dom-org-11", "organizer"), token("dom-buyer-11", "buyer")
    event_id = new_id("ev")
    mongo = mongo_of(stack)
    try:
        await db_of(mongo).events.insert_one({
            "_id": event_id, "name": "Old Show", "venue": "Old Hall", "starts_at": utcnow(), "capacity": 10,
            "price_minor": 1500, "currency": "EUR", "organizer_id": "dom-org-11", "created_at": utcnow(),
        })  # fmt: skip
    finally:
        await mongo.close()
    # Then it shows one standard tier at its price, in UTC, and sells it
    got = (await api.get(f"/v1/events/{event_id}", headers=bearer(org))).json()
    assert got["timezone"] == "UTC" and [(t["id"], t["price"]) for t in got["tiers"]] == [("standard", "15.00")]
    order = await place_order(api, buyer, event_id, 2)
    assert order.status_code == 202 and order.json()["unit_price"] == "15.00", order.text
    assert (await place_order(api, buyer, event_id, 1, tier="vip")).status_code == 422
    await codes_of(api, order.json(), buyer)


async def test_an_order_from_before_tiers_reads_at_its_events_price(
    api: httpx.AsyncClient, token: TokenFactory, stack: Stack
) -> None:
    # Given an event and a VIP order stored as they were before tiers: the order has
    # no unit price, and its "vip" was a lane, not one of the event's tiers
    org, buyer = token("dom-org-13", "organizer"), token("dom-buyer-13", "buyer")
    event_id, order_id = new_id("ev"), new_id("or")
    mongo = mongo_of(stack)
    try:
        db = db_of(mongo)
        await db.events.insert_one({
            "_id": event_id, "name": "Old Gala", "venue": "Old Hall", "starts_at": utcnow(), "capacity": 10,
            "price_minor": 4250, "currency": "EUR", "organizer_id": "dom-org-13", "created_at": utcnow(),
        })  # fmt: skip
        await db.orders.insert_one({
            "_id": order_id, "owner_id": "dom-buyer-13", "event_id": event_id, "quantity": 2, "tier": "vip",
            "holder_name": "Ada Lovelace", "status": "processing", "ticket_ids": ticket_ids(order_id, 2),
            "idem": f"auto:{order_id}", "request_hash": "0" * 64, "created_at": utcnow(),
        })  # fmt: skip
    finally:
        await mongo.close()
    # When its buyer and its organiser read it
    r = await api.get(f"/v1/orders/{order_id}", headers=bearer(buyer))
    # Then it reads as sold at its event's price, in its tier, with its tickets
    assert r.status_code == 200, r.text
    got = r.json()
    assert (got["tier"], got["unit_price"], got["currency"], got["total"]) == ("vip", "42.50", "EUR", 2), got
    assert [t["id"] for t in got["tickets"]] == ticket_ids(order_id, 2)
    mine = (await api.get("/v1/orders", params={"event_id": event_id}, headers=bearer(buyer))).json()["items"]
    assert [(o["id"], o["unit_price"]) for o in mine] == [(order_id, "42.50")]
    listed = (await api.get(f"/v1/events/{event_id}/orders", headers=bearer(org))).json()["items"]
    assert [(o["id"], o["unit_price"]) for o in listed] == [(order_id, "42.50")]


async def test_each_ticket_prints_its_holder_in_venue_time(api: httpx.AsyncClient, token: TokenFactory) -> None:
    # Given an event at 20:00 in Berlin and an order naming each ticket's holder, in three scripts
    org, buyer = token("dom-org-12", "organizer"), token("dom-buyer-12", "buyer")
    event = await create_event(
        api, org, starts_at="2027-06-01T20:00:00+02:00", doors_at="2027-06-01T18:30:00+02:00", timezone="Europe/Berlin"
    )
    holders = ["Łukasz Żółć", "李小龙", "Дмитрий Шостакович"]
    r = await place_order(api, buyer, event["id"], 3, holders=holders)
    assert r.status_code == 202, r.text
    order = r.json()
    await wait_rendered(api, order["id"], buyer)
    # Then each ticket prints its own holder, and the venue's 20:00 (not 18:00 UTC)
    for tid, holder in zip(order["tickets"], holders, strict=True):
        assert (await api.get(f"/v1/tickets/{tid}", headers=bearer(buyer))).json()["holder_name"] == holder
        pdf = await api.get(f"/v1/tickets/{tid}/pdf", headers=bearer(buyer))
        text = pypdf.PdfReader(io.BytesIO(pdf.content)).pages[0].extract_text()
        assert holder in text and "20:00" in text and "18:30" in text and "18:00" not in text, text
    # And a name no font can draw, or too long for its line, is refused at once (never boxes, never wrapped)
    for bad in (["Ra 𓂀", "Ada", "Bob"], ["W" * 120, "Ada", "Bob"]):
        r = await place_order(api, buyer, event["id"], 3, holders=bad)
        assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json"), r.text
    assert (await place_order(api, buyer, event["id"], 2, holders=["Only One"])).status_code == 422
