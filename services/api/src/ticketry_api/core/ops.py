"""The operator's console's arithmetic: rates from two samples of growing
counters, and whether a render group is behind its drain target. Plain data."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

WINDOW_S = 15 * 60  # the console's span: its throughput chart and its first-ticket latency


@dataclass(frozen=True)
class Sample:
    """Counters that only grow while the stack runs, read at ``at`` (monotonic seconds)."""

    at: float
    counters: Mapping[str, int]


def rates(prev: Sample | None, cur: Sample, *, new_from_zero: bool = False) -> dict[str, float]:
    """Each counter's rate per second between two samples; a counter that went
    down (a renderer restarted, so its count started over) counts as 0, not
    as a negative rate. No earlier sample, or no time between: all 0. A counter
    missing from ``prev`` counts as 0 there with ``new_from_zero`` (a renderer
    that joined since: all it rendered was rendered since), else as unchanged."""
    dt = cur.at - prev.at if prev is not None else 0.0
    if prev is None or dt <= 0:
        return dict.fromkeys(cur.counters, 0.0)
    return {
        k: round(max(v - prev.counters.get(k, 0 if new_from_zero else v), 0) / dt, 2) for k, v in cur.counters.items()
    }


def recent_rates(history: Sequence[Sample], cur: Sample, window_s: float) -> dict[str, float]:
    """Each counter's rate over about the last ``window_s``: against the newest
    of ``history`` (oldest first) at least ``window_s`` before ``cur``, else
    against its oldest (a feed younger than the window); all 0 with none. A
    counter that the base sample lacks (a renderer that joined since) counts
    all it has as done within the window."""
    base = history[0] if history else None
    for sample in history:
        if cur.at - sample.at < window_s:
            break
        base = sample
    return rates(base, cur, new_from_zero=True)


def history(samples: Sequence[Sample]) -> list[dict[str, float]]:
    """The rates between each two consecutive samples (oldest first), each at
    the later one's time: ``[{"at": …, counter: per second, …}]``."""
    return [{"at": cur.at, **rates(prev, cur)} for prev, cur in itertools.pairwise(samples)]


def drain_s(backlog: int, capacity: float) -> float:
    """Seconds to drain ``backlog`` at ``capacity`` tickets/s (inf: a backlog and no capacity)."""
    if backlog <= 0:
        return 0.0
    return backlog / capacity if capacity > 0 else math.inf


def behind(backlog: int, capacity: float, target_s: float) -> bool:
    """A group is behind when its backlog would take longer than ``target_s`` to drain."""
    return drain_s(backlog, capacity) > target_s


# An order's status as the console counts it, and its rank: an order only moves
# up (processing → an outcome → cancelled), so folding one entry twice, or an
# older entry after a newer one, changes nothing.
ORDER_STATUSES = ("processing", "completed", "partially_failed", "failed", "cancelled")


def order_status(event_type: str, total: int, rendered: int, failed: int) -> tuple[str, int] | None:
    """``(status, rank)`` that a ticket event tells of its order (its counters
    after it); None for an event that tells nothing (a re-issue's)."""
    if event_type == "order.cancelled":
        return "cancelled", 2
    if event_type not in ("order.completed", "ticket.rendered", "ticket.failed"):
        return None
    if total <= 0 or rendered + failed < total:
        return "processing", 0
    if failed == 0:
        return "completed", 1
    return ("failed", 1) if rendered == 0 else ("partially_failed", 1)


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(max(math.ceil(q * len(ordered)) - 1, 0), len(ordered) - 1)]
