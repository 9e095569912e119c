"""The rules of a re-issue to another holder: which ticket may be re-issued,
its next version, and what a scan of a code it replaced answers
(``ticketry_api.service_layer.reissue`` does the I/O)."""

from __future__ import annotations

from ticketry_api.core.problem import Problem


def next_version(*, cancelled: bool, checked_in: bool, version: int, max_reissues: int) -> int:
    """The version a re-issue of a ticket at ``version`` makes; 409 on a
    cancelled order, after the ticket was checked in, or past ``max_reissues``."""
    if cancelled:
        raise Problem(409, "cancelled", "the ticket's order was cancelled", kind="cancelled")
    if checked_in:
        raise Problem(409, "checked in", "a ticket checked in can no longer be re-issued", kind="checked-in")
    if version >= max_reissues:
        raise Problem(
            409, "too many re-issues", f"a ticket can be re-issued at most {max_reissues} times", kind="reissue-limit"
        )
    return version + 1


def lost_race() -> Problem:
    return Problem(409, "re-issued meanwhile", "another re-issue of this ticket came first; read it and retry")


def check_current(code_version: int, ticket_version: int, ticket_id: str) -> None:
    """409 ``revoked`` for a genuine code that a re-issue of its ticket replaced.
    (A version past the ticket's own is never signed: the caller answers it as unknown.)"""
    if code_version < ticket_version:
        raise Problem(
            409, "revoked", "this code was replaced when the ticket was re-issued", kind="revoked",
            extra={"ticket_id": ticket_id},
        )  # fmt: skip
