"""The admission loop's tick (``ticketry_api.waitingroom.admitter``) on a real
Redis and a real store (FerretDB), both started here: a room's first tick
starts from the rate the api sustains and admits no more buyers than there
are tickets; when the api sheds orders the room's rate drops at once, and
with no more shedding it climbs back, a step a tick, to where it was.

The api's ``Shedding`` (what the tick reads of it: orders shed so far and the
measured capacity) is a small stand-in here, so the test sets the signal
rather than producing it with a burst (``test_shedding`` covers the meter).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest
from redis.asyncio import Redis
from ticketry import streams
from ticketry.db import connect_mongo
from ticketry.documents import Event
from ticketry.ids import new_id
from ticketry_api.core import waitingroom
from ticketry_api.middleware.shedding import Shedding
from ticketry_api.store import Store
from ticketry_api.waitingroom import rooms
from ticketry_api.waitingroom.admitter import Admitter
from ticketry_devstack.procs import ferretdb_proc

from tests.helpers import serving

CAPACITY_PER_S = 40.0
TICKETS = 10
LIMITS = waitingroom.RateLimits()


@pytest.fixture(scope="module")
def mongo_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("admitter-ferretdb")
    with serving(lambda port: ferretdb_proc(data, port)) as port:
        yield f"mongodb://127.0.0.1:{port}/ticketry"


@pytest.fixture
async def db(mongo_url: str) -> AsyncIterator[Store]:
    client = await connect_mongo(mongo_url)
    try:
        yield Store.create()
    finally:
        await client.close()


@dataclass
class Meter:
    capacity: float

    def rate(self, now: float) -> float:
        return self.capacity


@dataclass
class Signal:
    """The api's ``Shedding`` as the admitter reads it."""

    meter: Meter = field(default_factory=lambda: Meter(CAPACITY_PER_S))
    shed: int = 0  # orders answered 503 so far


async def on_sale_room(redis: Redis, buyers: int) -> str:
    """An event on sale for a minute, with a waiting room and ``buyers`` in line; its id."""
    on_sale_at = datetime.now(UTC) - timedelta(minutes=1)
    event = Event(
        id=new_id("ev"), name="Rate Night", venue="Loopback Hall", starts_at=datetime.now(UTC) + timedelta(days=30),
        capacity=TICKETS, price_minor=2500, currency="EUR", organizer_id="org-admitter",
        on_sale_at=on_sale_at, waiting_room=True,
    )  # fmt: skip
    await event.insert()
    on_sale_ms = int(on_sale_at.timestamp() * 1000)
    for i in range(buyers):
        got = await rooms.join(
            redis, event.id, f"buyer-{i}", on_sale_ms=on_sale_ms, early=0.5, new_id=new_id("qu"), max_waiting=1000
        )
        assert isinstance(got, rooms.Joined)
    return event.id


async def state(redis: Redis, event_id: str) -> rooms.RoomState:
    return await rooms.read_state(redis, event_id, int(time.time() * 1000))


async def test_shedding_drops_the_rate_at_once_and_it_climbs_back_without(redis: Redis, db: Store) -> None:
    # Given a room on sale with 50 buyers for 10 tickets, and an api that sustains 40 orders/s
    event_id = await on_sale_room(redis, 50)
    signal = Signal()
    admitter = Admitter(redis, db, cast(Shedding, signal), consumer="api-test", key=waitingroom.permission_key("s"))

    # When the admitter ticks: the room starts from what the api sustains (probing over it)
    await admitter.tick()
    first = await state(redis, event_id)
    assert first.rate == min(CAPACITY_PER_S + LIMITS.step, CAPACITY_PER_S * LIMITS.probe)
    # (and admits no more buyers than there are tickets, each with a permission)
    assert (first.admitted, first.outstanding) == (TICKETS, TICKETS)
    assert len(await redis.hgetall(streams.room_permits(event_id))) == TICKETS

    # When the api sheds orders before the next tick
    signal.shed += 5
    await admitter.tick()
    # Then the room's rate drops at once, by the backoff at least
    shed = (await state(redis, event_id)).rate
    assert shed <= LIMITS.backoff * first.rate

    # When the api sheds no more
    rates = [shed]
    for _ in range(int((first.rate - shed) / LIMITS.step) + 1):
        await admitter.tick()
        rates.append((await state(redis, event_id)).rate)
    # Then the rate climbs back a step a tick, to where it was
    assert all(b > a for a, b in itertools.pairwise(rates)), rates
    assert all(b - a <= LIMITS.step for a, b in itertools.pairwise(rates)), rates
    assert rates[-1] == first.rate, rates
    # (nobody more was admitted: the permissions out cover every ticket)
    assert (await state(redis, event_id)).admitted == TICKETS
