"""/v1/orders"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header
from ticketry.auth import Principal
from ticketry.documents import Order, Ticket
from ticketry.ids import is_valid_id

from ticketry_api.deps import AnyUser, State, require
from ticketry_api.errors import Problem
from ticketry_api.orders import place_order
from ticketry_api.schemas import OrderAccepted, OrderIn, OrderOut, TicketRef

router = APIRouter(prefix="/v1/orders", tags=["orders"])


def progress_url(state_url: str, order_id: str) -> str:
    return f"{state_url.rstrip('/')}/v1/orders/{order_id}/progress"


@router.post("", status_code=202, response_model=OrderAccepted)
async def create_order(
    body: OrderIn,
    state: State,
    who: Annotated[Principal, Depends(require("buyer"))],
    idempotency_key: Annotated[str | None, Header(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")] = None,
) -> OrderAccepted:
    order = await place_order(
        redis=state.redis,
        keyring=state.keyring,
        principal=who,
        body=body,
        idempotency_key=idempotency_key,
        max_quantity=state.settings.max_tickets_per_order,
    )
    return OrderAccepted(
        id=order.id,
        event_id=order.event_id,
        quantity=order.quantity,
        tickets=order.ticket_ids,
        progress_url=progress_url(state.settings.notifier_public_url, order.id),
    )


async def owned_order(order_id: str, who: Principal) -> Order:
    """The order if ``who`` may see it; 404 otherwise (existence does not leak)."""
    order = await Order.get(order_id) if is_valid_id(order_id, "or") else None
    if order is None or not who.owns(order.owner_id):
        raise Problem(404, "order not found")
    return order


@router.get("/{order_id}", response_model=OrderOut)
async def get_order(order_id: str, who: AnyUser, state: State) -> OrderOut:
    order = await owned_order(order_id, who)
    statuses = {
        t["_id"]: t["status"]
        async for t in Ticket.get_pymongo_collection().find({"order_id": order.id}, {"_id": 1, "status": 1})
    }
    return OrderOut(
        id=order.id,
        event_id=order.event_id,
        status=order.status,
        total=order.quantity,
        rendered=order.rendered,
        failed=order.failed,
        tickets=[
            TicketRef(id=t, status=statuses.get(t, "queued"), pdf_url=f"/v1/tickets/{t}/pdf") for t in order.ticket_ids
        ],
        progress_url=progress_url(state.settings.notifier_public_url, order.id),
    )
