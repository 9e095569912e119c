"""The store's traits, detected at start-up, and the reads they choose
(``ticketry_api.store``): what runs on FerretDB is told apart from MongoDB by
its ``buildInfo``, and the MongoDB forms of the reads (one indexed query)
answer exactly what the FerretDB forms (point reads) answer. Both forms run
here, on the stack's FerretDB, where an indexed query is a scan: correct,
only slower."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from ticketry.db import StoreTraits, connect_mongo, store_traits
from ticketry.documents import Order
from ticketry_api.store import Reads, Store
from ticketry_api.store.reads import IN_UP_TO, POINT_READS, POINT_READS_UP_TO
from ticketry_devstack.procs import Stack

pytestmark = pytest.mark.e2e
MONGODB = StoreTraits("MongoDB (as if)", indexed_queries=True)


@pytest.fixture
async def mongo(stack: Stack) -> AsyncIterator[AsyncMongoClient[dict[str, object]]]:
    client = await connect_mongo(stack.env["TICKETRY_MONGO_URL"], create_indexes=False)
    try:
        yield client
    finally:
        await client.close()


async def test_the_stacks_store_is_told_apart_as_ferretdb(mongo: AsyncMongoClient[dict[str, object]]) -> None:
    # Given the stack's store (FerretDB, as the api found it at start-up)
    traits = await store_traits(mongo)
    # Then it is known for what it is, and its reads are point reads
    assert traits.server.startswith("FerretDB ") and not traits.indexed_queries
    assert Store.create(traits).reads.traits == traits
    # And the api created only the indexes it uses there: the unique ones, not
    # the list queries' (each would only slow every order's insert)
    names = {ix["name"] async for ix in await Order.get_pymongo_collection().list_indexes()}
    assert "idem_1" in names
    assert not names & {"owner_id_1__id_1", "event_id_1__id_1"}


@pytest.fixture
async def col(mongo: AsyncMongoClient[dict[str, object]]) -> AsyncIterator[Any]:
    """A scratch collection of 3 orders' tickets (80, 3 and 1,100 of them)."""
    c = mongo["ticketry"][f"traits_{uuid.uuid4().hex[:8]}"]
    sizes = {"a": 80, "b": 3, "c": 1100}
    docs = [{"_id": f"{o}-{n:04d}", "order_id": o, "n": n} for o, size in sizes.items() for n in range(size)]
    await c.insert_many(docs)
    try:
        yield c
    finally:
        await c.drop()


@pytest.mark.parametrize(
    ("order", "size"),
    [("b", 3), ("a", POINT_READS_UP_TO), ("a", 80), ("c", IN_UP_TO + 100)],
    ids=["few", "point-read-bound", "past-point-reads", "past-in-bound"],
)
async def test_reads_by_ids_answer_the_same_in_both_forms(col: Any, order: str, size: int) -> None:
    # Given ids of one order's tickets, two of them not in the store
    ids = [f"{order}-{n:04d}" for n in range(size - 2)] + [f"{order}-9998", f"{order}-9999"]
    proj = {"n": 1}
    # When each form reads them
    point = await Reads(POINT_READS).by_ids(col, ids, {"order_id": order}, proj)
    indexed = await Reads(MONGODB).by_ids(col, ids, {"order_id": order}, proj)
    # Then both find every one that exists (and may add the order's others, never another order's)
    wanted = set(ids[:-2])
    for got in (point, indexed):
        found = {d["_id"] for d in got}
        assert wanted <= found and all(d["_id"].startswith(f"{order}-") for d in got)
        assert all(set(d) == {"_id", "n"} for d in got)  # the projection holds
    by_id = {d["_id"]: d for d in point}
    assert all(by_id[d["_id"]] == d for d in indexed if d["_id"] in wanted)


async def test_each_answers_the_same_in_both_forms(col: Any) -> None:
    ids = ["a-0001", "b-0002", "c-1099", "c-0000", "z-0000"]  # across orders, one missing
    point = await Reads(POINT_READS).each(col, ids, {"order_id": 1})
    indexed = await Reads(MONGODB).each(col, ids, {"order_id": 1})
    assert point == indexed
    assert sorted(point) == sorted(ids[:-1]) and point["c-1099"]["order_id"] == "c"
