"""/v1/events: events, their tiers, check-in lists and orders (organisers)."""

from __future__ import annotations

import logging
from datetime import UTC
from typing import Annotated
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Depends, Query
from ticketry import designs, fonts
from ticketry.auth import Principal
from ticketry.documents import CheckinList, Event, Tier
from ticketry.ids import is_valid_id, new_id

from ticketry_api.adapters import ratelimit
from ticketry_api.adapters.renders import request_designs
from ticketry_api.core import cursors
from ticketry_api.core.ledger import Head
from ticketry_api.core.pricing import minor_to_decimal
from ticketry_api.core.problem import Problem
from ticketry_api.deps import State, rate_limited, require
from ticketry_api.edge.events_read import own_event
from ticketry_api.edge.orders_read import order_summary
from ticketry_api.http.errors import problems
from ticketry_api.http.schemas import (
    CheckinListIn,
    CheckinListOut,
    EventIn,
    EventOut,
    OrderSummary,
    Page,
    TierOut,
)

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/events", tags=["events"])
Organizer = Annotated[Principal, Depends(require("organizer"))]
# Reads count against the caller's ``reads`` limit (429 over it).
OrganizerReader = Annotated[Principal, Depends(rate_limited("reads", "organizer"))]
Reader = Annotated[Principal, Depends(rate_limited("reads", "buyer", "organizer", "staff"))]
DoorReader = Annotated[Principal, Depends(rate_limited("reads", "organizer", "staff"))]
Limit = Annotated[int, Query(ge=1, le=cursors.MAX_LIMIT)]
EventCursor = Annotated[str | None, Query(max_length=200, pattern=cursors.EVENT_CURSOR)]
OrderCursor = Annotated[str | None, Query(max_length=200, pattern=cursors.ORDER_CURSOR)]


def event_out(e: Event, sold: Head) -> EventOut:
    """An event as the API shows it: times in the venue's zone (stored in UTC)."""
    zone = ZoneInfo(e.timezone)
    return EventOut(
        id=e.id, name=e.name, venue=e.venue, timezone=e.timezone, starts_at=e.starts_at.astimezone(zone),
        doors_at=(e.doors_at or e.starts_at).astimezone(zone), capacity=e.capacity, sold=sold.sold,
        price=str(minor_to_decimal(e.price_minor)), currency=e.currency,
        tiers=[
            TierOut(
                id=t.id, name=t.name, price=str(minor_to_decimal(t.price_minor)), capacity=t.capacity, lane=t.lane,
                max_per_buyer=t.max_per_buyer, sold=sold.tier_sold.get(t.id, 0 if e.tiers else sold.sold),
            )
            for t in e.tier_list()
        ],
        on_sale_at=e.on_sale_at.astimezone(zone) if e.on_sale_at else None, waiting_room=e.waiting_room,
        max_tickets_per_permission=e.tickets_per_permission(),
    )  # fmt: skip


@router.post("", status_code=201, response_model=EventOut, responses=problems(401, 403, 413, 422, 429))
async def create_event(body: EventIn, who: Organizer, state: State) -> EventOut:
    # Counted first: each tier is a design the renderers build now, for anyone's tickets.
    designs_asked = len(body.tiers or []) or 1
    await ratelimit.enforce_many(
        state.redis, who.sub, [("events", 1, "events"), ("designs", designs_asked, "tiers")], state.rates
    )
    tier_names = [t.name for t in body.tiers or []]
    for label, text in (("name", body.name), ("venue", body.venue), *(("tier name", t) for t in tier_names)):
        if (why := fonts.undrawable(text)) is not None:
            raise Problem(422, f"{label} cannot be printed", why)
    # One line each on the ticket, never wrapped: shrunk down to a floor, then refused.
    if (why := fonts.event_unfit(body.name, body.venue, tier_names)) is not None:
        raise Problem(422, "text too long", why)
    tiers = [
        Tier(
            id=t.id, name=t.name, price_minor=int(t.price * 100), capacity=t.capacity, lane=t.lane,
            max_per_buyer=t.max_per_buyer,
        )
        for t in body.tiers or []
    ]  # fmt: skip
    event = Event(
        id=new_id("ev"),
        name=body.name,
        venue=body.venue,
        starts_at=body.starts_at.astimezone(UTC),
        doors_at=body.doors_at.astimezone(UTC) if body.doors_at else None,
        timezone=body.timezone,
        capacity=body.capacity,
        price_minor=int(body.price * 100),
        currency=body.currency,
        organizer_id=who.sub,
        # Without tiers: the one standard tier at the event's price.
        tiers=tiers or [Tier(id="standard", name="Standard", price_minor=int(body.price * 100))],
        on_sale_at=body.on_sale_at.astimezone(UTC) if body.on_sale_at else None,
        waiting_room=body.waiting_room,
        max_tickets_per_permission=body.max_tickets_per_permission,
    )
    await state.store.events.insert(event)
    # Its designs are built now, not by its first ticket: the 201 waits for them (bounded).
    asked = await request_designs(state.redis, state.keyring, event)
    if not await designs.wait_built(state.redis, asked, state.settings.design_wait_s):
        log.info("event created before its designs were built", extra={"event_id": event.id})
    return event_out(event, Head())


@router.get("", response_model=Page[EventOut], responses=problems(401, 403, 422, 429))
async def list_events(
    who: OrganizerReader, state: State, cursor: EventCursor = None, limit: Limit = cursors.DEFAULT_LIMIT
) -> Page[EventOut]:
    """The caller's own events (admin: all), oldest first."""
    events, nxt = await state.store.events.of_organizer(None if who.is_admin else who.sub, cursor, limit)
    return Page(items=[event_out(e, await state.store.ledger.sold(e.id)) for e in events], next=nxt)


@router.get("/{event_id}", response_model=EventOut, responses=problems(401, 404, 422, 429))
async def get_event(event_id: str, _: Reader, state: State) -> EventOut:
    event = await state.store.event(event_id) if is_valid_id(event_id, "ev") else None
    if event is None:
        raise Problem(404, "event not found")
    return event_out(event, await state.store.ledger.sold(event.id))


@router.get("/{event_id}/orders", response_model=Page[OrderSummary], responses=problems(401, 403, 404, 422, 429))
async def event_orders(
    event_id: str, who: OrganizerReader, state: State, cursor: OrderCursor = None, limit: Limit = cursors.DEFAULT_LIMIT
) -> Page[OrderSummary]:
    """The orders of an event the caller organises, oldest id first."""
    event = await own_event(state.store, event_id, who)
    found, nxt = await state.store.orders.of_event(event.id, cursor, limit)
    return Page(items=[order_summary(o, event) for o in found], next=nxt)


@router.post(
    "/{event_id}/checkin-lists",
    status_code=201,
    response_model=CheckinListOut,
    responses=problems(401, 403, 404, 409, 422),
)
async def create_checkin_list(event_id: str, body: CheckinListIn, who: Organizer, state: State) -> CheckinListOut:
    event = await own_event(state.store, event_id, who)
    tiers = body.tiers or []
    if unknown := sorted(set(tiers) - {t.id for t in event.tier_list()}):
        # 409, not 422: the body is well formed; it names what this event lacks.
        raise Problem(409, "unknown tier", f"this event has no tier {', '.join(unknown)}", kind="unknown-tier")
    lst = CheckinList(id=new_id("cl"), event_id=event.id, name=body.name, tiers=tiers, allow_reentry=body.allow_reentry)
    await state.store.checkins.create_list(lst)
    return CheckinListOut.of(lst)


@router.get(
    "/{event_id}/checkin-lists", response_model=Page[CheckinListOut], responses=problems(401, 403, 404, 422, 429)
)
async def checkin_lists(event_id: str, who: DoorReader, state: State) -> Page[CheckinListOut]:
    """An event's check-in lists: for its organiser, and for staff who may scan for it."""
    event = await state.store.event(event_id) if is_valid_id(event_id, "ev") else None
    if event is None or (who.role == "organizer" and event.organizer_id != who.sub):
        raise Problem(404, "event not found")
    if not who.may_scan_for(event.id, event.organizer_id):
        raise Problem(403, "forbidden", "this token may not check in for this event")
    found = await state.store.checkins.lists_of(event.id)
    return Page(items=[CheckinListOut.of(c) for c in found])
