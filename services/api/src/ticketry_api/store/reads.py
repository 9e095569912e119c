"""Reads by a known set of ids, as the store serves them best.

FerretDB v1 (SQLite backend) pushes down only a filter that is exactly
``{"_id": <value>}``: a filter on any other field (``order_id``), and an
``{"_id": {"$in": …}}`` too, decodes every document of the collection
(measured at 20,000 tickets: 0.55 s a query), while a read by ``_id`` searches
the index our FerretDB build adds (1.0 ms; ``infra/ferretdb/idindex.go``). So
there, what is read by a known set of ids is read one ``_id`` at a time, side
by side, up to a bound past which one scan is cheaper. On MongoDB
(``StoreTraits.indexed_queries``) each is one indexed query.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection
from ticketry.db import StoreTraits

from ticketry_api.core import cursors

Doc = dict[str, Any]

# FerretDB: up to this many ids, documents are read one by one by ``_id``; above, by one scan.
POINT_READS_UP_TO = 64
# MongoDB: up to this many ids, one ``$in`` on ``_id``; above, the query on the shared field.
IN_UP_TO = 1000
# Before detection (and for tools that do not detect): point reads, right on any store.
POINT_READS = StoreTraits("unknown (point reads)", indexed_queries=False)


class Reads:
    """The reads whose best form depends on the store (its :class:`StoreTraits`)."""

    def __init__(self, traits: StoreTraits = POINT_READS) -> None:
        self.traits = traits

    async def by_ids(
        self, col: AsyncCollection[Doc], ids: list[str], otherwise: dict[str, Any], projection: dict[str, int]
    ) -> list[Doc]:
        """The documents of ``col`` with these ``_id``s (and maybe more of
        ``otherwise``, a filter they all match, e.g. their order): on FerretDB
        point reads side by side for up to ``POINT_READS_UP_TO`` of them, else
        one query by ``otherwise`` (a scan, cheaper than that many point
        reads); on MongoDB one ``$in``, or by ``otherwise`` past ``IN_UP_TO``."""
        if self.traits.indexed_queries:
            query = {"_id": {"$in": ids}} if len(ids) <= IN_UP_TO else otherwise
            return await col.find(query, projection).to_list()
        if len(ids) <= POINT_READS_UP_TO:
            got = await asyncio.gather(*(col.find_one({"_id": i}, projection) for i in ids))
            return [d for d in got if d is not None]
        return await col.find(otherwise, projection).to_list()

    async def each(self, col: AsyncCollection[Doc], ids: list[str], projection: dict[str, int]) -> dict[str, Doc]:
        """``_id`` → document for those of ``ids`` that exist, for ids that share
        no other field to query by (the orders of a batch of ticket events): on
        FerretDB one point read each, side by side; on MongoDB one ``$in``."""
        if self.traits.indexed_queries:
            return {d["_id"]: d for d in await col.find({"_id": {"$in": ids}}, projection).to_list()}
        found = await asyncio.gather(*(col.find_one({"_id": i}, projection) for i in ids))
        return {i: d for i, d in zip(ids, found, strict=True) if d is not None}


async def page_by_id(
    col: AsyncCollection[dict[str, Any]],
    query: dict[str, Any],
    cursor: str | None,
    limit: int,
    projection: dict[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of ``col``'s documents matching ``query``, in ``_id`` order
    after the cursor's position; and the next page's cursor (None: the last)."""
    if (after := cursors.decode(cursor)) is not None:
        query = {**query, "_id": {"$gt": after}}
    found = await col.find(query, projection).sort("_id", 1).limit(limit + 1).to_list()
    return found[:limit], cursors.encode(found[limit - 1]["_id"]) if len(found) > limit else None
