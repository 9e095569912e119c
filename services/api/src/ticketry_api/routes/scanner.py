"""What a door scanner needs beyond ``POST /v1/checkins`` to judge codes
offline (as pretixSCAN does): the rules of its check-in list, and the orders of
its event that were cancelled (their tickets no longer admit). With the public
keys (``GET /v1/checkins/keys``) that is everything a bound code is judged by;
the list's tickets (``ticketry_api.service_layer.door_tickets``) add whom it admits: the
holder's name and tier, shown when the scanner is offline."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel
from ticketry.auth import Principal
from ticketry.documents import Event, utcnow
from ticketry.ids import is_valid_id

from ticketry_api.core import cursors, door
from ticketry_api.core.checkins import inside_now
from ticketry_api.core.problem import Problem
from ticketry_api.deps import AppState, State, rate_limited
from ticketry_api.http.errors import problems
from ticketry_api.http.schemas import CheckinListOut, CheckinListStatusOut, Since
from ticketry_api.service_layer import checkins, door_tickets

router = APIRouter(tags=["checkins"])
# Every read here counts against the caller's ``reads`` limit (429 over it).
Door = Annotated[Principal, Depends(rate_limited("reads", "staff", "organizer", devices=True))]


async def _door_event(state: AppState, event_id: str, who: Principal) -> Event:
    """The event if ``who`` may scan for it (staff, within their ``org`` and ``events``) or organises it."""
    event = await state.store.event(event_id) if is_valid_id(event_id, "ev") else None
    if event is None or (who.role == "organizer" and event.organizer_id != who.sub):
        raise Problem(404, "event not found")
    if not who.may_scan_for(event.id, event.organizer_id):
        raise Problem(403, "forbidden", "this token may not check in for this event")
    return event


@router.get("/v1/checkin-lists/{list_id}", response_model=CheckinListOut, responses=problems(401, 403, 404, 422, 429))
async def checkin_list(list_id: str, who: Door, state: State) -> CheckinListOut:
    """One check-in list: its event and the tiers it admits (all when empty)."""
    lst = await checkins.list_for(state.store, list_id, who)
    await _door_event(state, lst.event_id, who)
    return CheckinListOut.of(lst)


@router.get(
    "/v1/checkin-lists/{list_id}/status",
    response_model=CheckinListStatusOut,
    responses=problems(401, 403, 404, 422, 429),
)
async def checkin_list_status(list_id: str, who: Door, state: State) -> CheckinListStatusOut:
    """How many of the list's tickets are inside (their last accepted scan an
    entry) and how many were ever admitted; on a list without re-entry the
    two are the same. Counted from the list's admissions and moves."""
    lst = await checkins.list_for(state.store, list_id, who)
    await _door_event(state, lst.event_id, who)
    admitted, entries, exits = await state.store.checkins.counts(lst.id)
    return CheckinListStatusOut(list_id=lst.id, inside=inside_now(admitted, entries, exits), admitted=admitted)


class RevokedCodeOut(BaseModel):
    code: str
    revoked_at: datetime


class RevocationsOut(BaseModel):
    """The event's cancelled orders (a ticket ``tk_<hex>_<n>`` is of order
    ``or_<hex>``) and the codes re-issues replaced (``codes``: since ``since``
    when asked with it; pass the last answer's ``as_of``)."""

    event_id: str
    orders: list[str]
    codes: list[RevokedCodeOut] = []
    as_of: datetime


@router.get(
    "/v1/events/{event_id}/revocations", response_model=RevocationsOut, responses=problems(401, 403, 404, 422, 429)
)
async def revocations(
    event_id: str, who: Door, state: State, since: Annotated[Since | None, Query()] = None
) -> RevocationsOut:
    """The event's cancelled orders and the codes its tickets' re-issues
    replaced (with ``since``: those revoked since it, and those of the five
    minutes before it, which a late write may have kept from the earlier
    answer), for scanners that judge codes offline; up to ten seconds old."""
    event = await _door_event(state, event_id, who)
    orders, codes, as_of = await state.store.revocations.of(event.id)
    fresh = [RevokedCodeOut(code=c, revoked_at=at) for c, at in door.revoked_since(codes, since)]
    return RevocationsOut(event_id=event.id, orders=orders, codes=fresh, as_of=as_of)


class DoorTier(BaseModel):
    id: str
    name: str


class DoorTicketOut(BaseModel):
    """A ticket as a door sees it: ``checked_in`` means admitted on this list
    (``checked_in_at``, the first admission); ``cancelled``, its order was."""

    id: str
    holder_name: str
    tier: DoorTier
    status: Literal["valid", "cancelled", "checked_in"]
    checked_in_at: datetime | None = None


class DoorTicketsOut(BaseModel):
    """One page of a check-in list's tickets; ``next`` is the next page's
    cursor (None: the last). ``tiers``: every tier the list admits, named
    (a ticket sold after the download has one of them). ``as_of``: when this
    page was read."""

    list_id: str
    event_id: str
    tiers: list[DoorTier]
    items: list[DoorTicketOut]
    next: str | None = None
    as_of: datetime


@router.get(
    "/v1/checkin-lists/{list_id}/tickets", response_model=DoorTicketsOut, responses=problems(401, 403, 404, 422, 429)
)
async def checkin_list_tickets(
    list_id: str,
    who: Door,
    state: State,
    cursor: Annotated[str | None, Query(max_length=200, pattern=cursors.DOOR_CURSOR)] = None,
    limit: Annotated[int, Query(ge=1, le=door.MAX_LIMIT)] = door.DEFAULT_LIMIT,
) -> DoorTicketsOut:
    """The tickets a check-in list admits (its event's, of its tiers), in
    ticket-id order, for a scanner that names the guest offline: holder,
    tier, and whether the ticket is valid, cancelled or already admitted on
    this list. Whoever may scan on the list (its event's staff, its
    organiser, admin) may read it."""
    lst = await checkins.list_for(state.store, list_id, who)
    event = await _door_event(state, lst.event_id, who)
    as_of = utcnow()
    page = await door_tickets.read_page(state.store, lst, cursor, limit)
    names = door_tickets.tier_names(event)
    items = [
        DoorTicketOut(
            id=t.id, holder_name=t.holder_name, tier=DoorTier(id=t.tier, name=names.get(t.tier, t.tier)),
            status=status, checked_in_at=at if status == "checked_in" else None,
        )
        for t, status, at in page.tickets
    ]  # fmt: skip
    tiers = [DoorTier(id=t.id, name=t.name) for t in event.tier_list() if lst.admits(t.id)]
    return DoorTicketsOut(list_id=lst.id, event_id=lst.event_id, tiers=tiers, items=items, next=page.next, as_of=as_of)
