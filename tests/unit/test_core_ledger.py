"""The capacity ledger's pure rules (ticketry_api.core.ledger): finding
the head by lookups of single entries, and which waiting changes an entry
takes. Plain data, no server."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from ticketry_api.core.ledger import Head, batches, find_head, fit


class Ledger:
    """Entries 1..n of a gap-free ledger, and the seqs looked up."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.asked: list[int] = []

    def at(self, seq: int) -> Head:
        return Head(seq, seq * 2, {"std": seq * 2})

    async def entry_at(self, seq: int) -> Head | None:
        self.asked.append(seq)
        return self.at(seq) if 1 <= seq <= self.n else None


def most_lookups(n: int) -> int:
    """Doubling to the first miss past n, then bisecting: 2·log2(n) and change."""
    return 2 * math.ceil(math.log2(n + 1)) + 1


async def test_an_empty_ledger_has_the_empty_head_after_one_lookup() -> None:
    ledger = Ledger(0)
    assert await find_head(ledger.entry_at) == Head()
    assert ledger.asked == [1]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 4096, 100_000])
async def test_the_head_is_found_from_nothing_in_logarithmic_lookups(n: int) -> None:
    ledger = Ledger(n)
    assert await find_head(ledger.entry_at) == ledger.at(n)
    assert len(ledger.asked) <= most_lookups(n)
    assert len(set(ledger.asked)) == len(ledger.asked)  # no entry is read twice


@pytest.mark.parametrize("n", [1, 2, 5, 16, 33])
async def test_the_head_is_found_from_any_known_entry(n: int) -> None:
    for known in range(0, n + 1):
        ledger = Ledger(n)
        start = ledger.at(known) if known else Head()
        assert await find_head(ledger.entry_at, start) == ledger.at(n), known


async def test_a_known_head_is_confirmed_by_one_miss() -> None:
    ledger = Ledger(40)
    assert await find_head(ledger.entry_at, ledger.at(40)) == ledger.at(40)
    assert ledger.asked == [41]


async def test_a_big_gap_after_the_hint_costs_logarithmic_lookups_of_the_gap() -> None:
    # Another process appended 100,000 entries since this one wrote entry 3.
    ledger = Ledger(100_003)
    assert await find_head(ledger.entry_at, ledger.at(3)) == ledger.at(100_003)
    assert len(ledger.asked) <= most_lookups(100_000)
    assert min(ledger.asked) > 3  # nothing behind the hint is read


async def test_the_head_is_the_entry_read_not_the_hint() -> None:
    # The hint's counts are stale when it is not the head; the answer is what the store says.
    ledger = Ledger(6)
    stale = Head(2, 999, {"vip": 7})
    got = await find_head(ledger.entry_at, stale)
    assert got == Head(6, 12, {"std": 12})


@dataclass(frozen=True)
class W:
    name: str
    tier: str
    delta: int


def names(ws: list[W]) -> list[str]:
    return [w.name for w in ws]


def test_nothing_waiting_makes_no_entry() -> None:
    assert batches([]) == []


def test_releases_go_first_each_alone_then_every_reservation_together_in_order() -> None:
    waiting = [W("r1", "std", 2), W("x1", "std", -1), W("r2", "vip", 1), W("x2", "vip", -3), W("r3", "std", 4)]
    assert [names(b) for b in batches(waiting)] == [["x1"], ["x2"], ["r1", "r2", "r3"]]


def test_only_reservations_make_one_entry_and_only_releases_one_each() -> None:
    assert [names(b) for b in batches([W("a", "std", 1), W("b", "std", 2)])] == [["a", "b"]]
    assert [names(b) for b in batches([W("a", "std", -1), W("b", "std", -2)])] == [["a"], ["b"]]


def test_reservations_fit_in_arrival_order_and_a_later_smaller_one_still_fits() -> None:
    head = Head(4, 6, {"std": 6})
    got = fit([W("a", "std", 2), W("b", "std", 3), W("c", "std", 1), W("d", "std", 1)], head, 10, {}, check=True)
    assert names(got.taken) == ["a", "c", "d"]  # b (3) would make 11
    assert (got.sold, got.tier_sold) == (10, {"std": 10})


def test_a_reservation_may_take_exactly_the_last_ticket_and_never_one_more() -> None:
    head = Head(1, 9, {"std": 9})
    assert names(fit([W("a", "std", 1)], head, 10, {}, check=True).taken) == ["a"]
    assert fit([W("a", "std", 2)], head, 10, {}, check=True).taken == []


def test_a_tier_cap_binds_its_tier_only() -> None:
    head = Head(3, 5, {"vip": 4, "std": 1})
    got = fit([W("v", "vip", 2), W("s", "std", 2), W("v1", "vip", 1)], head, 100, {"vip": 5, "std": 50}, check=True)
    assert names(got.taken) == ["s", "v1"]
    assert (got.sold, got.tier_sold) == (8, {"vip": 5, "std": 3})


def test_a_tier_without_a_cap_is_bound_by_the_event_only() -> None:
    got = fit([W("a", "new", 7), W("b", "new", 4)], Head(), 10, {"std": 1, "new": None}, check=True)
    assert names(got.taken) == ["a"] and got.tier_sold == {"new": 7}


def test_a_sold_out_event_takes_nothing_and_keeps_its_counts() -> None:
    head = Head(9, 10, {"std": 10})
    got = fit([W("a", "std", 1), W("b", "std", 1)], head, 10, {"std": 10}, check=True)
    assert (got.taken, got.sold, got.tier_sold) == ([], 10, {"std": 10})


def test_a_release_is_always_taken_and_a_tier_never_counts_below_zero() -> None:
    head = Head(2, 3, {"std": 1, "vip": 2})
    got = fit([W("x", "std", -3)], head, 3, {"std": 1}, check=False)
    assert names(got.taken) == ["x"]
    assert (got.sold, got.tier_sold) == (0, {"std": 0, "vip": 2})


def test_fitting_leaves_the_head_as_it_was() -> None:
    head = Head(1, 1, {"std": 1})
    fit([W("a", "std", 3)], head, 10, {}, check=True)
    assert head == Head(1, 1, {"std": 1})
