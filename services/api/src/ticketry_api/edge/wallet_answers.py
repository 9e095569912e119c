"""What a request for a ticket's wallet pass answers, once its caller was
checked (shared by the REST routes and the buyer's page): the ``.pkpass``,
the Save to Google Wallet link, and the ticket's ``wallet`` links. 503 where
that wallet is not configured, 409 before the ticket is rendered, 410 once
its order is cancelled, as its PDF."""

from __future__ import annotations

import asyncio
import time

from fastapi.responses import Response
from ticketry.documents import TicketStatus

from ticketry_api.adapters.readmodel import TicketOf, ticket_status
from ticketry_api.core import google_wallet
from ticketry_api.core.pkpass import MEDIA_TYPE
from ticketry_api.core.problem import Problem
from ticketry_api.core.wallet import WalletTicket
from ticketry_api.deps import AppState
from ticketry_api.http.schemas import WalletLinks
from ticketry_api.wallet import build_pass, kept_pass, wallet_ticket

SHOWN = ("rendered", "checked_in")  # a ticket's statuses whose wallet links are given


def _not_configured(which: str) -> Problem:
    return Problem(
        503, "wallet not configured", f"this service issues no {which} passes (TICKETRY_WALLET_* unset)",
        kind="wallet-not-configured",
    )  # fmt: skip


def _cancelled() -> Problem:
    return Problem(410, "cancelled", "the order was cancelled: its tickets are no longer served")


async def _rendered(state: AppState, t: TicketOf) -> WalletTicket:
    """``t`` as a wallet shows it, once its PDF is stored; else 409 (410 once cancelled)."""
    status = await ticket_status(state.store, t)
    if status == "cancelled":
        raise _cancelled()
    # The PDF stored is what "rendered" means here too (pdf_answers.live_ticket_status):
    # looked for while the read model has no outcome yet, or a failed one (re-driven since).
    if status not in SHOWN and (status == "failed" or not await state.pdf_store().exists(t.order_id, t.id)):
        raise Problem(409, "not rendered", "the ticket is not rendered yet: its pass follows its PDF")
    event = await state.store.event(t.event_id)
    if event is None:
        raise Problem(404, "ticket not found")
    return wallet_ticket(t, event, state.keyring)


async def pkpass_answer(state: AppState, t: TicketOf) -> Response:
    """The ticket's Apple Wallet pass: the one kept at its current version
    (the order's read already says owner, cancelled and version: one file read
    more), else built once its PDF is stored."""
    issuer = state.wallet.apple
    if issuer is None:
        raise _not_configured("Apple Wallet")
    if t.cancelled:
        raise _cancelled()
    pdfs = state.pdf_store()
    body = await kept_pass(pdfs, t)
    if body is None:
        body = await build_pass(pdfs, issuer, await _rendered(state, t), t.version)
    return Response(
        body, media_type=MEDIA_TYPE,
        headers={"Content-Disposition": f'attachment; filename="{t.id}.pkpass"', "Cache-Control": "private, no-store"},
    )  # fmt: skip


async def google_answer(state: AppState, t: TicketOf) -> str:
    """The ticket's Save to Google Wallet link."""
    issuer = state.wallet.google
    if issuer is None:
        raise _not_configured("Google Wallet")
    made = await _rendered(state, t)
    # An RSA signature (~3 ms): off the event loop.
    return await asyncio.to_thread(google_wallet.save_url, made, issuer, int(time.time()))


async def wallet_links(state: AppState, t: TicketOf, status: TicketStatus) -> WalletLinks | None:
    """The ticket's ``wallet`` in ``GET /v1/tickets/{id}``: None before it is
    rendered or where no wallet is configured."""
    wallet = state.wallet
    if status not in SHOWN or (wallet.apple is None and wallet.google is None):
        return None
    google = None
    if wallet.google is not None:
        event = await state.store.event(t.event_id)
        if event is None:
            return None
        try:
            made = wallet_ticket(t, event, state.keyring)
        except Problem:  # its key retired: the PDF and the pass kept so far still serve
            made = None
        if made is not None:
            google = await asyncio.to_thread(google_wallet.save_url, made, wallet.google, int(time.time()))
    return WalletLinks(apple=f"/v1/tickets/{t.id}/pkpass" if wallet.apple is not None else None, google=google)
