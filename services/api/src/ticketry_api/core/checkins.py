"""The rules of a scan at a door, as answers: which outcome an answer is,
the refusals (one answer for every code that is no ticket), whether a
ticket belongs on a list, and how long a nonce's answer is kept
(``ticketry_api.service_layer.checkins`` judges a scan through the store)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from ticketry_api.core.problem import Problem

Outcome = Literal["admitted", "already", "wrong_list", "unknown", "exited", "not_inside", "revoked"]
Direction = Literal["entry", "exit"]

# How often, and after how long, another upload of a nonce looks for the first one's answer.
NONCE_WAITS = 100
NONCE_STALE_S = 30.0


@dataclass(frozen=True)
class ScanResult:
    """A scan's answer: HTTP status, body, and its outcome for metrics."""

    status: int
    body: dict[str, Any]
    outcome: Outcome


def unknown_code(detail: str = "") -> Problem:
    # One answer for forged, tampered, unknown-key, unknown-ticket and revoked
    # codes: nothing that tells a guesser which part was wrong.
    return Problem(404, "unknown code", detail, kind="unknown-code")


def refused(p: Problem) -> ScanResult:
    """A refused scan's answer, with its outcome."""
    outcome: Outcome = "wrong_list" if p.type.endswith("/wrong-list") else "unknown"
    if p.type.endswith("/not-inside"):
        outcome = "not_inside"
    elif p.type.endswith("/revoked"):
        outcome = "revoked"
    elif p.status == 409 and outcome != "wrong_list":
        outcome = "already"
    return ScanResult(p.status, p.body(), outcome)


def binds(code_event: str | None, code_tier: str | None, event_id: str, tier: str) -> bool:
    """A genuine bound code names its ticket's own event and tier (an unbound
    one, ``code_event`` None, binds nothing)."""
    return code_event is None or (code_event, code_tier) == (event_id, tier)


def check_list(list_event: str, admits: bool, list_name: str, ticket_id: str, event_id: str, tier: str) -> None:
    """409 ``wrong-list`` for a ticket of another event, or of a tier the list does not ``admit``."""
    if event_id != list_event or not admits:
        raise Problem(
            409, "wrong list", f"this ticket ({tier}) does not admit on {list_name!r}", kind="wrong-list",
            extra={"ticket_id": ticket_id, "event_id": event_id, "tier": tier},
        )  # fmt: skip


def already_checked_in(at: datetime, ticket_id: str, holder_name: str, tier: str) -> Problem:
    return Problem(
        409, "already checked in", f"checked in at {at.isoformat()}", kind="already-checked-in",
        extra={"ticket_id": ticket_id, "checked_in_at": at.isoformat(), "holder_name": holder_name, "tier": tier},
    )  # fmt: skip


def may_move(last: int, direction: Direction) -> bool:
    """Whether a ticket whose ``last`` move on a re-entry list was number
    ``last`` (0: never admitted; odd: an entry, so inside; even: an exit) may
    go ``direction``: in while outside, out while inside."""
    return (last % 2 == 1) == (direction == "exit")


def passage_id(admission_id: str, n: int) -> str:
    """Move ``n`` of an admission (``<list>/<ticket>``): zero-padded, so the
    ``_id``s of one ticket's moves sort in move order."""
    return f"{admission_id}/{n:09d}"


def inside_now(admitted: int, entries: int, exits: int) -> int:
    """Who is inside: each ticket's moves alternate from its first entry (its
    admission), so each ticket counts entries minus exits, 1 inside, 0 out."""
    return admitted + entries - exits


def no_exits(list_name: str) -> Problem:
    return Problem(
        409, "no exits on this list", f"{list_name!r} does not allow re-entry, so it records no exits",
        kind="no-reentry",
    )  # fmt: skip


def already_inside(ticket_id: str, holder_name: str, tier: str) -> Problem:
    return Problem(
        409, "already inside", "this ticket's last scan on this list was an entry", kind="already",
        extra={"ticket_id": ticket_id, "holder_name": holder_name, "tier": tier},
    )  # fmt: skip


def not_inside(ticket_id: str, holder_name: str, tier: str) -> Problem:
    return Problem(
        409, "not inside", "this ticket never entered on this list, or has already left", kind="not-inside",
        extra={"ticket_id": ticket_id, "holder_name": holder_name, "tier": tier},
    )  # fmt: skip


def nonce_key(sub: str, nonce: str) -> str:
    """A nonce is its scanner's own: the same nonce from two tokens are two scans."""
    return f"{sub}\x1f{nonce}"


def still_judged() -> Problem:
    return Problem(409, "scan in progress", "this scan's first upload is still being judged; retry")


def nonces_expired_before(now: datetime, ttl_s: float) -> datetime:
    """The moment before which a nonce's answer is past its lifetime: a
    re-upload after it is judged afresh (the ticket still admits only once, so
    the worst is ``already`` where the first answer was ``admitted``)."""
    return now - timedelta(seconds=ttl_s)
