"""/v1/checkins — one success per ticket, atomically."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pymongo.errors import DuplicateKeyError
from ticketry.auth import Principal
from ticketry.codes import InvalidCode
from ticketry.documents import Checkin, CheckinAttempt, Ticket, utcnow

from ticketry_api.deps import State, require
from ticketry_api.errors import Problem
from ticketry_api.schemas import CheckinIn, CheckinOut

router = APIRouter(prefix="/v1/checkins", tags=["checkins"])

_UNKNOWN = Problem(404, "unknown code")


@router.post("", response_model=CheckinOut)
async def check_in(body: CheckinIn, state: State, who: Annotated[Principal, Depends(require("staff"))]) -> CheckinOut:
    try:
        ticket_id, _kid = state.keyring.verify(body.code)
    except InvalidCode:
        await CheckinAttempt(ticket_id=None, staff_id=who.sub, result="refused").insert()
        raise _UNKNOWN from None
    ticket = await Ticket.get(ticket_id)
    if ticket is None or ticket.status == "revoked":
        await CheckinAttempt(ticket_id=ticket_id, staff_id=who.sub, result="refused").insert()
        raise _UNKNOWN
    now = utcnow()
    try:
        # The unique _id is the lock: exactly one scan can insert it.
        await Checkin(id=ticket_id, staff_id=who.sub, at=now).insert()
    except DuplicateKeyError:
        first = await Checkin.get(ticket_id)
        await CheckinAttempt(ticket_id=ticket_id, staff_id=who.sub, result="already_checked_in").insert()
        raise Problem(409, "already checked in", f"checked in at {first.at if first else 'an earlier scan'}") from None
    await CheckinAttempt(ticket_id=ticket_id, staff_id=who.sub, result="accepted", at=now).insert()
    # The read model's status; the Checkin document stays the authority.
    await Ticket.get_pymongo_collection().update_one(
        {"_id": ticket_id}, {"$set": {"status": "checked_in", "checked_in_at": now}}
    )
    return CheckinOut(ticket_id=ticket_id, checked_in_at=now)
