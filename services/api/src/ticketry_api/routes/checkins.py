"""/v1/checkins — one success per ticket, atomically; the scanners' public keys."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pymongo.errors import DuplicateKeyError
from ticketry.auth import Principal
from ticketry.codes import InvalidCode, rotate_key
from ticketry.documents import Checkin, CheckinAttempt, utcnow

from ticketry_api.deps import State, rate_limited, require
from ticketry_api.errors import Problem, problems
from ticketry_api.readmodel import ticket_of
from ticketry_api.routes.orders import is_cancelled
from ticketry_api.schemas import CheckinIn, CheckinOut, SigningKeysOut

router = APIRouter(prefix="/v1/checkins", tags=["checkins"])


def _unknown() -> Problem:
    # One answer for forged, tampered, unknown-key, unknown-ticket and revoked
    # codes: nothing that tells a guesser which part was wrong.
    return Problem(404, "unknown code")


@router.post("", response_model=CheckinOut, responses=problems(401, 403, 404, 409, 413, 422, 429))
async def check_in(
    body: CheckinIn, state: State, who: Annotated[Principal, Depends(rate_limited("checkins", "staff"))]
) -> CheckinOut:
    try:
        try:
            ticket_id, _kid = state.keyring.verify(body.code)
        except InvalidCode:
            # Maybe signed by a key another process just rotated in (throttled reload).
            if not state.keyring.refresh():
                raise
            ticket_id, _kid = state.keyring.verify(body.code)
    except InvalidCode:
        await CheckinAttempt(ticket_id=None, staff_id=who.sub, result="refused").insert()
        raise _unknown() from None
    ticket = await ticket_of(ticket_id)
    if ticket is None or ticket.cancelled:
        await CheckinAttempt(ticket_id=ticket_id, staff_id=who.sub, result="refused").insert()
        raise _unknown()
    now = utcnow()
    try:
        # The unique _id is the lock: exactly one scan can insert it.
        await Checkin(id=ticket_id, order_id=ticket.order_id, staff_id=who.sub, at=now).insert()
    except DuplicateKeyError:
        first = await Checkin.get(ticket_id)
        await CheckinAttempt(ticket_id=ticket_id, staff_id=who.sub, result="already_checked_in").insert()
        raise Problem(409, "already checked in", f"checked in at {first.at if first else 'an earlier scan'}") from None
    if await is_cancelled(ticket.order_id):
        # Cancelled since the look above. A scan and a cancel each write first
        # and look second, so at least one sees the other and backs off; never
        # both succeed (see routes.orders.cancel_order).
        await Checkin.get_pymongo_collection().delete_one({"_id": ticket_id})
        await CheckinAttempt(ticket_id=ticket_id, staff_id=who.sub, result="refused").insert()
        raise _unknown()
    await CheckinAttempt(ticket_id=ticket_id, staff_id=who.sub, result="accepted", at=now).insert()
    return CheckinOut(ticket_id=ticket_id, checked_in_at=now)


def _keys_out(state: State) -> SigningKeysOut:
    return SigningKeysOut(active_kid=state.keyring.active_kid, keys=state.keyring.public_pems())


@router.get("/keys", response_model=SigningKeysOut, responses=problems(401, 403))
async def signing_keys(state: State, _: Annotated[Principal, Depends(require("staff"))]) -> SigningKeysOut:
    """Every public key that verifies codes, by key id: door scanners download
    this and verify codes offline (they can never sign)."""
    state.keyring.refresh()
    return _keys_out(state)


@router.post("/keys/rotate", response_model=SigningKeysOut, responses=problems(401, 403))
async def rotate_signing_key(state: State, _: Annotated[Principal, Depends(require("admin"))]) -> SigningKeysOut:
    """Make a new signing key active (admin). Codes already issued keep verifying
    with their own key; other api processes pick the new key up within seconds."""
    rotate_key(state.settings.keys_dir)
    state.keyring.refresh(force=True)
    return _keys_out(state)
