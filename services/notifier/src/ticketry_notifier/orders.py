"""The notifier's reads of the store: an order's head (owner, size, status)
for a socket whose progress hash has expired or is not written yet, its
outcome as the projector recorded it, and a ping for ``/readyz``. Each read
is by ``_id``."""

from __future__ import annotations

from ticketry.documents import Order, OrderState, is_placed

from ticketry_notifier import core


async def order_head(order_id: str) -> core.OrderHead | None:
    """The order's owner, size and status, without its list of ticket ids
    (10,000 in a big order); None for no order."""
    doc = await Order.get_pymongo_collection().find_one({"_id": order_id}, {"owner_id": 1, "quantity": 1, "status": 1})
    if doc is None or not is_placed(doc["status"]):
        return None
    return core.OrderHead(str(doc["owner_id"]), int(doc["quantity"]), doc["status"] == "cancelled")


async def order_outcome(order_id: str) -> core.OrderOutcome | None:
    """The order's counters as the projector recorded them once it completed (None: not yet)."""
    state = await OrderState.get(order_id)
    return None if state is None else core.OrderOutcome(state.total, state.rendered, state.failed)


async def ping() -> None:
    await Order.get_pymongo_collection().database.command("ping")
