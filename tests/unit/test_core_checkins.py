"""The rules of a scan and of a cancel in the api's core
(``ticketry_api.core.checkins``, ``ticketry_api.core.cancel``): plain values, no server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from ticketry_api.core.cancel import check_cancel_won
from ticketry_api.core.checkins import (
    already_checked_in,
    binds,
    check_list,
    nonce_key,
    nonces_expired_before,
    refused,
    still_judged,
    unknown_code,
)
from ticketry_api.core.problem import Problem

EV, OTHER = "ev_" + "1" * 20, "ev_" + "2" * 20


def test_a_bound_code_must_name_its_tickets_own_event_and_tier() -> None:
    assert binds(EV, "vip", EV, "vip")
    assert binds(None, None, EV, "vip")  # a code from before binding binds nothing
    assert not binds(EV, "standard", EV, "vip")
    assert not binds(OTHER, "vip", EV, "vip")


def test_a_ticket_of_another_event_or_tier_is_the_wrong_list() -> None:
    check_list(EV, True, "Main door", "tk_1", EV, "vip")
    for event, admits in ((OTHER, True), (EV, False)):
        with pytest.raises(Problem) as got:
            check_list(EV, admits, "Main door", "tk_1", event, "vip")
        assert got.value.status == 409 and got.value.type.endswith("/wrong-list")
        assert got.value.extra == {"ticket_id": "tk_1", "event_id": event, "tier": "vip"}


def test_each_refusal_is_counted_under_its_outcome() -> None:
    at = datetime(2027, 6, 1, 20, 0, tzinfo=UTC)
    wrong = Problem(409, "wrong list", kind="wrong-list")
    assert refused(wrong).outcome == "wrong_list"
    assert refused(already_checked_in(at, "tk_1", "Ada", "vip")).outcome == "already"
    assert refused(still_judged()).outcome == "already"
    assert refused(unknown_code()).outcome == "unknown"
    got = refused(already_checked_in(at, "tk_1", "Ada", "vip"))
    assert (got.status, got.body["checked_in_at"], got.body["holder_name"]) == (409, at.isoformat(), "Ada")


def test_a_nonce_is_its_scanners_own_and_expires() -> None:
    assert nonce_key("staff-1", "n1") != nonce_key("staff-2", "n1")
    now = datetime(2027, 6, 1, tzinfo=UTC)
    assert nonces_expired_before(now, 3600) == now - timedelta(hours=1)


def test_a_cancel_loses_to_an_admitted_ticket() -> None:
    check_cancel_won("cancelled")
    with pytest.raises(Problem) as got:
        check_cancel_won("used")
    assert (got.value.status, got.value.title) == (409, "already used")
