"""The on-sale rush over the real stack: backpressure on
POST /v1/orders, and the waiting room (places, fairness, permissions, live
positions, a small rush that sells out exactly)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest
import websockets
from redis.asyncio import Redis
from ticketry import streams
from ticketry.replies import as_text
from ticketry_devstack.procs import Stack

from tests.conftest import TokenFactory, stack_of_its_own
from tests.helpers import bearer, create_event, eventually, honouring_retry_after, metric_sum, place_order

pytestmark = pytest.mark.e2e

BOUND = 2  # orders in flight in the burst stack (and no queue)
ROOM_BOUND = 5  # places that may wait in one room of the burst stack


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    env = {
        "TICKETRY_MAX_INFLIGHT_ORDERS": str(BOUND),
        "TICKETRY_MAX_QUEUED_ORDERS": "0",
        "TICKETRY_ROOM_MAX_QUEUE": str(ROOM_BOUND),
    }
    with stack_of_its_own(tmp_path_factory, "bounded", 1, env) as s:
        yield s


@pytest.fixture
async def bapi(bounded: Stack) -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    async with httpx.AsyncClient(base_url=bounded.api_url, timeout=60, limits=limits) as client:
        yield client


async def shed_total(api: httpx.AsyncClient) -> float:
    text = (await api.get("/metrics")).text
    return metric_sum(text, "ticketry_orders_shed_total")


async def sold(api: httpx.AsyncClient, event_id: str, tok: str) -> int:
    return int((await api.get(f"/v1/events/{event_id}", headers=bearer(tok))).json()["sold"])


async def test_a_burst_over_the_bound_is_shed_at_once_and_nothing_accepted_is_lost(
    bapi: httpx.AsyncClient, token: TokenFactory
) -> None:
    # Given an api that runs 2 orders at once and queues none, and an event of 40
    org = token("rush-org-1", "organizer")
    event = await create_event(bapi, org, capacity=40)
    before = await shed_total(bapi)
    buyers = [token(f"rush-burst-{i}", "buyer") for i in range(60)]

    # When 60 buyers order one ticket each at once
    async def one(tok: str) -> tuple[httpx.Response, float]:
        r = await place_order(bapi, tok, event["id"], 1)
        return r, time.monotonic()

    answers = await asyncio.gather(*(one(t) for t in buyers))

    # Then each gets 202, or 503 problem+json with Retry-After, shed before the work in flight ended
    statuses = [r.status_code for r, _ in answers]
    assert set(statuses) <= {202, 409, 503}, statuses
    shed = [(r, at) for r, at in answers if r.status_code == 503]
    assert shed, "60 orders at once over a bound of 2 shed none"
    for r, _ in shed:
        assert r.headers["content-type"] == "application/problem+json"
        assert int(r.headers["retry-after"]) >= 1
        assert r.json()["status"] == 503 and r.json()["title"] == "busy"
    assert min(at for _, at in shed) < max(at for r, at in answers if r.status_code == 202)
    assert await shed_total(bapi) - before >= len(shed)  # refused by the bound, not by the order code

    # And when the shed buyers retry (as Retry-After says) until they have an answer
    accepted = {buyers[i]: r.json()["id"] for i, (r, _) in enumerate(answers) if r.status_code == 202}
    refused = statuses.count(409)
    deadline = time.monotonic() + 120
    pending = [buyers[i] for i, (r, _) in enumerate(answers) if r.status_code == 503]
    while pending:
        assert time.monotonic() < deadline, f"{len(pending)} buyers still shed"
        again = await asyncio.gather(*(place_order(bapi, t, event["id"], 1) for t in pending))
        nxt = []
        for tok, r in zip(pending, again, strict=True):
            if r.status_code == 202:
                accepted[tok] = r.json()["id"]
            elif r.status_code == 409:
                refused += 1
            else:
                assert r.status_code == 503 and "retry-after" in r.headers, r.text
                nxt.append(tok)
        pending = nxt
        if pending:  # as a client does: wait what Retry-After says
            await asyncio.sleep(max(int(r.headers.get("retry-after", "1")) for r in again))

    # Then exactly the 40 tickets were sold, each to an order that exists, and the rest were told sold out
    assert len(accepted) == 40 and refused == 20
    assert await sold(bapi, event["id"], org) == 40
    for tok, order_id in accepted.items():
        got = await bapi.get(f"/v1/orders/{order_id}", headers=bearer(tok))
        assert got.status_code == 200, got.text


async def test_a_full_room_refuses_new_buyers_with_retry_after_and_keeps_its_places(
    bapi: httpx.AsyncClient, token: TokenFactory
) -> None:
    # Given a room bounded at 5 waiting places, selling in an hour
    org = token("rush-org-2", "organizer")
    event = await create_event(bapi, org, capacity=50, on_sale_at=on_sale_in(3600), waiting_room=True)
    buyers = [token(f"rush-full-{i}", "buyer") for i in range(12)]

    # When 12 buyers join at once
    answers = await asyncio.gather(*(bapi.post(f"/v1/events/{event['id']}/queue", headers=bearer(t)) for t in buyers))

    # Then 5 hold a place and 7 are told the queue is full, when to come back, as problem+json
    statuses = [r.status_code for r in answers]
    assert sorted(statuses) == [201] * ROOM_BOUND + [503] * (12 - ROOM_BOUND), statuses
    for r in answers:
        if r.status_code == 503:
            assert r.headers["content-type"] == "application/problem+json"
            assert r.json()["type"].endswith("/queue-full") and r.json()["title"] == "queue full", r.text
            assert r.headers["retry-after"] == "60"  # no admission rate before the sale
    # And a buyer with a place gets it again at the bound
    placed = [(t, r.json()) for t, r in zip(buyers, answers, strict=True) if r.status_code == 201]
    again = await join(bapi, placed[0][0], event["id"])
    assert again["queue_id"] == placed[0][1]["queue_id"]


# -- the waiting room (on the shared stack) ---------------------------------------------


def on_sale_in(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


async def join(api: httpx.AsyncClient, tok: str, event_id: str) -> dict[str, Any]:
    r = await api.post(f"/v1/events/{event_id}/queue", headers=bearer(tok))
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def rank_correlation(xs: list[int], ys: list[int]) -> float:
    """Spearman's rho of two lists of distinct values."""
    n = len(xs)
    rx = {v: i for i, v in enumerate(sorted(xs))}
    ry = {v: i for i, v in enumerate(sorted(ys))}
    d2 = sum((rx[x] - ry[y]) ** 2 for x, y in zip(xs, ys, strict=True))
    return 1 - 6 * d2 / (n * (n * n - 1))


async def test_places_unique_random_among_early_arrivals_in_order_after(
    api: httpx.AsyncClient, token: TokenFactory
) -> None:
    # Given a room with one ticket, selling in 15 s (one permission out: then nobody moves)
    org = token("room-org-1", "organizer")
    event = await create_event(api, org, capacity=1, on_sale_at=on_sale_in(15), waiting_room=True)
    assert event["waiting_room"] is True and event["on_sale_at"]
    early = [token(f"room-early-{i}", "buyer") for i in range(100)]
    late = [token(f"room-late-{i}", "buyer") for i in range(40)]

    # When 100 buyers queue before the sale (in this order), and each asks again
    first = [await join(api, t, event["id"]) for t in early]
    again = await asyncio.gather(*(join(api, t, event["id"]) for t in early))
    # Then each holds one place: the same again, no two alike; no position before the draw
    assert [p["queue_id"] for p in first] == [p["queue_id"] for p in again]
    assert len({p["queue_id"] for p in first}) == 100
    assert all(p["position"] is None and p["eta_s"] > 0 for p in first if p["early"])
    was_early = [p["early"] for p in first]
    assert sum(was_early) >= 50, "the early buyers came after the sale started"

    # When the sale has started and its one ticket's permission is out
    async def drawn() -> list[dict[str, Any]] | None:
        places = await asyncio.gather(*(join(api, t, event["id"]) for t in early))
        ready = all(p["position"] is not None for p in places) and sum(p["admitted"] for p in places) == 1
        return places if ready else None

    await eventually(drawn, "the draw and the first admission")
    # (from here nothing moves: the one permission stays out for minutes)
    places = await asyncio.gather(*(join(api, t, event["id"]) for t in early))
    # And 40 more buyers queue, one after the other
    later = [await join(api, t, event["id"]) for t in late]
    assert not any(p["early"] for p in later)

    # Then every early place is before every later one, the later ones in arrival order,
    # and the early ones in an order that has nothing to do with when they came
    positions = [p["position"] for p in places]
    early_pos = [pos for pos, e in zip(positions, was_early, strict=True) if e]
    late_pos = [pos for pos, e in zip(positions, was_early, strict=True) if not e] + [p["position"] for p in later]
    assert sorted(early_pos) == list(range(len(early_pos)))  # 0: the one admitted
    assert late_pos == sorted(late_pos) and len(set(late_pos)) == len(late_pos)
    assert max(early_pos) < min(late_pos)
    rho = rank_correlation(list(range(len(early_pos))), early_pos)
    assert abs(rho) < 0.6, f"early places follow arrival order (rho {rho:.2f})"  # random: |rho| ~ 0.1


async def test_orders_of_a_room_need_the_buyers_own_permission(api: httpx.AsyncClient, token: TokenFactory) -> None:
    # Given a room selling now, and two buyers in line (one ticket: only the first is admitted)
    org = token("room-org-2", "organizer")
    event = await create_event(api, org, capacity=1, waiting_room=True)
    alice, bob = token("room-alice", "buyer"), token("room-bob", "buyer")
    await join(api, alice, event["id"])
    await join(api, bob, event["id"])

    # When alice is admitted
    async def admitted() -> dict[str, Any] | None:
        place = await join(api, alice, event["id"])
        return place if place["admitted"] else None

    place = await eventually(admitted, "alice is admitted")
    permission = place["permission"]
    assert permission and place["position"] == 0 and place["expires_at"]

    # Then an order without a permission, or with another buyer's, is refused 403
    r = await place_order(api, alice, event["id"], 1)
    assert r.status_code == 403 and r.headers["content-type"] == "application/problem+json", r.text
    r = await api.post(
        "/v1/orders",
        json={"event_id": event["id"], "quantity": 1, "holder_name": "Bob", "tier": "standard"},
        headers={**bearer(bob), "Queue-Permission": permission},
    )
    assert r.status_code == 403, r.text
    r = await api.post(
        "/v1/orders",
        json={"event_id": event["id"], "quantity": 1, "holder_name": "Alice", "tier": "standard"},
        headers={**bearer(alice), "Queue-Permission": permission + "x"},
    )
    assert r.status_code == 403, r.text
    # And with her own it is accepted, once
    body = {"event_id": event["id"], "quantity": 1, "holder_name": "Alice", "tier": "standard"}
    r = await api.post("/v1/orders", json=body, headers={**bearer(alice), "Queue-Permission": permission})
    assert r.status_code == 202, r.text
    r = await api.post("/v1/orders", json=body, headers={**bearer(alice), "Queue-Permission": permission})
    assert r.status_code == 403 and "used" in r.json()["title"], r.text
    # And bob is told it is sold out
    bob_place = await eventually(lambda: _sold_out(api, bob, event["id"]), "bob hears it is sold out")
    assert not bob_place["admitted"] and bob_place["permission"] is None


async def _sold_out(api: httpx.AsyncClient, tok: str, event_id: str) -> dict[str, Any] | None:
    place = await join(api, tok, event_id)
    return place if place["sold_out"] else None


async def test_an_order_before_the_sale_is_refused(api: httpx.AsyncClient, token: TokenFactory) -> None:
    org, buyer = token("room-org-3", "organizer"), token("room-early-buyer", "buyer")
    event = await create_event(api, org, capacity=5, on_sale_at=on_sale_in(3600))
    r = await place_order(api, buyer, event["id"], 1)
    assert r.status_code == 409 and r.json()["type"].endswith("/not-on-sale"), r.text
    r = await api.post(f"/v1/events/{event['id']}/queue", headers=bearer(buyer))
    assert r.status_code == 409, r.text  # no waiting room on this event


async def follow(
    api: httpx.AsyncClient, tok: str, event_id: str, timeout_s: float = 300
) -> tuple[list[dict[str, Any]], int | None]:
    """Queue, follow the place's socket to its end (its admission, or sold out:
    the socket stays open then, for tickets that may come back), order with the
    permission (a 503 or 429 waited out: ``honouring_retry_after``); the messages
    and the order's status."""
    place = await join(api, tok, event_id)
    msgs: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout_s):
        async with websockets.connect(f"{place['progress_url']}?token={tok}") as ws:
            async for raw in ws:
                msgs.append(orjson.loads(raw))
                if msgs[-1]["type"] == "queue.sold_out":
                    break
        last = msgs[-1]
        if last["type"] != "queue.admitted":
            return msgs, None
        body = {"event_id": event_id, "quantity": 1, "holder_name": "Rush Buyer", "tier": "standard"}
        headers = {**bearer(tok), "Queue-Permission": last["permission"]}
        r = await honouring_retry_after(lambda: api.post("/v1/orders", json=body, headers=headers))
        return msgs, r.status_code


async def tick_rates(stack: Stack, event_id: str) -> dict[int, float]:
    """The room's rate at each admission tick (its Redis ms), from its update stream."""
    redis = Redis.from_url(stack.env["TICKETRY_REDIS_URL"])
    try:
        entries = await redis.xrange(streams.room_updates(event_id))
    finally:
        await redis.aclose()
    at, rate = streams.ROOM_AT.encode(), streams.ROOM_RATE.encode()
    return {int(as_text(f[at])): float(as_text(f[rate])) for _, f in entries}


def check_etas(msgs: list[dict[str, Any]], rates: dict[int, float]) -> int:
    """Each position in line a socket showed once the sale was open came with
    an estimated wait of that position at the rate of the tick it reflects
    (``at``), to the tenth of a second it is rounded to; none before the
    room's first tick (no rate yet). How many estimates were checked."""
    checked = 0
    for m in msgs:
        if m["type"] != "queue.position" or m["position"] is None or m["paused"]:
            continue
        rate = rates.get(m["at"], 0.0)
        if rate <= 0:
            assert m["eta_s"] is None, m
            continue
        assert m["eta_s"] is not None and abs(m["eta_s"] - m["position"] / rate) <= 0.05 + 1e-9, (m, rate)
        checked += 1
    return checked


async def test_a_place_shows_its_wait_at_the_rooms_rate_once_the_sale_is_open(
    api: httpx.AsyncClient, token: TokenFactory, stack: Stack
) -> None:
    # Given a room of one ticket on sale now, whose first buyer is admitted (the
    # room has a rate), and 60 more buyers in line behind her
    org = token("room-org-eta", "organizer")
    event = await create_event(api, org, capacity=1, waiting_room=True)
    first = token("room-eta-first", "buyer")
    await join(api, first, event["id"])
    await eventually(lambda: _admitted(api, first, event["id"]), "the first buyer is admitted")
    buyers = [token(f"room-eta-{i}", "buyer") for i in range(60)]
    places = await asyncio.gather(*(join(api, t, event["id"]) for t in buyers))
    last = max(range(len(places)), key=lambda i: places[i]["position"])

    # When the last of them follows the place
    async with asyncio.timeout(60), websockets.connect(f"{places[last]['progress_url']}?token={buyers[last]}") as ws:
        shown = orjson.loads(await ws.recv())

    # Then it shows its position, and as the wait that position at the room's rate
    assert (shown["type"], shown["position"], shown["paused"]) == ("queue.position", 60, False), shown
    assert check_etas([shown], await tick_rates(stack, event["id"])) == 1


async def test_a_small_rush_sells_out_exactly_and_every_buyer_hears(
    api: httpx.AsyncClient, token: TokenFactory, stack: Stack
) -> None:
    # Given a room of 50 tickets whose sale starts in 5 s
    org = token("room-org-4", "organizer")
    event = await create_event(api, org, capacity=50, on_sale_at=on_sale_in(5), waiting_room=True)
    buyers = [token(f"room-rush-{i}", "buyer") for i in range(200)]

    # When 200 buyers queue, follow their places and order when admitted
    results = await asyncio.gather(*(follow(api, t, event["id"]) for t in buyers))

    # Then every buyer got a definitive answer: tickets (202), or sold out (on the socket or as a 409)
    outcomes = [status if status is not None else msgs[-1]["type"] for msgs, status in results]
    assert set(outcomes) <= {202, 409, "queue.sold_out"}, set(outcomes)
    # And exactly the 50 tickets were sold, none twice
    assert outcomes.count(202) == 50
    assert await sold(api, event["id"], org) == 50
    # And each saw a position that only moved forward, then its end
    for msgs, _ in results:
        assert msgs[0]["type"] in ("queue.position", "queue.admitted", "queue.sold_out")
        positions = [m["position"] for m in msgs if m["type"] == "queue.position" and m["position"] is not None]
        assert positions == sorted(positions, reverse=True), positions
        assert all(m["type"] == "queue.position" for m in msgs[:-1])
        assert msgs[-1]["type"] in ("queue.admitted", "queue.sold_out")
    # And each wait shown once the sale was open was the position at the room's rate
    rates = await tick_rates(stack, event["id"])
    assert sum(check_etas(msgs, rates) for msgs, _ in results) > 0


async def test_a_place_is_its_buyers_alone(api: httpx.AsyncClient, token: TokenFactory, stack: Stack) -> None:
    org, owner, other = token("room-org-5", "organizer"), token("room-owner", "buyer"), token("room-other", "buyer")
    event = await create_event(api, org, capacity=5, on_sale_at=on_sale_in(3600), waiting_room=True)
    place = await join(api, owner, event["id"])
    for url, code in (
        (f"{place['progress_url']}?token={other}", 4404),
        (f"{place['progress_url']}?token=nonsense", 4401),
        (f"{stack.notifier_url}/v1/queue/qu_0000/progress?token={owner}", 4404),
    ):
        with pytest.raises(websockets.ConnectionClosed) as closed:
            async with asyncio.timeout(60), websockets.connect(url) as ws:
                await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == code
    async with asyncio.timeout(60), websockets.connect(f"{place['progress_url']}?token={owner}") as ws:
        first = orjson.loads(await ws.recv())
    assert first["type"] == "queue.position" and first["position"] is None and first["eta_s"] > 3000


async def next_position(ws: Any, want: Any) -> dict[str, Any]:
    """Read the socket's queue.position messages until one satisfies ``want``."""
    async with asyncio.timeout(120):
        while True:
            msg: dict[str, Any] = orjson.loads(await ws.recv())
            assert msg["type"] == "queue.position", msg
            if want(msg):
                return msg


async def next_message(ws: Any, kind: str) -> dict[str, Any]:
    """Read the socket until a message of type ``kind`` (positions before it are skipped)."""
    async with asyncio.timeout(120):
        while True:
            msg: dict[str, Any] = orjson.loads(await ws.recv())
            if msg["type"] == kind:
                return msg
            assert msg["type"] == "queue.position", msg


async def test_an_organiser_pauses_and_resumes_admission(api: httpx.AsyncClient, token: TokenFactory) -> None:
    # Given a room of one ticket selling now, paused by its organiser before anybody queued
    org = token("room-org-6", "organizer")
    event = await create_event(api, org, capacity=1, waiting_room=True)
    eid = event["id"]
    r = await api.post(f"/v1/events/{eid}/queue/pause", headers=bearer(org))
    assert r.status_code == 200 and r.json() == {
        "event_id": eid,
        "paused": True,
        "waiting": 0,
        "admitted": 0,
        "closed": False,
    }
    # And nobody else may: another organiser, a buyer (403 problem+json); an unknown event is 404
    for who in (token("room-org-7", "organizer"), token("room-pause-buyer", "buyer")):
        for action in ("pause", "resume"):
            r = await api.post(f"/v1/events/{eid}/queue/{action}", headers=bearer(who))
            assert r.status_code == 403 and r.headers["content-type"] == "application/problem+json", r.text
    r = await api.post("/v1/events/ev_00000000000000000000/queue/resume", headers=bearer(org))
    assert r.status_code == 404, r.text

    # When two buyers queue: alice, then bob, who follows his place
    alice, bob = token("room-pause-alice", "buyer"), token("room-pause-bob", "buyer")
    first = await join(api, alice, eid)
    second = await join(api, bob, eid)
    assert (first["position"], second["position"]) == (1, 2)
    assert first["paused"] and second["paused"] and first["eta_s"] is None
    async with websockets.connect(f"{second['progress_url']}?token={bob}") as ws:
        shown = orjson.loads(await ws.recv())
        assert (shown["type"], shown["position"], shown["paused"], shown["eta_s"]) == ("queue.position", 2, True, None)

        # And the admitter has ticked every room since (a control room admitted a buyer
        # who queued after its first one was admitted: a whole tick after those joins)
        control = await create_event(api, org, capacity=5, waiting_room=True)
        for name in ("room-pause-c1", "room-pause-c2"):
            c = token(name, "buyer")
            await join(api, c, control["id"])
            await eventually(lambda c=c: _admitted(api, c, control["id"]), f"{name} admitted in the control room")
        # Then nobody was admitted in the paused room, and the places are as they were
        places = [await join(api, t, eid) for t in (alice, bob)]
        assert [(p["admitted"], p["position"], p["paused"]) for p in places] == [(False, 1, True), (False, 2, True)]

        # When the organiser resumes it
        r = await api.post(f"/v1/events/{eid}/queue/resume", headers=bearer(org))
        assert r.status_code == 200 and r.json() == {
            "event_id": eid,
            "paused": False,
            "waiting": 2,
            "admitted": 0,
            "closed": False,
        }
        # Then alice is admitted, and bob's socket shows him next and not paused
        await eventually(lambda: _admitted(api, alice, eid), "alice admitted after the resume")
        shown = await next_position(ws, lambda m: not m["paused"] and m["position"] == 1)
        # And a pause while he watches shows on his socket, his place kept
        r = await api.post(f"/v1/events/{eid}/queue/pause", headers=bearer(org))
        assert r.status_code == 200 and r.json()["paused"] is True
        shown = await next_position(ws, lambda m: m["paused"])
        assert (shown["position"], shown["eta_s"]) == (1, None)


async def _admitted(api: httpx.AsyncClient, tok: str, event_id: str) -> dict[str, Any] | None:
    place = await join(api, tok, event_id)
    return place if place["admitted"] else None


async def test_an_organiser_closes_the_room_for_good(api: httpx.AsyncClient, token: TokenFactory) -> None:
    # Given a paused room with two buyers in line, bob following his place
    org = token("room-org-8", "organizer")
    eid = (await create_event(api, org, capacity=5, waiting_room=True))["id"]
    assert (await api.post(f"/v1/events/{eid}/queue/pause", headers=bearer(org))).status_code == 200
    alice, bob = token("room-close-alice", "buyer"), token("room-close-bob", "buyer")
    await join(api, alice, eid)
    place = await join(api, bob, eid)
    async with websockets.connect(f"{place['progress_url']}?token={bob}") as ws:
        assert orjson.loads(await ws.recv())["paused"] is True
        # And nobody but its organiser may close it
        r = await api.post(f"/v1/events/{eid}/queue/close", headers=bearer(token("room-org-9", "organizer")))
        assert r.status_code == 403 and r.headers["content-type"] == "application/problem+json", r.text

        # When its organiser closes it
        r = await api.post(f"/v1/events/{eid}/queue/close", headers=bearer(org))
        assert r.status_code == 200, r.text
        assert r.json() == {"event_id": eid, "paused": False, "waiting": 2, "admitted": 0, "closed": True}
        # Then bob's socket hears it and closes normally
        async with asyncio.timeout(60):
            msg = orjson.loads(await ws.recv())
            assert (msg["type"], msg["queue_id"]) == ("queue.closed", place["queue_id"]), msg
            with pytest.raises(websockets.ConnectionClosedOK) as closed:
                await ws.recv()
        assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1000, "closed")  # type: ignore[union-attr]

    # And a new buyer gets no place; one who had a place is told; it neither resumes nor reopens
    r = await api.post(f"/v1/events/{eid}/queue", headers=bearer(token("room-close-carol", "buyer")))
    assert r.status_code == 409 and r.json()["type"].endswith("/queue-closed"), r.text
    again = await join(api, alice, eid)
    assert (again["closed"], again["admitted"], again["eta_s"]) == (True, False, None)
    r = await api.post(f"/v1/events/{eid}/queue/resume", headers=bearer(org))
    assert r.status_code == 409 and r.json()["type"].endswith("/queue-closed"), r.text
    r = await api.post(f"/v1/events/{eid}/queue/close", headers=bearer(org))
    assert r.status_code == 200 and r.json()["closed"] is True


async def test_tickets_that_come_back_call_back_the_buyers_told_it_was_sold_out(
    api: httpx.AsyncClient, token: TokenFactory
) -> None:
    # Given a room of one ticket: alice is admitted and buys it, bob waits behind her
    org = token("room-org-back", "organizer")
    event = await create_event(api, org, capacity=1, waiting_room=True)
    alice, bob = token("room-back-alice", "buyer"), token("room-back-bob", "buyer")
    await join(api, alice, event["id"])
    bob_place = await join(api, bob, event["id"])
    place = await eventually(lambda: _admitted(api, alice, event["id"]), "alice is admitted")
    body = {"event_id": event["id"], "quantity": 1, "holder_name": "Alice", "tier": "standard"}
    r = await api.post("/v1/orders", json=body, headers={**bearer(alice), "Queue-Permission": place["permission"]})
    assert r.status_code == 202, r.text
    order = r.json()
    async with websockets.connect(f"{bob_place['progress_url']}?token={bob}") as ws:
        # When bob's socket says it is sold out
        told = await next_message(ws, "queue.sold_out")
        assert told["queue_id"] == bob_place["queue_id"]
        # And alice cancels her order
        r = await api.post(f"/v1/orders/{order['id']}/cancel", headers=bearer(alice))
        assert r.status_code == 200, r.text
        # Then the same socket admits bob, with a permission of his own
        got = await next_message(ws, "queue.admitted")
        assert got["queue_id"] == bob_place["queue_id"] and got["permission"]
        # And the room no longer says it is sold out
        assert not (await join(api, bob, event["id"]))["sold_out"]
    # And bob buys the ticket that came back: one sold, never two
    body = {"event_id": event["id"], "quantity": 1, "holder_name": "Bob", "tier": "standard"}
    r = await api.post("/v1/orders", json=body, headers={**bearer(bob), "Queue-Permission": got["permission"]})
    assert r.status_code == 202, r.text
    assert await sold(api, event["id"], org) == 1
