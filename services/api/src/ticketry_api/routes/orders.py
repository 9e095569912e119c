"""/v1/orders"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header
from ticketry.auth import Principal
from ticketry.documents import Checkin, Order, is_placed
from ticketry.ids import is_valid_id
from ticketry.tracing import tracer

from ticketry_api import capacity
from ticketry_api.deps import AnyUser, State, require
from ticketry_api.errors import Problem, problems
from ticketry_api.orders import event_of, place_order, stored_status
from ticketry_api.readmodel import find_by_ids, order_outcome, order_ticket_statuses
from ticketry_api.schemas import CancelOut, OrderAccepted, OrderIn, OrderOut, TicketRef

router = APIRouter(prefix="/v1/orders", tags=["orders"])
_TRACER = tracer(__name__)


def progress_url(state_url: str, order_id: str) -> str:
    return f"{state_url.rstrip('/')}/v1/orders/{order_id}/progress"


@router.post(
    "", status_code=202, response_model=OrderAccepted, responses=problems(401, 403, 404, 409, 413, 422, 429, 503)
)
async def create_order(
    body: OrderIn,
    state: State,
    who: Annotated[Principal, Depends(require("buyer"))],  # rate-limited in place_order
    idempotency_key: Annotated[str | None, Header(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")] = None,
) -> OrderAccepted:
    state.keyring.refresh()  # sign with the newest key if another process rotated
    # The root of each ticket's trace: its render request carries this span on.
    with _TRACER.start_as_current_span("order.place", attributes={"order.quantity": body.quantity}) as span:
        order = await place_order(
            redis=state.redis,
            keyring=state.keyring,
            principal=who,
            body=body,
            idempotency_key=idempotency_key,
            max_quantity=state.settings.max_tickets_per_order,
            rates=state.rates,
        )
        span.set_attribute("order.id", order.id)
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
    if order is None or not is_placed(order.status) or not who.owns(order.owner_id):
        raise Problem(404, "order not found")
    return order


async def _checked_in(order: Order) -> bool:
    """True if any ticket of ``order`` has been admitted (by ``_id`` up to
    ``POINT_READS_UP_TO`` tickets: any other filter is a scan of every check-in
    on FerretDB v1, 240 ms at 15,000 against 3.5 ms for two point reads)."""
    ids = order.ticket_ids
    col = Checkin.get_pymongo_collection()
    return bool(await find_by_ids(col, ids, {"order_id": order.id}, {"_id": 1}))


async def is_cancelled(order_id: str) -> bool:
    """True once the order was cancelled (or never was a real order). Read by
    ``_id``: each check-in asks, and on FerretDB v1 any other filter decodes the
    whole collection. The status is set before the tickets go back (see
    ``cancel_order``), so a ticket whose seat was returned never admits."""
    status = await stored_status(order_id)
    return not is_placed(status) or status == "cancelled"


@router.get("/{order_id}", response_model=OrderOut, responses=problems(401, 404, 422))
async def get_order(order_id: str, who: AnyUser, state: State) -> OrderOut:
    order = await owned_order(order_id, who)
    status, rendered, failed = await order_outcome(state.redis, order)
    statuses = await order_ticket_statuses(order, all_rendered=status == "completed")
    return OrderOut(
        id=order.id,
        event_id=order.event_id,
        status=status,
        total=order.quantity,
        rendered=rendered,
        failed=failed,
        tickets=[
            TicketRef(id=t, status=statuses.get(t, "queued"), pdf_url=f"/v1/tickets/{t}/pdf") for t in order.ticket_ids
        ],
        progress_url=progress_url(state.settings.notifier_public_url, order.id),
    )


@router.post("/{order_id}/cancel", response_model=CancelOut, responses=problems(401, 404, 409, 422, 503))
async def cancel_order(order_id: str, who: AnyUser) -> CancelOut:
    """Cancel an order (its buyer or an admin): revoke every ticket's code and
    give the tickets back to the event. Idempotent; refused (409) once any of
    its tickets has been checked in."""
    order = await owned_order(order_id, who)
    used = Problem(409, "already used", "a ticket of this order has been checked in")
    # Also on a retried cancel: never return the seat of an admitted ticket.
    if await _checked_in(order):
        raise used
    if order.status != "cancelled":
        # The status first: it is what check-in trusts. A crash after it leaves
        # seats not yet returned (a retried cancel finishes below), never a
        # returned seat whose ticket still admits.
        col = Order.get_pymongo_collection()
        await col.update_one({"_id": order.id}, {"$set": {"status": "cancelled"}})
        # A scan may have admitted a ticket since the look above. Both sides
        # write first and look second, so at least one sees the other and backs
        # off (see routes.checkins.check_in); never both succeed.
        if await _checked_in(order):
            await col.update_one({"_id": order.id}, {"$set": {"status": order.status}})
            raise used
    event = await event_of(order.event_id)
    if event is None:  # pragma: no cover - events are never deleted
        raise Problem(404, "order not found")
    # Once-only (the ledger's tag), so every (re)try runs it. The tickets are
    # revoked by the status set above: check-in and the read models ask it.
    await capacity.release(event, order.id, order.quantity)
    return CancelOut(id=order.id, status="cancelled", revoked=order.quantity)
