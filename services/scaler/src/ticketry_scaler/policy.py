"""How many renderers the backlog needs: pure functions, no I/O, time passed in.

Inputs per render lane come from ``XINFO GROUPS`` for group ``renderers``
(https://redis.io/docs/latest/commands/xinfo-groups/):

* ``lag`` — entries not yet delivered to any consumer. Redis reports it as NULL when
  it cannot compute it cheaply (entries deleted with XDEL after the group's
  position, or a group created at an arbitrary id). Then we use, in order:
  ``undelivered`` (the observer counted the entries after ``last-delivered-id``
  with a capped XRANGE), or as a last resort ``length - pending`` (XLEN minus the
  PEL). The last one over-estimates by the acknowledged entries not yet trimmed;
  erring high means scaling up early, which is bounded by the max and undone by
  the down-window, whereas erring low would leave a backlog undrained.
* ``pending`` — delivered but not acknowledged: in-flight renders and entries of
  dead consumers that will be reclaimed (XAUTOCLAIM). Both still need rendering,
  so the work is ``lag + pending``.

The replica count is the one that drains the work within the target time at the
measured per-renderer rate: ``ceil(work / (rate * target_drain_s))``, at least one
while there is work, clamped to ``[min, max]``. The rate is the mean of the
renderers' heartbeat rates, each an EWMA of tickets per *busy* second (capacity,
kept while idle; see ``ticketry_renderer.rate``). Renderers that have not measured
yet report 0 and are left out (they would make every renderer look slow); until
one has, ``default_rate`` stands in.

Stabilisation follows the Kubernetes HPA ``behavior`` algorithm: every tick's
recommendation is kept; scaling up goes to the *lowest* recommendation of the
up-window (0 s: at once) and scaling down only to the *highest* of the down-window,
so a momentary dip never removes a renderer. A cooldown after any change also holds
scale-downs while new renderers warm up and start reporting their rate.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

# Below this a heartbeat's rate says "idle", not "slow".
PRODUCING_RATE: float = 0.05


@dataclass(frozen=True, slots=True)
class LaneBacklog:
    """One render lane as seen through ``XINFO GROUPS`` (and XLEN)."""

    stream: str
    lag: int | None
    pending: int
    undelivered: int | None = None
    length: int = 0


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    minimum: int
    maximum: int
    target_drain_s: float
    default_rate: float
    up_window_s: float = 0.0
    down_window_s: float = 60.0
    cooldown_s: float = 15.0


@dataclass(frozen=True, slots=True)
class Recommendation:
    """The raw (unstabilised, bounded) replica count and the inputs behind it."""

    replicas: int
    lag: int
    pending: int
    rate: float
    rate_measured: bool
    drain_s: float
    reason: str


@dataclass(frozen=True, slots=True)
class Decision:
    """What to run now, and why."""

    replicas: int
    current: int
    reason: str

    @property
    def changed(self) -> bool:
        return self.replicas != self.current


def lane_lag(lane: LaneBacklog) -> int:
    """Undelivered entries of one lane, with the NULL-lag fallbacks described above."""
    if lane.lag is not None:
        return max(0, lane.lag)
    if lane.undelivered is not None:
        return max(0, lane.undelivered)
    return max(0, lane.length - lane.pending)


def per_renderer_rate(rates: tuple[float, ...] | list[float], default_rate: float) -> tuple[float, bool]:
    """Mean rate of the renderers that are producing; ``(default_rate, False)`` if none."""
    producing = [r for r in rates if math.isfinite(r) and r >= PRODUCING_RATE]
    if not producing:
        return default_rate, False
    return sum(producing) / len(producing), True


def desired_replicas(lag: int, pending: int, rate: float, *, target_drain_s: float, minimum: int, maximum: int) -> int:
    """Renderers needed to drain ``lag + pending`` within ``target_drain_s`` at ``rate`` each."""
    needed = _needed(max(0, lag) + max(0, pending), rate, target_drain_s)
    return min(max(needed, minimum), maximum)


def _needed(work: int, rate: float, target_drain_s: float) -> int:
    """Unbounded: at least one renderer while there is any work."""
    if work <= 0:
        return 0
    return max(1, math.ceil(work / (max(rate, 1e-9) * target_drain_s)))


def drain_estimate_s(work: int, replicas: int, rate: float) -> float:
    """Seconds the current replicas need for ``work``; ``inf`` when nothing runs."""
    if work <= 0:
        return 0.0
    if replicas <= 0 or rate <= 0:
        return math.inf
    return work / (replicas * rate)


def recommend(
    lanes: list[LaneBacklog] | tuple[LaneBacklog, ...],
    rates: list[float] | tuple[float, ...],
    current: int,
    cfg: PolicyConfig,
) -> Recommendation:
    """Sum the lanes and compute the bounded replica count."""
    lag = sum(lane_lag(lane) for lane in lanes)
    pending = sum(max(0, lane.pending) for lane in lanes)
    rate, measured = per_renderer_rate(tuple(rates), cfg.default_rate)
    replicas = desired_replicas(
        lag,
        pending,
        rate,
        target_drain_s=cfg.target_drain_s,
        minimum=cfg.minimum,
        maximum=cfg.maximum,
    )
    work = lag + pending
    unbounded = _needed(work, rate, cfg.target_drain_s)
    source = "measured" if measured else "default"
    reason = (
        f"backlog {work} (lag {lag} + pending {pending}) at {rate:.2f}/s per renderer "
        f"({source}) needs {unbounded} to drain in {cfg.target_drain_s:g}s"
    )
    if unbounded > cfg.maximum:
        reason += f"; capped at max {cfg.maximum}"
    elif unbounded < cfg.minimum:
        reason += f"; floor min {cfg.minimum}"
    return Recommendation(
        replicas=replicas,
        lag=lag,
        pending=pending,
        rate=rate,
        rate_measured=measured,
        drain_s=drain_estimate_s(work, current, rate),
        reason=reason,
    )


@dataclass
class Stabiliser:
    """HPA-style stabilisation over the recent recommendations (time is passed in)."""

    up_window_s: float
    down_window_s: float
    cooldown_s: float
    _history: deque[tuple[float, int]] = field(default_factory=deque)
    _last_change_at: float | None = None

    @classmethod
    def from_config(cls, cfg: PolicyConfig) -> Stabiliser:
        return cls(cfg.up_window_s, cfg.down_window_s, cfg.cooldown_s)

    def observe(self, now: float, recommended: int) -> None:
        """Remember one tick's recommendation (standbys do this too, to stay warm)."""
        self._history.append((now, recommended))
        keep = max(self.up_window_s, self.down_window_s)
        while self._history and now - self._history[0][0] > keep:
            self._history.popleft()

    def decide(self, now: float, current: int) -> tuple[int, str]:
        """The replica count to run now given the remembered recommendations."""
        if not self._history:
            return current, "no recommendation yet"
        latest = self._history[-1][1]
        up = min((r for t, r in self._history if now - t <= self.up_window_s), default=latest)
        down = max((r for t, r in self._history if now - t <= self.down_window_s), default=latest)
        target, why = current, "steady"
        if target < up:
            target = up
            why = "scale-up"
            if up < latest:
                why += f" (lowest in the {self.up_window_s:g}s up-window)"
        elif target > down:
            since = None if self._last_change_at is None else now - self._last_change_at
            if since is not None and since < self.cooldown_s:
                held = f"scale-down to {down} held: cooldown {since:.0f}/{self.cooldown_s:g}s"
                return current, held
            target = down
            why = "scale-down"
            if down > latest:
                why += f" (highest in the {self.down_window_s:g}s down-window)"
        elif latest < current:
            why = f"scale-down held by the {self.down_window_s:g}s down-window (highest {down})"
        return target, why

    def changed(self, now: float) -> None:
        """Mark that the replica count was changed at ``now`` (starts the cooldown)."""
        self._last_change_at = now


def decide(stabiliser: Stabiliser, now: float, rec: Recommendation, current: int) -> Decision:
    """Observe ``rec`` and stabilise it against ``current`` in one step."""
    stabiliser.observe(now, rec.replicas)
    replicas, why = stabiliser.decide(now, current)
    if replicas != current:
        stabiliser.changed(now)
    return Decision(replicas=replicas, current=current, reason=f"{why}: {rec.reason}")
