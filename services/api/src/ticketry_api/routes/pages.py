"""The pages (see ``ticketry_api.web``): the buyer's order page at
``/o/{order id}`` and what it reads with the order's link, the buyer's page of
a waiting-room place at ``/q/{queue id}`` (its state, with the place's link),
the door scanner at ``/scan``, and their static assets. Not part of the OpenAPI: these are for
browsers; the REST routes they call are documented where they live.

The order page's routes take the order link from the Authorization header
(``fetch``) or from a cookie the page sets once (``POST /o/{id}/session``):
HttpOnly, SameSite=Strict, scoped to ``/o/<order id>`` and expiring with the
link, so that each ticket's download is a plain ``<a href>`` whose URL holds
no secret.
"""

from __future__ import annotations

import html
import time
from datetime import datetime
from typing import Annotated
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel
from ticketry.auth import QUEUE_SCOPE, Principal
from ticketry.ids import is_valid_id, order_of_ticket, ticket_id

from ticketry_api.adapters.readmodel import TicketOf, order_outcome, order_ticket_statuses, ticket_of
from ticketry_api.core.problem import Problem
from ticketry_api.deps import AppState, State
from ticketry_api.edge.order_links import (
    LINK_COOKIE,
    bearer_scheme,
    bearer_token,
    counted,
    link_holder,
    link_reader,
    page_reader,
)  # fmt: skip
from ticketry_api.edge.orders_read import order_of_buyer, progress_url
from ticketry_api.edge.pdf_answers import joined_pdf, pdf_answer
from ticketry_api.edge.wallet_answers import google_answer, pkpass_answer
from ticketry_api.waitingroom import rooms
from ticketry_api.waitingroom.places import QueuePlace, place_of
from ticketry_api.web.assets import SCAN_PAGE_CSP, SCAN_WORKER_CSP, Asset, load_assets, order_page_csp
from ticketry_api.web.pdfs import PART_SIZE

router = APIRouter(include_in_schema=False)
_ASSETS = load_assets()
Reader = Annotated[Principal, Depends(page_reader)]
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)]


def _page(name: str, csp: str, camera: bool, body: bytes | None = None) -> Response:
    asset = _ASSETS[name]
    return Response(
        asset.body if body is None else body, media_type=asset.media_type,
        headers={
            "Content-Security-Policy": csp,
            "Permissions-Policy": f"camera=({'self' if camera else ''}), microphone=(), geolocation=()",
        },
    )  # fmt: skip


@router.get("/assets/{name:path}")
async def asset(name: str) -> Response:
    found: Asset | None = _ASSETS.get(name)
    if found is None or name.endswith(".html"):
        raise Problem(404, "not found")
    return Response(found.body, media_type=found.media_type, headers={"Cache-Control": "public, max-age=300"})


@router.get("/scan")
async def scan_page() -> Response:
    return _page("scan.html", SCAN_PAGE_CSP, camera=True)


@router.get("/scan-sw.js")
async def scan_worker() -> Response:
    """The scanner's service worker, at the root so that its scope can be ``/scan``;
    never cached by HTTP, so a changed worker reaches every phone at its next start.
    Its policy lets it fetch (and keep) the page's own files, nothing else."""
    worker = _ASSETS["scan-sw.js"]
    headers = {"Cache-Control": "no-cache", "Content-Security-Policy": SCAN_WORKER_CSP}
    return Response(worker.body, media_type=worker.media_type, headers=headers)


@router.get("/o/{order_id}")
async def order_page(order_id: str, state: State) -> Response:
    # The page is the same for every order (no data in it): it reads its order with the link.
    if not is_valid_id(order_id, "or"):
        raise Problem(404, "order not found")
    return _page("order.html", order_page_csp(state.settings.notifier_public_url), camera=False)


@router.post("/o/{order_id}/session", status_code=204)
async def open_session(order_id: str, request: Request, state: State, creds: Credentials) -> Response:
    """Exchange the link (Authorization header only, never a cookie: no
    cross-site request can set one) for the page's cookie."""
    token = bearer_token(creds)
    who = link_reader(state, token, order_id)
    await order_of_buyer(order_id, who, state.store)
    secure = request.url.scheme == "https" or state.links.public_url().startswith("https:")
    resp = Response(status_code=204)
    resp.set_cookie(
        LINK_COOKIE, token or "", max_age=max(who.exp - int(time.time()), 0), path=f"/o/{order_id}",
        httponly=True, samesite="strict", secure=secure,
    )  # fmt: skip
    return resp


class TicketLine(BaseModel):
    id: str
    holder: str
    status: str


class OrderPage(BaseModel):
    """What the buyer's page shows of an order."""

    id: str
    status: str
    total: int
    rendered: int
    failed: int
    event_name: str
    venue: str
    starts_at: datetime
    timezone: str
    zone_abbr: str  # the venue zone's abbreviation at starts_at, as the ticket prints it (CEST)
    tier: str
    tier_name: str
    progress_url: str
    part_size: int
    tickets: list[TicketLine]
    # Which wallets each rendered ticket can go into (their links: the ticket's, below).
    wallet_apple: bool = False
    wallet_google: bool = False


@router.get("/o/{order_id}/state", response_model=OrderPage)
async def order_state(order_id: str, who: Reader, state: State) -> OrderPage:
    head = await order_of_buyer(order_id, who, state.store)
    order = await state.store.orders.with_holders(head.id)
    event = await state.store.event(head.event_id)
    if order is None or event is None:
        raise Problem(404, "order not found")
    status, rendered, failed = await order_outcome(state.redis, state.store, order)
    ids = [ticket_id(order.id, n) for n in range(order.quantity)]
    statuses = await order_ticket_statuses(state.store, order, ids, all_rendered=status == "completed")
    lines = [TicketLine(id=t, holder=order.holder_of(n), status=statuses.get(t, "queued")) for n, t in enumerate(ids)]
    tier = event.tier(order.tier)
    starts = event.starts_at.astimezone(ZoneInfo(event.timezone))
    return OrderPage(
        id=order.id, status=status, total=order.quantity, rendered=rendered, failed=failed,
        event_name=event.name, venue=event.venue, timezone=event.timezone,
        starts_at=starts, zone_abbr=starts.strftime("%Z"),
        tier=order.tier, tier_name=tier.name if tier is not None else order.tier,
        progress_url=progress_url(state.settings.notifier_public_url, order.id), part_size=PART_SIZE,
        tickets=lines, wallet_apple=state.wallet.apple is not None, wallet_google=state.wallet.google is not None,
    )  # fmt: skip


async def _ticket_of_order(order_id: str, ticket: str, who: Principal, state: AppState) -> TicketOf:
    """A ticket of the page's order (its link's holder is its buyer)."""
    where = order_of_ticket(ticket)
    if where is None or where[0] != order_id:
        raise Problem(404, "ticket not found")
    t = await ticket_of(state.store, ticket)
    if t is None or t.owner_id != who.sub:
        raise Problem(404, "ticket not found")
    return t


@router.get("/o/{order_id}/tickets/{ticket}.pdf")
async def ticket_pdf(order_id: str, ticket: str, who: Reader, state: State) -> Response:
    return await pdf_answer(state, await _ticket_of_order(order_id, ticket, who, state))


@router.get("/o/{order_id}/tickets/{ticket}.pkpass")
async def ticket_pkpass(order_id: str, ticket: str, who: Reader, state: State) -> Response:
    return await pkpass_answer(state, await _ticket_of_order(order_id, ticket, who, state))


# The page links here rather than to Google: the link is signed (~3 ms) when
# the buyer follows it, not for every ticket each time the page refreshes.
@router.get("/o/{order_id}/tickets/{ticket}/google-wallet")
async def ticket_google_wallet(order_id: str, ticket: str, who: Reader, state: State) -> Response:
    url = await google_answer(state, await _ticket_of_order(order_id, ticket, who, state))
    return RedirectResponse(url, status_code=303, headers={"Cache-Control": "private, no-store"})


@router.get("/o/{order_id}/tickets.pdf")
async def all_tickets_pdf(order_id: str, who: Reader, state: State, part: int = 0) -> Response:
    if not 0 <= part <= 1000:
        raise Problem(404, "no such part")
    return await joined_pdf(state, await order_of_buyer(order_id, who, state.store), part)


@router.get("/q/{queue_id}")
async def queue_page(queue_id: str, state: State) -> Response:
    # The same page for every place: it reads its place with the place's link.
    if not is_valid_id(queue_id, "qu"):
        raise Problem(404, "place not found")
    # The shops it may link back to: the page shows no other return address.
    origins = html.escape(" ".join(state.settings.shop_origins)).encode()
    body = _ASSETS["queue.html"].body.replace(
        SHOP_ORIGINS_SLOT, SHOP_ORIGINS_SLOT.replace(b'""', b'"' + origins + b'"')
    )
    return _page("queue.html", order_page_csp(state.settings.notifier_public_url), camera=False, body=body)


SHOP_ORIGINS_SLOT = b'<meta name="ticketry-shop-origins" content="">'


class PlacePage(BaseModel):
    """What the buyer's page of a waiting-room place shows (its permission is
    for the shop, which asks for it with the buyer's own token)."""

    place: QueuePlace
    event_name: str
    venue: str
    starts_at: datetime
    timezone: str
    zone_abbr: str
    on_sale_at: datetime | None


@router.get("/q/{queue_id}/state", response_model=PlacePage)
async def queue_state(queue_id: str, state: State, creds: Credentials) -> PlacePage:
    """The place, read with its link (Authorization header)."""
    who = await counted(state, link_holder(state, bearer_token(creds), QUEUE_SCOPE + queue_id))
    held = await rooms.place_holder(state.redis, queue_id) if is_valid_id(queue_id, "qu") else None
    event = await state.store.event(held[0]) if held is not None and held[1] == who.sub else None
    if event is None:
        raise Problem(404, "place not found")
    place = await place_of(state.redis, state.settings, state.links, event, who.sub)
    zone = ZoneInfo(event.timezone)
    starts = event.starts_at.astimezone(zone)
    return PlacePage(
        place=place.model_copy(update={"permission": None}), event_name=event.name, venue=event.venue,
        starts_at=starts, timezone=event.timezone, zone_abbr=starts.strftime("%Z"),
        on_sale_at=event.on_sale_at.astimezone(zone) if event.on_sale_at is not None else None,
    )  # fmt: skip
