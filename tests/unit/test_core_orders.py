"""The order rules of the api's core (``ticketry_api.core``): prices, name
checks and the refusals of placing an order, on plain values, no server."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal

import pytest
from ticketry_api.core import orders as rules
from ticketry_api.core.names import NameLimits, busy, check_count, check_names
from ticketry_api.core.pricing import minor_to_decimal, unit_price_of
from ticketry_api.core.problem import PROBLEM_BASE, Problem


@dataclass
class Tier:
    price_minor: int


@dataclass
class Event:
    price_minor: int
    tiers: dict[str, Tier] = field(default_factory=dict)

    def tier(self, tier_id: str, /) -> Tier | None:
        return self.tiers.get(tier_id)


@dataclass
class Sale:
    unit_price_minor: int | None
    tier: str


def test_minor_units_show_as_two_decimals() -> None:
    assert minor_to_decimal(3900) == Decimal("39.00")
    assert str(minor_to_decimal(5)) == "0.05"


@pytest.mark.parametrize(
    ("sale", "price", "why"),
    [
        (Sale(12000, "vip"), "120.00", "the price the order recorded"),
        (Sale(None, "vip"), "99.00", "an order from before unit prices: its tier's"),
        (Sale(None, "gone"), "39.00", "no such tier any more: the event's"),
    ],
)
def test_an_order_is_priced_at_what_it_was_sold_for(sale: Sale, price: str, why: str) -> None:
    event = Event(3900, {"vip": Tier(9900)})
    assert unit_price_of(sale, event) == Decimal(price), why


def test_names_are_checked_for_drawing_before_any_is_measured() -> None:
    measured: list[str] = []

    def fits(name: str) -> bool:
        measured.append(name)
        return True

    with pytest.raises(Problem) as got:
        check_names(["Ada", "Runes ᚠ"], lambda n: "no font draws ᚠ" if "ᚠ" in n else None, fits)
    assert (got.value.status, got.value.title, got.value.detail) == (422, "name cannot be printed", "no font draws ᚠ")
    assert measured == []


def test_a_name_too_long_for_its_line_is_refused() -> None:
    with pytest.raises(Problem) as got:
        check_names(["Ada", "W" * 80], lambda _: None, lambda n: len(n) < 50)
    assert (got.value.status, got.value.title) == (422, "name too long")


def test_a_check_past_its_deadline_stops_and_says_so() -> None:
    assert check_names(["Ada"], lambda _: None, lambda _: True, deadline=-math.inf) is False
    assert check_names(["Ada"], lambda _: None, lambda _: True) is True


def test_the_name_bounds_answer_422_and_503() -> None:
    limits = NameLimits(max_distinct=2, budget_s=1.5)
    check_count({"a", "b"}, limits)
    with pytest.raises(Problem) as got:
        check_count({"a", "b", "c"}, limits)
    assert got.value.status == 422 and "this order has 3" in got.value.detail
    assert (busy(3, limits).status, busy(3, limits).headers) == (503, {"Retry-After": "2"})


def test_a_request_hash_ignores_key_order_only() -> None:
    a = rules.request_hash({"event_id": "ev_1", "quantity": 2})
    assert a == rules.request_hash({"quantity": 2, "event_id": "ev_1"})
    assert a != rules.request_hash({"event_id": "ev_1", "quantity": 3})


def test_quantity_and_limit_per_buyer() -> None:
    rules.check_quantity(10, 10)
    with pytest.raises(Problem) as got:
        rules.check_quantity(11, 10)
    assert got.value.status == 422
    rules.check_per_buyer(4, 4, "vip")
    rules.check_per_buyer(400, None, "standard")
    with pytest.raises(Problem) as got:
        rules.check_per_buyer(5, 4, "vip")
    assert (got.value.status, got.value.title) == (409, "limit per buyer")


def test_a_replay_answers_only_the_callers_own_order_for_the_same_body() -> None:
    rules.check_replay("buyer-1", "h1", "buyer-1", "h1")
    rules.check_replay("buyer-1", "h1", None, "h1")  # a race the caller's own request lost
    with pytest.raises(Problem) as other:
        rules.check_replay("buyer-1", "h1", "buyer-2", "h1")
    with pytest.raises(Problem) as body:
        rules.check_replay("buyer-1", "h1", "buyer-1", "h2")
    assert (other.value.status, body.value.status) == (409, 422)


def test_a_problem_names_its_kind_in_its_type() -> None:
    assert Problem(404, "unknown code", kind="unknown-code").body()["type"] == PROBLEM_BASE + "unknown-code"
    assert Problem(409, "sold out").body() == {"type": "about:blank", "status": 409, "title": "sold out", "detail": ""}
    assert rules.still_in_progress().headers == {"Retry-After": "1"}
    assert "'vip'" in rules.sold_out("vip").detail
