"""Orders' fates in the store: decided once, by a unique insert under the
order's id (on any MongoDB-wire store; FerretDB v1 applies no conditional
update atomically), never written back (see ``ticketry_api.service_layer.cancel``)."""

from __future__ import annotations

from typing import Literal

from ticketry.documents import OrderFate

from ticketry_api.store.writer import Writer

Fate = Literal["cancelled", "used"]


class Fates:
    """The orders' fates, proposed through the process's one writer."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer

    async def decide(self, order_id: str, fate: Fate, by: str) -> Fate:
        """Propose ``fate`` for the order; the fate it has (this one if it won)."""
        doc = OrderFate(id=order_id, fate=fate, by=by)
        if not await self._writer.insert(OrderFate.get_pymongo_collection(), [doc.model_dump(by_alias=True)]):
            return fate
        return await self.of(order_id) or fate

    async def of(self, order_id: str) -> Fate | None:
        """The order's fate, read by ``_id`` (None: still open)."""
        doc = await OrderFate.get_pymongo_collection().find_one({"_id": order_id}, {"fate": 1})
        return None if doc is None else doc["fate"]
