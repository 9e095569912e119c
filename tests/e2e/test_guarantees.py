"""Guarantees 1 and 2 at the api's edge, on the shared stack: duplicate POSTs,
the outbox sweep after a crash before XADD or before the order was recorded,
and stream trimming."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from ticketry import streams
from ticketry.codes import load_keyring
from ticketry.db import StoreTraits, connect_mongo
from ticketry.documents import Event, Order
from ticketry.ids import new_id, ticket_ids
from ticketry_api.adapters.ratelimit import RateSettings
from ticketry_api.adapters.trim import Trimmer
from ticketry_api.core.problem import Problem
from ticketry_api.service_layer import orders
from ticketry_api.store import Store, ledger
from ticketry_api.store.reads import POINT_READS
from ticketry_devstack.procs import Stack

from tests.chaos.support import db_of, mongo_of, redis_of, wait_until
from tests.conftest import TokenFactory
from tests.helpers import bearer, create_event, ledger_sold, place_order, ws_outcome

pytestmark = pytest.mark.e2e
MONGODB = StoreTraits("MongoDB (as if)", indexed_queries=True)  # its forms of the reads, run on FerretDB


async def test_concurrent_duplicate_posts_make_one_order(
    api: httpx.AsyncClient, token: TokenFactory, stack: Stack
) -> None:
    # Given a buyer who sends the same order ten times at once with one Idempotency-Key
    buyer = token("idem-buyer", "buyer")
    event = await create_event(api, token("idem-org", "organizer"), capacity=50)
    key = f"k-{uuid.uuid4().hex}"
    results = await asyncio.gather(*(place_order(api, buyer, event["id"], 3, idempotency_key=key) for _ in range(10)))
    # Then every answer is the same single order
    assert {r.status_code for r in results} == {202}, [r.text for r in results]
    assert len({r.json()["id"] for r in results}) == 1
    mongo = mongo_of(stack)
    try:
        orders = [o async for o in db_of(mongo).orders.find({"idempotency_key": key})]
        assert len(orders) == 1
        assert orders[0]["ticket_ids"] == results[0].json()["tickets"] == ticket_ids(orders[0]["_id"], 3)
    finally:
        await mongo.close()
    got = (await api.get(f"/v1/events/{event['id']}", headers=bearer(buyer))).json()
    assert got["sold"] == 3
    # And the same key with another body is refused, changing nothing
    other = await place_order(api, buyer, event["id"], 4, idempotency_key=key)
    assert other.status_code == 422 and other.headers["content-type"] == "application/problem+json"
    assert (await api.get(f"/v1/events/{event['id']}", headers=bearer(buyer))).json()["sold"] == 3


@pytest.mark.parametrize("traits", [POINT_READS, MONGODB], ids=["ferretdb-reads", "mongodb-reads"])
async def test_two_processes_racing_for_the_last_tickets_never_oversell(
    api: httpx.AsyncClient, token: TokenFactory, stack: Stack, traits: StoreTraits
) -> None:
    # Given an event of 60 tickets, and two writers of its ledger at once: the api
    # (40 buyers of 1-3 tickets) and this process (30 reservations of 1-3, each
    # group-committed by its own writer, 10 of them given back while the rush runs),
    # which finds the head as on FerretDB (point reads) or as on MongoDB (one query)
    capacity_ = 60
    event = await create_event(api, token("race-org", "organizer"), capacity=capacity_)
    mongo = await connect_mongo(stack.env["TICKETRY_MONGO_URL"], create_indexes=False)
    try:
        ev = await Event.get(event["id"])
        assert ev is not None
        capacity = Store.create(traits).ledger  # this process's own writer of the ledger
        mine = {new_id("or"): 1 + i % 3 for i in range(30)}

        async def reserve_then_maybe_release(order_id: str, qty: int, give_back: bool) -> int:
            if not await capacity.reserve(ev, order_id, "standard", qty):
                return 0
            if give_back:
                await capacity.release(ev, order_id, "standard", qty)
                await capacity.release(ev, order_id, "standard", qty)  # a retried release counts once
                return 0
            return qty

        posts = [place_order(api, token(f"race-{i}", "buyer"), ev.id, 1 + i % 3) for i in range(40)]
        local = [reserve_then_maybe_release(o, q, i % 3 == 0) for i, (o, q) in enumerate(mine.items())]
        answers = list(await asyncio.gather(*posts, *local))
        sold_by_api = sum(r.json()["quantity"] for r in answers[:40] if r.status_code == 202)
        assert {r.status_code for r in answers[:40]} <= {202, 409}
        kept_here = sum(answers[40:])

        # Then what was taken is exactly what the ledger says is sold, never more
        # than the capacity, and the ledger is a gap-free chain of sums
        sold = (await api.get(f"/v1/events/{ev.id}", headers=bearer(token("race-org", "organizer")))).json()["sold"]
        assert sold == sold_by_api + kept_here <= capacity_
        entries = [e async for e in db_of(mongo).reservations.find({"event_id": ev.id}).sort("seq", 1)]
        running = ledger_sold(entries, capacity_)
        # (the head, found by _id alone, from nothing or from any entry on, or by one
        # query; one tier: it sold it all)
        want = ledger.Head(len(entries), running, {"standard": running})
        assert await ledger.head(ev.id) == want == await ledger.newest(ev.id) == await capacity.sold(ev.id)
        third = ledger.Head(3, entries[2]["sold_after"], entries[2]["tier_sold"])
        assert await ledger.head(ev.id, third) == want
        # And each of this process's orders was reserved at most once, and looks reserved
        reserved_for = [o for e in entries for o in e["orders"]]
        assert any(len(e["orders"]) > 1 for e in entries)  # group commit did serve several at once
        assert all(reserved_for.count(o) <= 1 for o in mine)
        for o in mine:
            assert await capacity.reserved(o) == (o in reserved_for)
    finally:
        await mongo.close()


async def test_order_recorded_but_never_enqueued_is_swept(
    api: httpx.AsyncClient, token: TokenFactory, stack: Stack
) -> None:
    # Given an order the api recorded and then crashed before XADD: the order
    # document exists and is still in flight; its render requests do not
    buyer_id = "outbox-buyer"
    buyer = token(buyer_id, "buyer")
    event = await create_event(api, token("outbox-org", "organizer"), capacity=10)
    order_id = new_id("or")
    tickets = ticket_ids(order_id, 4)
    mongo = mongo_of(stack)
    redis = redis_of(stack)
    member = streams.in_flight_member(order_id, event["id"], 4, "standard")
    try:
        await redis.zadd(streams.ORDERS_IN_FLIGHT, {member: _ms_ago(minutes=5)})
        await db_of(mongo).orders.insert_one(
            {
                "_id": order_id, "owner_id": buyer_id, "event_id": event["id"], "quantity": 4,
                "tier": "standard", "holder_name": "Grace Hopper", "status": "processing",
                "ticket_ids": tickets, "idempotency_key": None,
                "idem": f"auto:{order_id}", "request_hash": "x",
                "created_at": datetime.now(UTC) - timedelta(minutes=5),
            }
        )  # fmt: skip

        # When the outbox sweep runs (every few seconds in the api)
        async def completed() -> bool:
            doc = await db_of(mongo).order_states.find_one({"_id": order_id})
            return bool(doc and doc["status"] == "completed")

        await wait_until(completed, 90)

        # Then the order completed with each ticket once, and is no longer in flight
        doc = await db_of(mongo).order_states.find_one({"_id": order_id})
        assert (doc["rendered"], doc["failed"]) == (4, 0)
        assert await redis.zscore(streams.ORDERS_IN_FLIGHT, member) is None
        states = [t async for t in db_of(mongo).ticket_states.find({"order_id": order_id})]
        assert sorted(tickets) == sorted(t["_id"] for t in states)
        assert {t["status"] for t in states} == {"rendered"}
        seen = (await api.get(f"/v1/orders/{order_id}", headers=bearer(buyer))).json()
        assert [(t["id"], t["status"]) for t in seen["tickets"]] == [(t, "rendered") for t in tickets]
        r = await api.get(f"/v1/tickets/{tickets[0]}/pdf", headers=bearer(buyer))
        assert r.status_code == 200 and r.content[:5] == b"%PDF-"
    finally:
        await redis.aclose()
        await mongo.close()


def _ms_ago(**delta: float) -> int:
    return int((datetime.now(UTC) - timedelta(**delta)).timestamp() * 1000)


async def test_reservation_without_order_is_released_and_the_late_order_refused(
    api: httpx.AsyncClient, token: TokenFactory, stack: Stack
) -> None:
    # Given a buyer's order that took its 3 tickets of 5 longer ago than the outbox
    # grace but was never recorded (its api crashed, or is stuck): this test plays
    # that api's part, in-process, step by step
    org, admin = token("orphan-org", "organizer"), token("orphan-admin", "admin")
    event = await create_event(api, org, capacity=5)
    mongo = await connect_mongo(stack.env["TICKETRY_MONGO_URL"], create_indexes=False)
    redis = redis_of(stack)
    keyring = load_keyring(Path(stack.env["TICKETRY_KEYS_DIR"]))
    try:
        ev = await Event.get(event["id"])
        assert ev is not None
        store = Store.create()  # this process plays the stuck api
        orphan = new_id("or")
        member = streams.in_flight_member(orphan, ev.id, 3, "standard")
        await redis.zadd(streams.ORDERS_IN_FLIGHT, {member: _ms_ago(minutes=5)})
        assert await store.ledger.reserve(ev, orphan, "standard", 3)
        assert (await api.get(f"/v1/events/{ev.id}", headers=bearer(org))).json()["sold"] == 3

        # When the api's outbox sweep has looked at it
        async def swept() -> bool:
            return await redis.zscore(streams.ORDERS_IN_FLIGHT, member) is None

        await wait_until(swept, 60)

        # Then its tickets are back on sale, and another buyer can take them
        assert (await api.get(f"/v1/events/{ev.id}", headers=bearer(org))).json()["sold"] == 0
        r = await place_order(api, token("orphan-buyer-2", "buyer"), ev.id, 5)
        assert r.status_code == 202, r.text
        # And the stuck request, recording its order only now, is refused: no 202,
        # no tickets, no order anybody can see, nothing sold twice
        late = Order(
            id=orphan, owner_id="orphan-buyer", event_id=ev.id, quantity=3, tier="standard",
            holder_name="Late Larry", ticket_ids=ticket_ids(orphan, 3),
            idem=f"auto:{orphan}", request_hash="x",
        )  # fmt: skip
        with pytest.raises(Problem) as refused:
            await orders.record(redis, keyring, store, ev, late)
        assert refused.value.status == 503
        assert (await api.get(f"/v1/orders/{orphan}", headers=bearer(admin))).status_code == 404
        assert (await api.get(f"/v1/tickets/{late.ticket_ids[0]}", headers=bearer(admin))).status_code == 404
        progress = r.json()["progress_url"].replace(r.json()["id"], orphan)
        assert await ws_outcome(f"{progress}?token={admin}") == ("closed", 4404)
        assert (await api.get(f"/v1/events/{ev.id}", headers=bearer(org))).json()["sold"] == 5
    finally:
        await redis.aclose()
        await mongo.close()


@pytest.mark.parametrize(("capacity", "max_per_buyer", "refusal"), [(3, None, "sold out"), (10, 3, "limit per buyer")])
async def test_a_retry_while_its_first_request_holds_the_tickets_is_told_to_retry_not_refused(
    api: httpx.AsyncClient, token: TokenFactory, stack: Stack, capacity: int, max_per_buyer: int | None, refusal: str
) -> None:
    # Given a buyer whose first request with an Idempotency-Key took 3 tickets
    # (the event's last, or all the buyer may hold), then its api died (or was
    # cut off) before recording the order: this test plays that api, steps 1
    # and 2 of orders.place_order
    org = token(f"retry-org-{capacity}", "organizer")
    tiers = [{"id": "standard", "name": "Standard", "price": "10.00", "max_per_buyer": max_per_buyer}]
    event = await create_event(api, org, capacity=capacity, tiers=tiers)
    mongo = await connect_mongo(stack.env["TICKETRY_MONGO_URL"], create_indexes=False)
    redis = redis_of(stack)
    buyer_id, key = f"retry-buyer-{capacity}", f"retry-{uuid.uuid4().hex}"
    buyer = token(buyer_id, "buyer")
    try:
        ev = await Event.get(event["id"])
        tier = ev.tier("standard") if ev is not None else None
        assert ev is not None and tier is not None
        first = Order(
            id=new_id("or"), owner_id=buyer_id, event_id=ev.id, quantity=3, tier="standard",
            holder_name="Ada Lovelace", ticket_ids=[], idempotency_key=key,
            idem=streams.idempotency_scope(buyer_id, key), request_hash="x",
        )  # fmt: skip
        await orders.admit(redis, first, tier, RateSettings())
        assert await Store.create().ledger.reserve(ev, first.id, "standard", 3)
        assert (await api.get(f"/v1/events/{ev.id}", headers=bearer(org))).json()["sold"] == 3

        # When the buyer retries with the same key while that request is in flight
        retry = await place_order(api, buyer, ev.id, 3, idempotency_key=key)

        # Then the answer is "in progress, retry", not the refusal; the same
        # order with another key is refused
        assert retry.status_code == 409, retry.text
        assert retry.json()["title"] == "order in progress" and retry.headers["retry-after"] == "1"
        other = await place_order(api, buyer, ev.id, 3, idempotency_key=f"{key}-other")
        assert (other.status_code, other.json()["title"]) == (409, refusal)

        # And once the outbox sweep gives the first request's tickets back, the
        # retry places the order, once
        member = orders.member_of(first)
        await redis.zadd(streams.ORDERS_IN_FLIGHT, {member: _ms_ago(minutes=5)})

        async def swept() -> bool:
            return await redis.zscore(streams.ORDERS_IN_FLIGHT, member) is None

        await wait_until(swept, 60)
        placed = await place_order(api, buyer, ev.id, 3, idempotency_key=key)
        assert placed.status_code == 202, placed.text
        again = await place_order(api, buyer, ev.id, 3, idempotency_key=key)
        assert (again.status_code, again.json()["id"]) == (202, placed.json()["id"]) != (202, first.id)
        assert (await api.get(f"/v1/events/{ev.id}", headers=bearer(org))).json()["sold"] == 3
        held = await redis.get(streams.held(ev.id, "standard", buyer_id))
        assert (int(held) if held is not None else None) == (3 if max_per_buyer else None)
    finally:
        await redis.aclose()
        await mongo.close()


async def test_trim_never_drops_pending_or_undelivered_entries(stack: Stack) -> None:
    redis = redis_of(stack)
    stream, group = f"test:trim:{uuid.uuid4().hex}", "g"
    try:
        # Given 10 entries: 3 delivered and acked, 3 delivered and pending, 4 never delivered
        await redis.xgroup_create(stream, group, id="0", mkstream=True)
        ids = [(await redis.xadd(stream, {"n": i})).decode() for i in range(10)]
        await redis.xreadgroup(group, "c", {stream: ">"}, count=6)
        await redis.xack(stream, group, *ids[:3])
        trimmer = Trimmer(redis)

        # When trimmed, only the acked ones go
        assert await trimmer.trim(stream, exact=True) == 3
        left = [e.decode() for e, _ in await redis.xrange(stream)]
        assert left == ids[3:]
        assert (await redis.xpending(stream, group))["pending"] == 3

        # And a second group that has read nothing holds everything back
        await redis.xgroup_create(stream, "late", id="0")
        await redis.xack(stream, group, *ids[3:6])
        assert await trimmer.trim(stream, exact=True) == 0
        await redis.xgroup_destroy(stream, "late")
        assert await trimmer.trim(stream, exact=True) == 3
        assert [e.decode() for e, _ in await redis.xrange(stream)] == ids[6:]
        # And a stream without groups is never trimmed
        bare = f"{stream}:bare"
        await redis.xadd(bare, {"n": 1})
        assert await trimmer.trim(bare, exact=True) == 0
    finally:
        await redis.delete(stream, f"{stream}:bare")
        await redis.aclose()
