"""Reads by ``_id`` where FerretDB v1 would scan.

FerretDB v1 (SQLite backend) pushes down only a filter that is exactly
``{"_id": <value>}``: a filter on any other field (``order_id``), and an
``{"_id": {"$in": …}}`` too, decodes every document of the collection
(measured at 20,000 tickets: 0.55 s a query), while a read by ``_id`` searches
the index our FerretDB build adds (1.0 ms; ``infra/ferretdb/idindex.go``). So
what is read by a known set of ids is read one ``_id`` at a time, side by
side, up to a bound past which one scan is cheaper. On MongoDB every one of
these would be one indexed query.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection
from ticketry.documents import Order

Doc = dict[str, Any]

# Up to this many ids, documents are read one by one by ``_id``; above, by one scan.
POINT_READS_UP_TO = 64


async def find_by_ids(
    col: AsyncCollection[Doc], ids: list[str], otherwise: dict[str, Any], projection: dict[str, int]
) -> list[Doc]:
    """The documents of ``col`` with these ``_id``s: point reads, side by side,
    for up to ``POINT_READS_UP_TO`` of them; else one query by ``otherwise``
    (a scan on FerretDB v1, cheaper than that many point reads)."""
    if len(ids) <= POINT_READS_UP_TO:
        got = await asyncio.gather(*(col.find_one({"_id": i}, projection) for i in ids))
        return [d for d in got if d is not None]
    return await col.find(otherwise, projection).to_list()


async def find_each(col: AsyncCollection[Doc], ids: list[str], projection: dict[str, int]) -> dict[str, Doc]:
    """``_id`` → document for those of ``ids`` that exist: one point read each,
    side by side (an ``$in`` would scan). For ids that share no other field
    to scan by (the orders of a batch of ticket events)."""
    found = await asyncio.gather(*(col.find_one({"_id": i}, projection) for i in ids))
    return {i: d for i, d in zip(ids, found, strict=True) if d is not None}


async def stored_status(order_id: str) -> str | None:
    """The order document's ``status``, read by ``_id`` alone (None: no document)."""
    raw = await Order.get_pymongo_collection().find_one({"_id": order_id}, {"status": 1})
    return None if raw is None else str(raw.get("status"))
