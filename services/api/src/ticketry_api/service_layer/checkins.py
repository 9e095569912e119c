"""Checking tickets in at a door: lists, codes bound to their event, nonces.

A scan is judged in this order, each step refusing with its own answer:

1. the list exists (404) and the staff token may scan for its event (403);
2. the code is genuine (404 ``unknown``, one answer for forged, tampered,
   unknown-key and unknown-ticket codes);
3. the ticket is of the list's event and of a tier it admits (409
   ``wrong-list``; the ticket stays unused): a bound code says so itself, so
   an offline scanner judges it the same way;
4. the order's fate: the first admission of any of its tickets decides
   ``used``, and a cancelled order's tickets never admit (404, as unknown);
5. one admission per ticket and list, by a unique ``_id`` (409 ``already``,
   with the first ``checked_in_at``, the holder's name and the tier), however
   many scans race.

On a list that allows re-entry a scan is an ``entry`` or an ``exit``: after
the admission, each move is the next of the ticket's numbered
:class:`Passage` records, a unique insert, so of two racing scans one makes the
move and the other is judged against it (409 ``already`` inside, or
``not-inside``). An exit decides no fate: only an entry uses a ticket.

With a ``nonce`` the answer is kept under it: the same upload again (an
offline scanner retrying) gets the first answer, never a second check-in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from ticketry.auth import Principal
from ticketry.codes import InvalidCode, Keyring, Verified
from ticketry.documents import Admission, Checkin, CheckinAttempt, CheckinList, Passage, utcnow
from ticketry.ids import is_valid_id

from ticketry_api.adapters.readmodel import TicketOf, ticket_of
from ticketry_api.core.checkins import (
    NONCE_STALE_S,
    NONCE_WAITS,
    Direction,
    ScanResult,
    already_checked_in,
    already_inside,
    binds,
    check_list,
    may_move,
    no_exits,
    nonce_key,
    nonces_expired_before,
    not_inside,
    passage_id,
    refused,
    still_judged,
    unknown_code,
)
from ticketry_api.core.devices import scope_parts
from ticketry_api.core.problem import Problem
from ticketry_api.core.reissue import check_current
from ticketry_api.store import Store


async def list_for(store: Store, list_id: str, who: Principal) -> CheckinList:
    """The check-in list, if ``who`` may scan on it."""
    lst = await store.checkins.checkin_list(list_id) if is_valid_id(list_id, "cl") else None
    if lst is None:
        raise Problem(404, "unknown check-in list")
    event = await store.event(lst.event_id)
    # A list whose event is gone matches no organizer (an ``org`` token may not use it).
    if not who.may_scan_for(lst.event_id, event.organizer_id if event is not None else ""):
        raise Problem(403, "forbidden", "this token may not check in for this event")
    device = scope_parts(who.scope)
    if device is not None and device[1] != lst.id:
        raise Problem(403, "forbidden", "this scanner device scans on another list")
    return lst


def verify(keyring: Keyring, code: str) -> Verified:
    try:
        try:
            return keyring.verify_code(code)
        except InvalidCode:
            # Maybe signed by a key another process just rotated in (throttled reload).
            if not keyring.refresh():
                raise
            return keyring.verify_code(code)
    except InvalidCode:
        raise unknown_code() from None


async def scan(
    store: Store, keyring: Keyring, lst: CheckinList, code: str, who: Principal, direction: Direction = "entry"
) -> ScanResult:
    """Judge one scan on ``lst`` (see the module's steps)."""
    try:
        if direction == "exit" and not lst.allow_reentry:
            raise no_exits(lst.name)
        return await _admit(store, keyring, lst, code, who, direction)
    except Problem as p:
        return refused(p)


async def _admit(
    store: Store, keyring: Keyring, lst: CheckinList, code: str, who: Principal, direction: Direction
) -> ScanResult:
    async def attempt(ticket_id: str | None, result: Any) -> None:
        await store.checkins.attempt(
            CheckinAttempt(ticket_id=ticket_id, staff_id=who.sub, result=result, list_id=lst.id)
        )

    try:
        v = verify(keyring, code)
    except Problem:
        await attempt(None, "refused")
        raise
    ticket = await ticket_of(store, v.ticket_id)
    # A genuine bound code names its ticket's own event and tier; anything else is no ticket.
    # A version past the ticket's own was never signed for it: no ticket either.
    if ticket is None or not binds(v.event_id, v.tier, ticket.event_id, ticket.tier) or v.version > ticket.version:
        await attempt(v.ticket_id, "refused")
        raise unknown_code()
    try:
        check_current(v.version, ticket.version, ticket.id)
    except Problem:
        await attempt(ticket.id, "refused")
        raise
    try:
        check_list(lst.event_id, lst.admits(ticket.tier), lst.name, ticket.id, ticket.event_id, ticket.tier)
    except Problem:
        await attempt(ticket.id, "wrong_list")
        raise
    if direction == "exit":
        # An exit uses no ticket: it decides no fate, and only reads whether a cancel did.
        if ticket.cancelled or await store.fates.of(ticket.order_id) == "cancelled":
            await attempt(ticket.id, "refused")
            raise unknown_code()
        return await _pass(store, lst, ticket, who, "exit", attempt)
    if ticket.cancelled or await store.fates.decide(ticket.order_id, "used", who.sub) != "used":
        await attempt(ticket.id, "refused")
        raise unknown_code()
    now = utcnow()
    admission = Admission(id=f"{lst.id}/{ticket.id}", list_id=lst.id, ticket_id=ticket.id, staff_id=who.sub, at=now)
    if (at := await store.checkins.admit(admission)) is not None:
        if lst.allow_reentry:
            return await _pass(store, lst, ticket, who, "entry", attempt)
        await attempt(ticket.id, "already_checked_in")
        raise already_checked_in(at, ticket.id, ticket.holder_name, ticket.tier)
    # The ticket's first admission on any list makes it checked_in (a duplicate: not its first).
    first_any = Checkin(id=ticket.id, order_id=ticket.order_id, staff_id=who.sub, list_id=lst.id, at=now)
    await store.checkins.first_admission(first_any)
    await attempt(ticket.id, "accepted")
    return ScanResult(200, _passed(lst, ticket, now, "entry"), "admitted")


def _passed(lst: CheckinList, ticket: TicketOf, at: datetime, direction: Direction) -> dict[str, Any]:
    """A scan's 200 answer; a re-entry list's also says which way the ticket went."""
    body: dict[str, Any] = {
        "ticket_id": ticket.id, "event_id": ticket.event_id, "tier": ticket.tier,
        "holder_name": ticket.holder_name, "list_id": lst.id, "checked_in_at": at.isoformat(),
    }  # fmt: skip
    return {**body, "direction": direction} if lst.allow_reentry else body


async def _pass(
    store: Store, lst: CheckinList, ticket: TicketOf, who: Principal, direction: Direction,
    attempt: Callable[[str | None, Any], Awaitable[None]],
) -> ScanResult:  # fmt: skip
    """One move of an admitted ticket through a re-entry list's door: the
    next numbered :class:`Passage`, if ``direction`` is where it may go from
    its last move. A lost race (another scan made that move) is judged again
    against the move that won."""
    admission_id = f"{lst.id}/{ticket.id}"
    while may_move(last := await store.checkins.last_move(admission_id), direction):
        now = utcnow()
        n = last + 1
        passage = Passage(
            id=passage_id(admission_id, n), list_id=lst.id, ticket_id=ticket.id, n=n, direction=direction,
            staff_id=who.sub, at=now,
        )  # fmt: skip
        if await store.checkins.move(passage):
            await attempt(ticket.id, "accepted" if direction == "entry" else "exited")
            return ScanResult(
                200, _passed(lst, ticket, now, direction), "admitted" if direction == "entry" else "exited"
            )
    await attempt(ticket.id, "already_checked_in" if direction == "entry" else "refused")
    raise (already_inside if direction == "entry" else not_inside)(ticket.id, ticket.holder_name, ticket.tier)


async def scan_once(
    store: Store,
    keyring: Keyring,
    lst: CheckinList,
    code: str,
    who: Principal,
    nonce: str | None,
    direction: Direction = "entry",
) -> ScanResult:
    """:func:`scan`, answered once per ``nonce``: the first upload of a scan
    claims the nonce (a unique insert) and keeps its answer there; another
    upload of it gets that answer. A claim whose answer never came (its api
    died) is judged again after ``NONCE_STALE_S``: the ticket cannot admit
    twice on a list, so the worst is an ``already`` where ``admitted`` was due."""
    if nonce is None:
        return await scan(store, keyring, lst, code, who, direction)
    key = nonce_key(who.sub, nonce)
    if await store.checkins.claim_nonce(key):
        return await _answer(store, key, await scan(store, keyring, lst, code, who, direction))
    for _ in range(NONCE_WAITS):
        doc = await store.checkins.answer(key)
        if doc is not None and doc["status"]:
            return ScanResult(int(doc["status"]), dict(doc["body"]), doc.get("outcome", "already"))
        if doc is not None and (utcnow() - doc["at"]).total_seconds() > NONCE_STALE_S:
            return await _answer(store, key, await scan(store, keyring, lst, code, who, direction))
        await asyncio.sleep(0.05)
    raise still_judged()


async def _answer(store: Store, key: str, result: ScanResult) -> ScanResult:
    await store.checkins.keep_answer(key, result.status, result.body, result.outcome)
    return result


async def forget_old_nonces(store: Store, ttl_s: float, now: datetime | None = None) -> int:
    """One sweep: delete the nonces older than ``ttl_s``; how many."""
    return await store.checkins.forget_answers(nonces_expired_before(now or utcnow(), ttl_s))
