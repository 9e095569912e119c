"""An order as its readers see it: who may see it (``visible_order``, and
``order_of_buyer`` for its buyer's own uses), its summary in a list, its
tickets' ids a page at a time, and where its progress is pushed. Shared by the
order, event, download and page routes; the statuses themselves come from
``readmodel``."""

from __future__ import annotations

from ticketry.auth import Principal
from ticketry.documents import Event, Order, is_placed
from ticketry.ids import is_valid_id, ticket_id

from ticketry_api.core.pricing import unit_price_of
from ticketry_api.core.problem import Problem
from ticketry_api.http.schemas import OrderSummary
from ticketry_api.store import Store


def progress_url(state_url: str, order_id: str) -> str:
    return f"{state_url.rstrip('/')}/v1/orders/{order_id}/progress"


def order_summary(order: Order, event: Event) -> OrderSummary:
    status = order.status if order.status == "cancelled" else "processing"
    return OrderSummary(
        id=order.id, event_id=order.event_id, tier=order.tier, quantity=order.quantity,
        unit_price=str(unit_price_of(order, event)), currency=event.currency, status=status,
        created_at=order.created_at,
    )  # fmt: skip


async def visible_order(order_id: str, who: Principal, store: Store) -> tuple[Order, Event]:
    """The order if ``who`` may see it: its buyer, its event's organiser, an
    admin; 404 otherwise (existence does not leak)."""
    order = await store.orders.summary(order_id) if is_valid_id(order_id, "or") else None
    event = await store.event(order.event_id) if order is not None else None
    if order is None or event is None or not is_placed(order.status):
        raise Problem(404, "order not found")
    if not (who.owns(order.owner_id) or (who.role == "organizer" and event.organizer_id == who.sub)):
        raise Problem(404, "order not found")
    return order, event


async def order_of_buyer(order_id: str, who: Principal, store: Store) -> Order:
    """The order if ``who`` bought it (or is an admin) and may use it; 404 otherwise."""
    order, _ = await visible_order(order_id, who, store)
    if not who.owns(order.owner_id) or not who.may_use_order(order.id):
        raise Problem(404, "order not found")
    return order


def tickets_of(order: Order, start: int, limit: int) -> list[str]:
    """The ids of up to ``limit`` tickets of ``order`` from place ``start``."""
    return [ticket_id(order.id, n) for n in range(start, min(start + limit, order.quantity))]
