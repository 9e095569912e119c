"""/v1/orders"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query
from ticketry.auth import Principal
from ticketry.tracing import tracer

from ticketry_api.adapters.readmodel import order_outcome, order_ticket_statuses
from ticketry_api.adapters.replicas import replicated
from ticketry_api.core import cursors
from ticketry_api.core.names import NameLimits
from ticketry_api.core.pricing import unit_price_of
from ticketry_api.core.waitingroom import permission_key
from ticketry_api.deps import State, rate_limited, require
from ticketry_api.edge.orders_read import order_summary, progress_url, tickets_of, visible_order
from ticketry_api.http.errors import problems
from ticketry_api.http.schemas import (
    CancelOut,
    OrderAccepted,
    OrderIn,
    OrderOut,
    OrderSummary,
    Page,
    TicketRef,
)
from ticketry_api.service_layer import cancel
from ticketry_api.service_layer.orders import place_order
from ticketry_api.waitingroom.gate import OrderGate
from ticketry_api.web.links import status_page_url

router = APIRouter(prefix="/v1/orders", tags=["orders"])
_TRACER = tracer(__name__)
Reader = Annotated[Principal, Depends(rate_limited("reads", "buyer", "organizer", "staff"))]
Canceller = Annotated[Principal, Depends(rate_limited("cancels", "buyer", "organizer", "staff"))]
Limit = Annotated[int, Query(ge=1, le=cursors.MAX_LIMIT)]
Cursor = Annotated[str | None, Query(max_length=200, pattern=cursors.ORDER_CURSOR)]
PlaceCursor = Annotated[str | None, Query(max_length=200, pattern=cursors.PLACE_CURSOR)]
# ``GET /v1/orders/{id}`` lists this many tickets at most; the rest page by page.
ORDER_TICKETS_INLINE = 64  # point reads (store.reads.POINT_READS_UP_TO)


@router.post(
    "", status_code=202, response_model=OrderAccepted, responses=problems(401, 403, 404, 409, 413, 422, 429, 503)
)
async def create_order(
    body: OrderIn,
    state: State,
    who: Annotated[Principal, Depends(require("buyer"))],  # rate-limited in place_order
    idempotency_key: Annotated[str | None, Header(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")] = None,
    queue_permission: Annotated[str | None, Header(max_length=200)] = None,
) -> OrderAccepted:
    state.keyring.refresh()  # sign with the newest key if another process rotated
    # An on-sale's rules: not before on_sale_at; a waiting room's permission (waitingroom.gate).
    gate = OrderGate(state.redis, permission_key(state.settings.jwt_key), who, queue_permission, body.quantity)
    # The root of each ticket's trace: its render request carries this span on.
    with _TRACER.start_as_current_span("order.place", attributes={"order.quantity": body.quantity}) as span:
        try:
            order = await place_order(
                store=state.store,
                redis=state.redis,
                keyring=state.keyring,
                principal=who,
                body=body,
                idempotency_key=idempotency_key,
                max_quantity=state.settings.max_tickets_per_order,
                rates=state.rates,
                names=NameLimits(state.settings.max_distinct_names, state.settings.name_check_budget_s),
                replicas=state.settings,
                gate=gate.check,
            )
        except BaseException:
            await gate.refused()
            raise
        await gate.accepted()
        span.set_attribute("order.id", order.id)
        # 202 only once a replica holds the order's render requests (a replay
        # waits again: the first answer may have been this 503).
        await replicated(state.redis, state.settings)
    event = await state.store.event(order.event_id)
    assert event is not None  # the order was placed for it
    return OrderAccepted(
        id=order.id,
        event_id=order.event_id,
        quantity=order.quantity,
        tier=order.tier,
        unit_price=str(unit_price_of(order, event)),
        currency=event.currency,
        tickets=order.ticket_ids,
        progress_url=progress_url(state.settings.notifier_public_url, order.id),
        status_page_url=status_page_url(state.links, order.id, order.owner_id, secret=state.settings.jwt_key),
    )


@router.get("", response_model=Page[OrderSummary], responses=problems(401, 403, 422, 429))
async def list_orders(
    who: Reader,
    state: State,
    event_id: Annotated[str | None, Query(max_length=64)] = None,
    cursor: Cursor = None,
    limit: Limit = cursors.DEFAULT_LIMIT,
) -> Page[OrderSummary]:
    """The caller's own orders, oldest id first, optionally of one event.
    (``status`` here is ``processing`` or ``cancelled``; the order itself tells
    its render outcome.)"""
    found, nxt = await state.store.orders.of_buyer(who.sub, event_id, cursor, limit)
    items = []
    for order in found:
        if (event := await state.store.event(order.event_id)) is not None:
            items.append(order_summary(order, event))
    return Page(items=items, next=nxt)


@router.get("/{order_id}", response_model=OrderOut, responses=problems(401, 404, 422, 429))
async def get_order(order_id: str, who: Reader, state: State) -> OrderOut:
    order, event = await visible_order(order_id, who, state.store)
    status, rendered, failed = await order_outcome(state.redis, state.store, order)
    shown = tickets_of(order, 0, ORDER_TICKETS_INLINE)
    statuses = await order_ticket_statuses(state.store, order, shown, all_rendered=status == "completed")
    return OrderOut(
        id=order.id,
        event_id=order.event_id,
        tier=order.tier,
        unit_price=str(unit_price_of(order, event)),
        currency=event.currency,
        status=status,
        total=order.quantity,
        rendered=rendered,
        failed=failed,
        tickets=[TicketRef(id=t, status=statuses.get(t, "queued"), pdf_url=f"/v1/tickets/{t}/pdf") for t in shown],
        tickets_next=cursors.encode(str(len(shown))) if order.quantity > len(shown) else None,
        progress_url=progress_url(state.settings.notifier_public_url, order.id),
    )


@router.get("/{order_id}/tickets", response_model=Page[TicketRef], responses=problems(401, 404, 422, 429))
async def order_tickets(
    order_id: str, who: Reader, state: State, cursor: PlaceCursor = None, limit: Limit = cursors.DEFAULT_LIMIT
) -> Page[TicketRef]:
    """An order's tickets in order, a page at a time."""
    order, _ = await visible_order(order_id, who, state.store)
    start = cursors.decode_index(cursor, order.quantity)
    ids = tickets_of(order, start, limit)
    status, _, _ = await order_outcome(state.redis, state.store, order)
    statuses = await order_ticket_statuses(state.store, order, ids, all_rendered=status == "completed")
    end = start + len(ids)
    return Page(
        items=[TicketRef(id=t, status=statuses.get(t, "queued"), pdf_url=f"/v1/tickets/{t}/pdf") for t in ids],
        next=cursors.encode(str(end)) if end < order.quantity else None,
    )


@router.post("/{order_id}/cancel", response_model=CancelOut, responses=problems(401, 404, 409, 422, 429, 503))
async def cancel_order(order_id: str, state: State, who: Canceller) -> CancelOut:
    """Cancel an order (its buyer, its event's organiser, or an admin): its
    tickets not rendered yet are never rendered, its PDFs are no longer
    served, its codes no longer admit, its tickets go back to the event.
    Idempotent; refused (409) once any of its tickets has been checked in."""
    order, event = await visible_order(order_id, who, state.store)
    await cancel.cancel(state.redis, state.store, order, event, who, state.pdf_store())
    # A retried cancel redoes its steps (the fate is decided) and waits again.
    await replicated(state.redis, state.settings)
    return CancelOut(id=order.id, status="cancelled", revoked=order.quantity)
