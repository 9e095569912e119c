"""The operator's console's arithmetic: rates from two samples of growing
counters, and whether a render group is behind its drain target. Plain data."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    """Counters that only grow while the stack runs, read at ``at`` (monotonic seconds)."""

    at: float
    counters: Mapping[str, int]


def rates(prev: Sample | None, cur: Sample) -> dict[str, float]:
    """Each counter's rate per second between two samples; a counter that went
    down (a renderer restarted, so its count started over) counts as 0, not
    as a negative rate. No earlier sample, or no time between: all 0."""
    dt = cur.at - prev.at if prev is not None else 0.0
    if prev is None or dt <= 0:
        return dict.fromkeys(cur.counters, 0.0)
    return {k: round(max(v - prev.counters.get(k, v), 0) / dt, 2) for k, v in cur.counters.items()}


def drain_s(backlog: int, capacity: float) -> float:
    """Seconds to drain ``backlog`` at ``capacity`` tickets/s (inf: a backlog and no capacity)."""
    if backlog <= 0:
        return 0.0
    return backlog / capacity if capacity > 0 else math.inf


def behind(backlog: int, capacity: float, target_s: float) -> bool:
    """A group is behind when its backlog would take longer than ``target_s`` to drain."""
    return drain_s(backlog, capacity) > target_s
