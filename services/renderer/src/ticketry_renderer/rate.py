"""The render rate a renderer publishes in its heartbeat: pure, counters passed in.

The scaler sizes the fleet as ``backlog / (rate * target drain time)``, so the
rate it needs is a renderer's *capacity*: tickets per second of **busy** time (time
spent handling batches), not per second of wall-clock time. A renderer that was
idle most of the last minute still renders ~650 tickets/s while it works; a
wall-clock rate reported ~2/s for it, which made every backlog look like it needed
the maximum, and decayed to nothing between orders.

So the meter compares the cumulative counters (tickets rendered, busy seconds) at
two heartbeats: ``rate = Δrendered / Δbusy``, smoothed by an EWMA. While there is
too little busy time to measure (idle, or one tiny VIP batch), the counters keep
accumulating and the previous rate stands: an idle renderer still knows how fast
it is.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

# Weight of the newest measurement in the EWMA.
ALPHA: float = 0.3
# Less busy time than this since the last measurement measures timer noise and
# per-batch overhead, not a rate; wait for more.
MIN_BUSY_S: float = 0.05


@dataclass(frozen=True, slots=True)
class RateMeter:
    """Capacity rate plus the counters it was last measured at."""

    rate: float = 0.0  # tickets per busy second; 0 until first measured
    rendered: int = 0  # cumulative tickets rendered at the last measurement
    busy_s: float = 0.0  # cumulative busy seconds at the last measurement

    def update(self, rendered: int, busy_s: float) -> RateMeter:
        """The meter after a heartbeat that saw the cumulative ``rendered`` and ``busy_s``."""
        busy = busy_s - self.busy_s
        if busy < MIN_BUSY_S:
            return self
        inst = max(rendered - self.rendered, 0) / busy
        rate = inst if self.rate <= 0 else (1 - ALPHA) * self.rate + ALPHA * inst
        return RateMeter(rate=rate, rendered=rendered, busy_s=busy_s)


def utilisation(busy_s: float, wall_s: float) -> float:
    """Share of ``wall_s`` spent busy, in [0, 1] (0 for an empty interval)."""
    if wall_s <= 0:
        return 0.0
    return min(max(busy_s / wall_s, 0.0), 1.0)


@dataclass
class BusyClock:
    """Busy time: the union of the intervals in which any batch is being
    handled (the two lane subscribers and the claimer may interleave at
    their awaits, and overlapping batches count once)."""

    _busy_s: float = 0.0
    _active: int = 0
    _since: float = 0.0

    def seconds(self) -> float:
        """Cumulative busy seconds, including the batch in hand."""
        if self._active:
            return self._busy_s + time.monotonic() - self._since
        return self._busy_s

    @contextlib.contextmanager
    def handling(self) -> Iterator[None]:
        """Count the block as busy."""
        if self._active == 0:
            self._since = time.monotonic()
        self._active += 1
        try:
            yield
        finally:
            self._active -= 1
            if self._active == 0:
                self._busy_s += time.monotonic() - self._since
