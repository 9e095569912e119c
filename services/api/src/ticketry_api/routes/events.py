"""/v1/events"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from ticketry.auth import Principal
from ticketry.documents import Event
from ticketry.ids import is_valid_id, new_id

from ticketry_api import capacity
from ticketry_api.deps import AnyUser, require
from ticketry_api.errors import Problem, problems
from ticketry_api.orders import price_of
from ticketry_api.schemas import EventIn, EventOut

router = APIRouter(prefix="/v1/events", tags=["events"])


def event_out(e: Event, sold: int) -> EventOut:
    return EventOut(
        id=e.id, name=e.name, venue=e.venue, starts_at=e.starts_at, capacity=e.capacity,
        sold=sold, price=str(price_of(e)), currency=e.currency,
    )  # fmt: skip


@router.post("", status_code=201, response_model=EventOut, responses=problems(401, 403, 413, 422))
async def create_event(body: EventIn, who: Annotated[Principal, Depends(require("organizer"))]) -> EventOut:
    event = Event(
        id=new_id("ev"),
        name=body.name,
        venue=body.venue,
        starts_at=body.starts_at,
        capacity=body.capacity,
        price_minor=int(body.price * 100),
        currency=body.currency,
        organizer_id=who.sub,
    )
    await event.insert()
    return event_out(event, 0)


@router.get("/{event_id}", response_model=EventOut, responses=problems(401, 404, 422))
async def get_event(event_id: str, _: AnyUser) -> EventOut:
    event = await Event.get(event_id) if is_valid_id(event_id, "ev") else None
    if event is None:
        raise Problem(404, "event not found")
    return event_out(event, await capacity.sold(event.id))
