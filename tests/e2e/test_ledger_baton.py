"""Two api processes selling one event take turns at its ledger (the baton,
``adapters.baton``) instead of racing for each entry, and the ledger stays
what it must be: a gap-free chain of sums, never over the capacity. Two
:class:`Store` objects of this process stand for the two processes (each its
own writer and ledgers), on the stack's real Redis and store."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client import REGISTRY
from ticketry.db import connect_mongo
from ticketry.documents import Event
from ticketry.ids import new_id
from ticketry_api.adapters.baton import RedisBaton
from ticketry_api.store import Store
from ticketry_devstack.procs import Stack

from tests.chaos.support import db_of, redis_of
from tests.conftest import TokenFactory
from tests.helpers import create_event, ledger_sold

pytestmark = pytest.mark.e2e
ROUNDS = 40  # each: 3 reservations in each process at once (one entry each)
CAPACITY = 1000


def lost() -> float:
    return REGISTRY.get_sample_value("ticketry_ledger_entries_lost_total") or 0.0


async def sell_from_two_processes(stack: Stack, event_id: str, *, baton: bool) -> float:
    """ROUNDS rounds of reservations from two stores at once; the entries lost meanwhile."""
    redis = redis_of(stack)
    try:
        ev = await Event.get(event_id)
        assert ev is not None
        a, b = (Store.create(baton=RedisBaton(redis) if baton else None).ledger for _ in range(2))
        before = lost()
        for _ in range(ROUNDS):
            taken = await asyncio.gather(
                *(ledger.reserve(ev, new_id("or"), "standard", 1) for ledger in (a, b, a, b, a, b))
            )
            assert all(t is not None for t in taken)
        assert all(await asyncio.gather(a.quiet(60), b.quiet(60)))  # the last batons handed on before Redis closes
        return lost() - before
    finally:
        await redis.aclose()


@pytest.mark.parametrize("baton", [False, True], ids=["racing", "taking-turns"])
async def test_two_processes_selling_one_event_take_turns_at_its_ledger(
    api: httpx.AsyncClient, token: TokenFactory, stack: Stack, baton: bool
) -> None:
    event = await create_event(api, token("baton-org", "organizer"), capacity=CAPACITY)
    mongo = await connect_mongo(stack.env["TICKETRY_MONGO_URL"], create_indexes=False)
    try:
        # When two processes reserve tickets of one event, round after round, at once
        entries_lost = await sell_from_two_processes(stack, event["id"], baton=baton)
        # Then without turns they race for most entries; with them, only until
        # each has seen the other (a baton that does not come in time on a slow
        # host costs one more)
        if baton:
            assert entries_lost <= ROUNDS / 4, entries_lost
        else:
            assert entries_lost >= ROUNDS / 2, entries_lost
        # And either way the ledger is a gap-free chain of sums: every ticket taken once
        entries = [e async for e in db_of(mongo).reservations.find({"event_id": event["id"]}).sort("seq", 1)]
        assert ledger_sold(entries, CAPACITY) == 6 * ROUNDS
        assert len({o for e in entries for o in e["orders"]}) == 6 * ROUNDS
    finally:
        await mongo.close()
