"""The api's one writer and its background lane (``ticketry_api.store.writer``),
on the stack's FerretDB: the read models' inserts go in pieces of
``BACKGROUND_DOCS``, each after a round of the other inserts, so an order's
write waits behind one piece, never a whole batch; duplicates are still told
to their caller by the index it gave them."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from ticketry.db import connect_mongo
from ticketry_api.core.batches import BACKGROUND_DOCS, pieces
from ticketry_api.store.writer import Writer
from ticketry_devstack.procs import Stack

pytestmark = pytest.mark.e2e


@pytest.fixture
async def db(stack: Stack) -> AsyncIterator[Any]:
    client: AsyncMongoClient[dict[str, Any]] = await connect_mongo(
        stack.env["TICKETRY_MONGO_URL"], create_indexes=False
    )
    d = client["ticketry"]
    names: list[str] = []

    def scratch() -> Any:
        """A new scratch collection (dropped after the test)."""
        names.append(f"lanes_{uuid.uuid4().hex[:8]}")
        return d[names[-1]]

    try:
        yield scratch
    finally:
        for n in names:
            await d.drop_collection(n)
        await client.close()


def test_pieces_cut_in_order_at_most_the_size() -> None:
    assert pieces(0) == []
    assert pieces(5, 2) == [range(0, 2), range(2, 4), range(4, 5)]
    assert [len(r) for r in pieces(BACKGROUND_DOCS * 2 + 1)] == [BACKGROUND_DOCS, BACKGROUND_DOCS, 1]


async def test_a_background_insert_tells_its_duplicates_by_the_callers_index(db: Any) -> None:
    # Given a collection holding 3 of the 100 documents already, in three different pieces
    col = db()
    docs = [{"_id": f"d{i:03d}", "n": i} for i in range(100)]
    await col.insert_many([docs[5], docs[40], docs[99]])
    # When they all go in as background work
    dups = await Writer().insert_background(col, docs)
    # Then the caller hears of exactly those three, by its own numbering, and every document is in
    assert dups == [5, 40, 99]
    assert await col.count_documents({}) == 100


async def test_an_order_waits_behind_one_piece_not_the_whole_batch(db: Any) -> None:
    # Given a writer busy with five pieces of background work
    writer = Writer()
    states, orders = db(), db()
    batch = [{"_id": f"t{i:03d}"} for i in range(BACKGROUND_DOCS * 5)]
    background = asyncio.create_task(writer.insert_background(states, batch))
    for _ in range(1000):  # until the first piece is being written
        await asyncio.sleep(0)
        if writer.background_waiting == 4:
            break
    assert writer.background_waiting == 4
    # When an order's insert comes meanwhile
    assert await writer.insert(orders, [{"_id": "o1"}]) == []
    # Then it was written after that one piece: at least three were still waiting
    assert writer.background_waiting >= 3, writer.background_waiting
    # and the background work finishes whole
    assert await asyncio.wait_for(background, 60) == []
    assert await states.count_documents({}) == len(batch)
    assert await orders.count_documents({}) == 1
