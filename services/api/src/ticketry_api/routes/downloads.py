"""``GET /v1/orders/{id}/pdf``: an order's rendered tickets as one PDF ("download
all"), for its buyer (or admin) or the holder of its order link; and who may
read an order with an order link (shared with the buyer's page routes)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from ticketry.auth import AuthError, Principal, verify_order_link
from ticketry.documents import Order

from ticketry_api import ratelimit
from ticketry_api.deps import AppState, State, app_state
from ticketry_api.errors import Problem, problems
from ticketry_api.readmodel import order_outcome, order_ticket_statuses
from ticketry_api.routes.orders import tickets_of, visible_order
from ticketry_api.store import Store
from ticketry_api.web.pdfs import PART_SIZE, join_pdfs

router = APIRouter(prefix="/v1/orders", tags=["orders"])

# The cookie the buyer's page sets (``POST /o/{id}/session``), path-scoped to the order's page.
LINK_COOKIE = "ticketry_order"
bearer_scheme = HTTPBearer(auto_error=False)
_UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}


def bearer_token(creds: HTTPAuthorizationCredentials | None) -> str | None:
    return creds.credentials if creds is not None and creds.scheme.lower() == "bearer" else None


async def _counted(state: AppState, who: Principal) -> Principal:
    await ratelimit.enforce(state.redis, "reads", who.sub, state.rates.limit("reads"), state.rates.rate_window_s)
    return who


def link_reader(state: AppState, token: str | None, order_id: str) -> Principal:
    """The buyer an order link to ``order_id`` speaks for; 401 for anything else."""
    if not token:
        raise Problem(401, "unauthorized", "an order link is required", _UNAUTHORIZED)
    try:
        who = verify_order_link(
            token, order_id, secret=state.settings.jwt_key, leeway_s=state.token_verifier().leeway_s
        )
    except AuthError:
        raise Problem(401, "unauthorized", "invalid or expired link", _UNAUTHORIZED) from None
    assert who.may_use_order(order_id)
    return who


async def page_reader(
    order_id: str, request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)]
) -> Principal:
    """Dependency of the buyer's page routes: the order link in the Authorization
    header or in the page's cookie (what a plain ``<a href>`` download sends)."""
    state = app_state(request)
    return await _counted(state, link_reader(state, bearer_token(creds) or request.cookies.get(LINK_COOKIE), order_id))


async def owner_or_link(
    order_id: str, request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)]
) -> Principal:
    """A bearer token of the order's buyer (or an admin), or the order's link."""
    state = app_state(request)
    token = bearer_token(creds)
    if token is None:
        raise Problem(401, "unauthorized", "a bearer token is required", _UNAUTHORIZED)
    try:
        who = state.token_verifier().verify(token)
    except AuthError:
        who = link_reader(state, token, order_id)
    return await _counted(state, who)


async def order_of_buyer(order_id: str, who: Principal, store: Store) -> Order:
    """The order if ``who`` bought it (or is an admin) and may use it; 404 otherwise."""
    order, _ = await visible_order(order_id, who, store)
    if not who.owns(order.owner_id) or not who.may_use_order(order.id):
        raise Problem(404, "order not found")
    return order


async def joined_pdf(state: AppState, order: Order, part: int) -> Response:
    """The rendered tickets of ``order``'s ``part`` (``PART_SIZE`` tickets each) as one PDF."""
    if part * PART_SIZE >= order.quantity:
        raise Problem(404, "no such part", f"this order has {-(-order.quantity // PART_SIZE)} part(s)")
    status, _, _ = await order_outcome(state.redis, order)
    if status == "cancelled":
        raise Problem(410, "cancelled", "the order was cancelled: its PDFs are no longer served")
    ids = tickets_of(order, part * PART_SIZE, PART_SIZE)
    statuses = await order_ticket_statuses(order, ids, all_rendered=status == "completed")
    rendered = [t for t in ids if statuses.get(t) in ("rendered", "checked_in")]
    if not rendered:
        raise Problem(409, "not rendered", "none of these tickets is rendered yet")
    store = state.pdf_store()
    # A PDF that went missing meanwhile (its order was just cancelled) is left out.
    pdfs = await asyncio.gather(*(store.read(order.id, t) for t in rendered))
    body = await asyncio.to_thread(join_pdfs, [p for p in pdfs if p is not None])
    name = f"{order.id}.pdf" if order.quantity <= PART_SIZE else f"{order.id}-part{part + 1}.pdf"
    return Response(
        body, media_type="application/pdf",
        headers={"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "private, no-store"},
    )  # fmt: skip


Part = Annotated[int, Query(ge=0, le=1000, description=f"which {PART_SIZE} tickets: 0 for the first")]


@router.get(
    "/{order_id}/pdf",
    response_class=Response,
    responses={200: {"content": {"application/pdf": {}}}, **problems(401, 404, 409, 410, 422, 429)},
)
async def order_pdf(
    order_id: str, who: Annotated[Principal, Depends(owner_or_link)], state: State, part: Part = 0
) -> Response:
    """All of an order's rendered tickets as one multi-page PDF, in order; a
    big order in parts of 250 tickets (``?part=1`` for the second). For its
    buyer (or an admin) or with its order link; 409 while none is rendered,
    410 once cancelled."""
    return await joined_pdf(state, await order_of_buyer(order_id, who, state.db), part)
