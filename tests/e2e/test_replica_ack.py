"""An order acknowledged is an order kept: with ``TICKETRY_REDIS_MIN_REPLICAS=1``
``202`` comes only once a replica holds the order's Redis writes
(``ticketry_api.adapters.replicas``); a stalled replica gets ``503`` + Retry-After, and a
retry with the same Idempotency-Key gives exactly one order, reserved once.

A real primary and replica (``tests.redis_pair``); the stack is pointed at the
primary (so it starts no Redis of its own) and has its own FerretDB, which one
test stops (SIGSTOP) to hold an order between its two waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from pymongo import AsyncMongoClient
from ticketry import streams
from ticketry.db import connect_redis
from ticketry_api.adapters.replicas import replicated
from ticketry_api.core.problem import Problem
from ticketry_devstack.procs import Stack, start_stack

from tests.conftest import SHOP_ORIGIN, TokenFactory
from tests.helpers import bearer, create_event, eventually, place_order, wait_rendered
from tests.redis_pair import RedisPair, redis_pair

pytestmark = pytest.mark.e2e

# Generous for a healthy replica on a busy machine; each frozen wait costs it once.
WAIT_MS = 2000
ENV = {
    "TICKETRY_SHOP_ORIGINS": SHOP_ORIGIN,
    "TICKETRY_REDIS_MIN_REPLICAS": "1",
    "TICKETRY_REDIS_REPLICA_WAIT_MS": str(WAIT_MS),
}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisPair]:
    with redis_pair(tmp_path_factory.mktemp("redis-pair")) as p:
        yield p


@pytest.fixture(scope="module")
def replicated_stack(pair: RedisPair, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = start_stack(tmp_path_factory.mktemp("replica-ack"), 1, ENV, redis_url=pair.url)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
async def api(replicated_stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=replicated_stack.api_url, timeout=60) as client:
        yield client


@pytest.fixture
async def mongo(replicated_stack: Stack) -> AsyncIterator[Any]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(replicated_stack.env["TICKETRY_MONGO_URL"])
    try:
        yield client["ticketry"]
    finally:
        await client.close()


def assert_not_replicated(r: httpx.Response) -> None:
    assert r.status_code == 503, r.text
    assert r.headers["content-type"] == "application/problem+json", r.headers
    assert int(r.headers["Retry-After"]) >= 1
    assert r.json()["type"].endswith("/not-replicated"), r.text


async def retry_until_accepted(api: httpx.AsyncClient, buyer: str, event_id: str, qty: int, key: str) -> Any:
    """The client's side: retry on 503 (and only on it) until 202."""

    async def attempt() -> Any:
        r = await place_order(api, buyer, event_id, qty, idempotency_key=key)
        if r.status_code == 503:
            assert_not_replicated(r)
            return None
        assert r.status_code == 202, r.text
        return r.json()

    return await eventually(attempt, "the retried order accepted once the replica is back")


async def ledger_of(db: Any, event_id: str) -> list[dict[str, Any]]:
    return [e async for e in db.reservations.find({"event_id": event_id}).sort("seq", 1)]


async def sold(api: httpx.AsyncClient, event_id: str, tok: str) -> int:
    return int((await api.get(f"/v1/events/{event_id}", headers=bearer(tok))).json()["sold"])


async def test_a_stalled_replica_refuses_the_order_and_its_retry_makes_one(
    api: httpx.AsyncClient, mongo: Any, token: TokenFactory, pair: RedisPair
) -> None:
    org, buyer = token("rep-org", "organizer"), token("rep-buyer", "buyer")
    event = await create_event(api, org, capacity=50)
    # Given a healthy replica: an order is accepted
    first = await place_order(api, buyer, event["id"], 2, idempotency_key=f"k-{uuid.uuid4().hex}")
    assert first.status_code == 202, first.text
    key = f"k-{uuid.uuid4().hex}"
    # When the replica stalls, the next order is refused with 503 + Retry-After
    with pair.frozen():
        assert_not_replicated(await place_order(api, buyer, event["id"], 3, idempotency_key=key))
        # and nothing of it stays: no order, no reservation, the first one untouched
        assert await mongo.orders.count_documents({"idempotency_key": key}) == 0
        assert await sold(api, event["id"], org) == 2
    # Then once it is back, the retry with the same key is one order, reserved once, and completes
    pair.wait_in_sync()
    got = await retry_until_accepted(api, buyer, event["id"], 3, key)
    assert await mongo.orders.count_documents({"idempotency_key": key}) == 1
    entries = await ledger_of(mongo, event["id"])
    assert [e["orders"] for e in entries] == [[first.json()["id"]], [got["id"]]], entries
    assert await sold(api, event["id"], org) == 5
    assert (await wait_rendered(api, got["id"], buyer))["status"] == "completed"
    assert (await wait_rendered(api, first.json()["id"], buyer))["status"] == "completed"


async def test_an_order_recorded_but_not_replicated_is_the_same_order_on_retry(
    api: httpx.AsyncClient, mongo: Any, token: TokenFactory, pair: RedisPair, replicated_stack: Stack
) -> None:
    org, buyer = token("rep-org-2", "organizer"), token("rep-buyer-2", "buyer")
    event = await create_event(api, org, capacity=50)
    # Given an order accepted (the api now knows the event without reading the store)
    first = await place_order(api, buyer, event["id"], 1, idempotency_key=f"k-{uuid.uuid4().hex}")
    assert first.status_code == 202, first.text
    redis = connect_redis(pair.url)
    store = replicated_stack.procs["ferretdb"]
    key = f"k-{uuid.uuid4().hex}"
    try:
        fence = int(await redis.get(streams.REPLICA_FENCE) or 0)
        # When an order's outbox entry is on the replica and the order waits for the store,
        store.signal(signal.SIGSTOP)
        try:
            pending = asyncio.create_task(place_order(api, buyer, event["id"], 4, idempotency_key=key))

            async def outbox_entry_replicated() -> bool:
                assert not pending.done(), (await pending).text  # answered before reaching the store
                waiting = [c for c in await redis.client_list() if c["cmd"] == "wait" and "b" in c["flags"]]
                return int(await redis.get(streams.REPLICA_FENCE) or 0) > fence and not waiting

            await eventually(outbox_entry_replicated, "the order's first wait answered")
            # and the replica stalls before the order is recorded and enqueued
            with pair.frozen():
                store.signal(signal.SIGCONT)
                # Then the order is answered 503 + Retry-After, though the primary holds it
                assert_not_replicated(await pending)
                found = [o async for o in mongo.orders.find({"idempotency_key": key})]
                assert len(found) == 1, found
                # and a retry while the replica still stalls is refused too
                assert_not_replicated(await place_order(api, buyer, event["id"], 4, idempotency_key=key))
        finally:
            store.signal(signal.SIGCONT)
        # And once the replica is back, the retry is that same order: one order, one reservation
        pair.wait_in_sync()
        got = await retry_until_accepted(api, buyer, event["id"], 4, key)
        assert got["id"] == found[0]["_id"]
        assert await mongo.orders.count_documents({"idempotency_key": key}) == 1
        entries = await ledger_of(mongo, event["id"])
        assert [e["orders"] for e in entries] == [[first.json()["id"]], [got["id"]]], entries
        assert await sold(api, event["id"], org) == 5
        assert (await wait_rendered(api, got["id"], buyer))["status"] == "completed"
    finally:
        await redis.aclose()


async def test_a_cancel_is_answered_once_a_replica_has_it(
    api: httpx.AsyncClient, token: TokenFactory, pair: RedisPair
) -> None:
    org, buyer = token("rep-org-4", "organizer"), token("rep-buyer-4", "buyer")
    event = await create_event(api, org, capacity=50)
    placed = await place_order(api, buyer, event["id"], 2, idempotency_key=f"k-{uuid.uuid4().hex}")
    assert placed.status_code == 202, placed.text
    cancel_url = f"/v1/orders/{placed.json()['id']}/cancel"
    # Given a stalled replica, a cancel is refused with 503 + Retry-After
    with pair.frozen():
        assert_not_replicated(await api.post(cancel_url, headers=bearer(buyer)))
    # Then its retry, once the replica is back, cancels the order once: the tickets are back
    pair.wait_in_sync()

    async def cancelled() -> bool:
        r = await api.post(cancel_url, headers=bearer(buyer))
        if r.status_code == 503:
            assert_not_replicated(r)
            return False
        assert r.status_code == 200, r.text
        return True

    await eventually(cancelled, "the retried cancel answered")
    assert await sold(api, event["id"], org) == 0
    assert (await api.get(f"/v1/orders/{placed.json()['id']}", headers=bearer(buyer))).json()["status"] == "cancelled"


@contextlib.contextmanager
def api_with(stack: Stack, env: dict[str, str]) -> Iterator[None]:
    """The stack's api restarted with ``env``, and restarted as it was after."""
    stack.procs["api"].stop()
    stack.start_api(env)
    try:
        yield
    finally:
        stack.procs["api"].stop()
        stack.start_api()


async def test_without_min_replicas_a_stalled_replica_does_not_matter(
    api: httpx.AsyncClient, token: TokenFactory, pair: RedisPair, replicated_stack: Stack
) -> None:
    org, buyer = token("rep-org-3", "organizer"), token("rep-buyer-3", "buyer")
    event = await create_event(api, org, capacity=50)
    # Given the default (no replica to wait for), when the replica stalls
    with api_with(replicated_stack, {"TICKETRY_REDIS_MIN_REPLICAS": "0"}), pair.frozen():
        # Then the order is accepted all the same: the setting is what decides
        r = await place_order(api, buyer, event["id"], 2, idempotency_key=f"k-{uuid.uuid4().hex}")
        assert r.status_code == 202, r.text
    assert (await wait_rendered(api, r.json()["id"], buyer))["status"] == "completed"


async def test_the_wait_covers_writes_made_on_other_connections(pair: RedisPair) -> None:
    # Given a write on one connection while the replica stalls
    writer, waiter = connect_redis(pair.url), connect_redis(pair.url)
    settings = SimpleNamespace(redis_min_replicas=1, redis_replica_wait_ms=200)
    try:
        await writer.ping()
        await waiter.ping()
        with pair.frozen():
            await writer.set(f"replica-ack-test:{uuid.uuid4().hex}", 1, ex=60)
            # Then replicated() on a connection whose last command came before that
            # write is refused: a bare WAIT there covers only up to that command
            # (and counts the stalled replica at once); the fence covers the write.
            with pytest.raises(Problem) as refused:
                await replicated(waiter, settings)
            assert refused.value.status == 503 and refused.value.headers == {"Retry-After": "1"}
        pair.wait_in_sync()
        await replicated(waiter, settings)  # and passes once the replica is back
    finally:
        await writer.aclose()
        await waiter.aclose()


async def test_a_rooms_permission_is_seen_only_once_a_replica_holds_it(
    api: httpx.AsyncClient, token: TokenFactory, pair: RedisPair
) -> None:
    org, buyer = token("rep-org-5", "organizer"), token("rep-buyer-5", "buyer")
    redis = connect_redis(pair.url)

    async def join() -> dict[str, Any]:
        r = await api.post(f"/v1/events/{event['id']}/queue", headers=bearer(buyer))
        assert r.status_code == 201, r.text
        return dict(r.json())

    try:
        with pair.frozen():
            # Given a stalled replica, and a buyer in an open room's line
            event = await create_event(api, org, capacity=10, waiting_room=True)
            assert not (await join())["admitted"]
            state = streams.room_state(event["id"])

            async def ticked() -> dict[bytes, bytes] | None:
                st: dict[bytes, bytes] = await redis.hgetall(state)
                admitted = st.get(streams.ROOM_ADMITTED.encode(), b"0") != b"0"
                return st if streams.ROOM_PENDING.encode() in st or admitted else None

            # When the admitter admits the buyer
            st = await eventually(ticked, "the admitter's tick that admits the buyer")
            # Then nobody sees the permission while no replica holds it: not the buyer's
            # poll, not the room's sockets (no update carries it), not the order gate's hash
            assert st.get(streams.ROOM_ADMITTED.encode(), b"0") == b"0", st
            place = await join()
            assert not place["admitted"] and place.get("permission") is None, place
            assert await redis.hget(streams.room_permits(event["id"]), "rep-buyer-5") is None
            for _, fields in await redis.xrange(streams.room_updates(event["id"])):
                assert b"rep-buyer-5" not in fields.get(streams.ROOM_PERMITS.encode(), b"{}"), fields
        # And once the replica is back, the buyer is admitted and the permission orders
        pair.wait_in_sync()

        async def admitted() -> dict[str, Any] | None:
            got = await join()
            return got if got["admitted"] else None

        place = await eventually(admitted, "the buyer admitted once a replica holds the permission")
        body = {"event_id": event["id"], "quantity": 1, "holder_name": "Ada Lovelace", "tier": "standard"}
        r = await api.post("/v1/orders", json=body, headers={**bearer(buyer), "Queue-Permission": place["permission"]})
        assert r.status_code == 202, r.text
    finally:
        await redis.aclose()
