"""Holder names: an order's names must print on its tickets, and checking
them is the most CPU an order can ask for, so it is bounded (how many
distinct names, how long). What prints is the fonts' to say: the checks take
the two questions they ask as functions."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from ticketry_api.core.problem import Problem

# Up to this many distinct names (most orders have one) are checked on the
# event loop: a few shapes cost less than the hop to a thread.
NAMES_INLINE = 8


@dataclass(frozen=True, slots=True)
class NameLimits:
    """The bounds of an order's name check (``ApiSettings.max_distinct_names``,
    ``name_check_budget_s``)."""

    max_distinct: int
    budget_s: float


def check_count(names: Collection[str], limits: NameLimits) -> None:
    """422 past ``limits.max_distinct`` distinct names."""
    if len(names) > limits.max_distinct:
        raise Problem(
            422,
            "too many names",
            f"at most {limits.max_distinct} distinct holder names per order (the same name may be on any number of "
            f"tickets); this order has {len(names)}",
        )


def busy(count: int, limits: NameLimits) -> Problem:
    """The answer when ``count`` names could not be checked within the budget:
    the names may be fine, the process is busy."""
    return Problem(
        503,
        "busy",
        f"the order's {count} holder names could not be checked within {limits.budget_s:g} s; retry",
        {"Retry-After": str(max(1, math.ceil(limits.budget_s)))},
    )


def check_names(
    names: Collection[str],
    undrawable: Callable[[str], str | None],
    fits: Callable[[str], bool],
    deadline: float = math.inf,
) -> bool:
    """422 for a name the ticket cannot print: ``undrawable`` names why (a
    character no font draws: never boxes), or it does not ``fit`` its line
    even at the smallest size (never wrapped). False, having stopped, once
    ``time.monotonic()`` passes ``deadline``; True when every name prints.

    Every name's characters are looked up first (cheap), then each is shaped
    and measured (the costly part)."""
    for name in names:
        if time.monotonic() > deadline:
            return False
        if (why := undrawable(name)) is not None:
            raise Problem(422, "name cannot be printed", why)
    for name in names:
        if time.monotonic() > deadline:
            return False
        if not fits(name):
            raise Problem(422, "name too long", f"{name[:40]!r}… does not fit on one line of the ticket")
    return True
