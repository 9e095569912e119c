"""/v1/checkins — a scan on a check-in list (see ``ticketry_api.service_layer.checkins``); the scanners' public keys."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from ticketry.auth import Principal
from ticketry.codes import rotate_key

from ticketry_api.adapters.renders import request_upcoming_designs
from ticketry_api.deps import State, rate_limited, require
from ticketry_api.http.errors import PROBLEM, problems
from ticketry_api.http.schemas import CheckinIn, CheckinOut, SigningKeysOut
from ticketry_api.middleware import metrics
from ticketry_api.service_layer import checkins

router = APIRouter(prefix="/v1/checkins", tags=["checkins"])


@router.post("", response_model=CheckinOut, responses=problems(401, 403, 404, 409, 413, 422, 429))
async def check_in(
    body: CheckinIn, state: State, who: Annotated[Principal, Depends(rate_limited("checkins", "staff", devices=True))]
) -> JSONResponse:
    """Admit a ticket on a check-in list: 200 once per ticket and list; 409
    ``already`` (naming the first ``checked_in_at``, the ``holder_name`` and
    the ``tier``) or ``wrong-list``; 404 for an unknown, forged or cancelled
    code. The same ``nonce`` again gets the first answer again."""
    lst = await checkins.list_for(state.store, body.list_id, who)
    result = await checkins.scan_once(state.store, state.keyring, lst, body.code, who, body.nonce, body.direction)
    metrics.CHECKINS.labels(result.outcome).inc()
    media = "application/json" if result.status < 400 else PROBLEM
    return JSONResponse(result.body, status_code=result.status, media_type=media)


def _keys_out(state: State) -> SigningKeysOut:
    return SigningKeysOut(active_kid=state.keyring.active_kid, keys=state.keyring.public_pems())


@router.get("/keys", response_model=SigningKeysOut, responses=problems(401, 403))
async def signing_keys(
    state: State, _: Annotated[Principal, Depends(require("staff", devices=True))]
) -> SigningKeysOut:
    """Every public key that verifies codes, by key id: door scanners download
    this and verify codes offline (they can never sign)."""
    state.keyring.refresh()
    return _keys_out(state)


@router.post("/keys/rotate", response_model=SigningKeysOut, responses=problems(401, 403))
async def rotate_signing_key(state: State, _: Annotated[Principal, Depends(require("admin"))]) -> SigningKeysOut:
    """Make a new signing key active (admin). Codes already issued keep verifying
    with their own key; other api processes pick the new key up within seconds.
    The designs of upcoming events are asked for again, with the new key id."""
    rotate_key(state.settings.keys_dir)
    state.keyring.refresh(force=True)
    await request_upcoming_designs(state.store, state.redis, state.keyring)
    return _keys_out(state)
