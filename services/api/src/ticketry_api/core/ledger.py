"""The pure rules of an event's capacity ledger (``capacity`` does the I/O).

Entries are gap-free (seq n+1 is written only by one who read n), so the head
is found by ``_id`` alone: double the step until a miss, then bisect
(:func:`find_head`, 2·log2(n) lookups). Which waiting changes go into the next
entry is :func:`batches` and :func:`fit`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar


@dataclass(frozen=True)
class Head:
    """The newest ledger entry: its ``seq``, tickets sold, and sold per tier."""

    seq: int = 0
    sold: int = 0
    tier_sold: dict[str, int] = field(default_factory=dict)


class Change(Protocol):
    """A reservation (``delta`` > 0) or a release (< 0) of a tier's tickets."""

    @property
    def tier(self) -> str: ...
    @property
    def delta(self) -> int: ...


C = TypeVar("C", bound=Change)


async def find_head(entry_at: Callable[[int], Awaitable[Head | None]], known: Head | None = None) -> Head:
    """The newest entry (``Head()`` for none), looking forward from ``known``
    (an entry that exists, or the empty start). ``entry_at(seq)`` is the entry
    ``seq``, None when there is none."""
    lo, step = known or Head(), 1
    while (got := await entry_at(lo.seq + step)) is not None:
        lo, step = got, step * 2
    hi = lo.seq + step  # missing
    while hi - lo.seq > 1:
        mid = (lo.seq + hi) // 2
        if (got := await entry_at(mid)) is None:
            hi = mid
        else:
            lo = got
    return lo


def batches(waiting: Sequence[C]) -> list[list[C]]:
    """The entries that what waits goes into, in order: each release alone,
    first (they make room), then all reservations in one."""
    out = [[c] for c in waiting if c.delta < 0]
    if reserves := [c for c in waiting if c.delta > 0]:
        out.append(reserves)
    return out


@dataclass(frozen=True)
class Fit(Generic[C]):
    """What one entry takes: the changes, and the counts after it."""

    taken: list[C]
    sold: int
    tier_sold: dict[str, int]


def fit(changes: Sequence[C], head: Head, capacity: int, tier_caps: Mapping[str, int | None], *, check: bool) -> Fit[C]:
    """The changes that fit after ``head``, in order (a reservation that does
    not fit is skipped, a later smaller one may still fit). ``check`` False
    (releases) takes all. A tier without a cap (absent or None) is bound by ``capacity`` only;
    a tier's count never goes below 0."""
    taken: list[C] = []
    after, tier_after = head.sold, dict(head.tier_sold)
    for c in changes:
        in_tier = tier_after.get(c.tier, 0) + c.delta
        cap = tier_caps.get(c.tier)
        if not check or (after + c.delta <= capacity and (cap is None or in_tier <= cap)):
            taken.append(c)
            after += c.delta
            tier_after[c.tier] = max(in_tier, 0)
    return Fit(taken, after, tier_after)
