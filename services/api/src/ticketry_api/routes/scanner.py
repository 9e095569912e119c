"""What a door scanner needs beyond ``POST /v1/checkins`` to judge codes
offline (as pretixSCAN does): the rules of its check-in list, and the orders of
its event that were cancelled (their tickets no longer admit). With the public
keys (``GET /v1/checkins/keys``) that is everything a bound code is judged by."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel
from ticketry.auth import Principal
from ticketry.documents import Event, Order, utcnow
from ticketry.ids import is_valid_id

from ticketry_api import checkins
from ticketry_api.deps import require
from ticketry_api.errors import Problem, problems
from ticketry_api.schemas import CheckinListOut

router = APIRouter(tags=["checkins"])
Door = Annotated[Principal, Depends(require("staff", "organizer"))]


async def _door_event(event_id: str, who: Principal) -> Event:
    """The event if ``who`` may scan for it (staff, within their ``events``) or organises it."""
    event = await Event.get(event_id) if is_valid_id(event_id, "ev") else None
    if event is None or (who.role == "organizer" and event.organizer_id != who.sub):
        raise Problem(404, "event not found")
    if not who.may_scan_for(event.id):
        raise Problem(403, "forbidden", "this token may not check in for this event")
    return event


@router.get("/v1/checkin-lists/{list_id}", response_model=CheckinListOut, responses=problems(401, 403, 404, 422))
async def checkin_list(list_id: str, who: Door) -> CheckinListOut:
    """One check-in list: its event and the tiers it admits (all when empty)."""
    lst = await checkins.list_for(list_id, who)
    await _door_event(lst.event_id, who)
    return CheckinListOut(id=lst.id, event_id=lst.event_id, name=lst.name, tiers=lst.tiers)


class RevocationsOut(BaseModel):
    """The event's cancelled orders: a ticket ``tk_<hex>_<n>`` is of order ``or_<hex>``."""

    event_id: str
    orders: list[str]
    as_of: datetime


@dataclass
class _Cached:
    at: float
    out: RevocationsOut


@dataclass
class RevocationCache:
    """Every door asks every minute; the store is asked at most every ``ttl_s``
    per event and api process (FerretDB v1 answers this query with a scan)."""

    ttl_s: float = 10.0
    entries: dict[str, _Cached] = field(default_factory=dict)

    async def get(self, event_id: str) -> RevocationsOut:
        hit = self.entries.get(event_id)
        if hit is not None and time.monotonic() - hit.at < self.ttl_s:
            return hit.out
        as_of = utcnow()
        col = Order.get_pymongo_collection()
        found = await col.find({"event_id": event_id, "status": "cancelled"}, {"_id": 1}).to_list()
        out = RevocationsOut(event_id=event_id, orders=sorted(d["_id"] for d in found), as_of=as_of)
        if len(self.entries) > 10_000:
            self.entries.clear()
        self.entries[event_id] = _Cached(time.monotonic(), out)
        return out


@router.get("/v1/events/{event_id}/revocations", response_model=RevocationsOut, responses=problems(401, 403, 404, 422))
async def revocations(event_id: str, who: Door, request: Request) -> RevocationsOut:
    """The event's cancelled orders, for scanners that judge codes offline; up
    to ten seconds old."""
    event = await _door_event(event_id, who)
    cache: RevocationCache | None = getattr(request.app.state, "revocations", None)
    if cache is None:
        cache = request.app.state.revocations = RevocationCache()
    return await cache.get(event.id)
