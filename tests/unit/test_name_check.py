"""The bounds of an order's name check (orders.check_names_within): a cap on
distinct names, and a time budget past which the check stops and answers 503."""

from __future__ import annotations

import time

import pytest
from ticketry import fonts
from ticketry_api.core.names import NAMES_INLINE, NameLimits, check_names
from ticketry_api.core.problem import Problem
from ticketry_api.service_layer.orders import check_names_within

NAMES = {f"Holder {i:03d}" for i in range(100)}


def test_a_check_past_its_deadline_stops_before_the_next_name() -> None:
    assert check_names(NAMES, fonts.undrawable, fonts.fits, deadline=time.monotonic() - 1) is False
    assert check_names(NAMES, fonts.undrawable, fonts.fits) is True


def test_an_undrawable_name_is_found_before_any_is_shaped() -> None:
    with pytest.raises(Problem) as got:
        check_names({*NAMES, "Runes ᚠᚢᚦ", "W" * 120}, fonts.undrawable, fonts.fits)
    assert (got.value.status, got.value.title) == (422, "name cannot be printed")


async def test_more_distinct_names_than_the_cap_are_refused_unchecked() -> None:
    with pytest.raises(Problem) as got:
        await check_names_within({*NAMES, "Runes ᚠᚢᚦ"}, NameLimits(max_distinct=100, budget_s=60))
    assert (got.value.status, got.value.title) == (422, "too many names")
    assert "at most 100 distinct" in got.value.detail


async def test_names_not_checked_within_the_budget_are_answered_busy_with_retry_after() -> None:
    with pytest.raises(Problem) as got:
        await check_names_within(NAMES, NameLimits(max_distinct=1000, budget_s=1e-9))
    assert (got.value.status, got.value.title) == (503, "busy")
    assert got.value.headers == {"Retry-After": "1"}


async def test_few_names_are_checked_whatever_the_budget() -> None:
    # A handful are checked on the loop, at once: an honest order never waits for a checker.
    few = set(list(NAMES)[:NAMES_INLINE])
    await check_names_within(few, NameLimits(max_distinct=1000, budget_s=1e-9))
    # (checked, not waved through: one that cannot be printed among them is refused, not "busy")
    with pytest.raises(Problem) as got:
        await check_names_within({*list(few)[:-1], "Runes ᚠᚢᚦ"}, NameLimits(max_distinct=1000, budget_s=1e-9))
    assert (got.value.status, got.value.title) == (422, "name cannot be printed")
    await check_names_within(NAMES, NameLimits(max_distinct=1000, budget_s=60))
