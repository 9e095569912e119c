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

On the local backend (``TICKETRY_SCALER_POLICY=throughput``, the default there)
two rules use the measured *aggregate* throughput, the tickets all renderers
finish per second (``XINFO GROUPS`` ``entries-read`` minus ``pending``, summed over
the lanes; :class:`ThroughputMeter`):

* **burst**: while the backlog would last longer than ``burst_s`` at the current
  pace, as many renderers as the backend has cores (its CPU cap) at once; past
  that one more at a time, each only once the renderers live have been measured
  in this burst (the last one added too) and while they leave CPU unused
  (``BackendStatus.cores_full``): a short burst on idle cores is worth
  renderers even when the drain target is met;
* **spare**: ``spare`` renderers above ``minimum`` stay live (within the CPU
  cap and the plateau), so a burst starts on renderers that are warm instead of
  waiting for a fork, its imports and its designs while the cores are busiest;
* **plateau** (:func:`plateau`): the renderer count past which the last one added
  did not raise the aggregate rate by ``min_gain`` is a ceiling for every rule,
  until its measurement ages out (``keep_s``) and a later burst may probe again.

With the Kubernetes backend (``drain``, its default) neither applies: pods on
other nodes add capacity, and the lag-based drain target keeps deciding.

Stabilisation follows the Kubernetes HPA ``behavior`` algorithm: every tick's
recommendation is kept; scaling up goes to the *lowest* recommendation of the
up-window (0 s: at once) and scaling down only to the *highest* of the down-window,
so a momentary dip never removes a renderer. A cooldown after any change also holds
scale-downs while new renderers warm up and start reporting their rate.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise

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
    entries_read: int | None = None  # XINFO GROUPS "entries-read" (None: Redis could not tell)
    last_delivered: str | None = None  # XINFO GROUPS "last-delivered-id"


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    minimum: int
    maximum: int
    target_drain_s: float
    default_rate: float
    up_window_s: float = 0.0
    down_window_s: float = 60.0
    cooldown_s: float = 15.0
    # The throughput rules (burst and plateau); see the module docstring.
    burst_s: float = 2.0
    min_gain: float = 0.25
    # Renderers kept live above ``minimum``, within the CPU cap (throughput policy only).
    spare: int = 0


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
    # Plateau (throughput policy only), at least min: never more than this many (see decide).
    ceiling: int | None = None


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
    throughput: Throughput | None = None,
) -> Recommendation:
    """Sum the lanes and compute the bounded replica count; with ``throughput``
    (the throughput policy) also the burst and plateau rules."""
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
    ceiling = None
    if throughput is not None:
        replicas, ceiling, why = _throughput_rules(work, rate, replicas, throughput, cfg)
        reason += why
        ceiling = None if ceiling is None else max(ceiling, cfg.minimum)
    return Recommendation(
        replicas=replicas,
        lag=lag,
        pending=pending,
        rate=rate,
        rate_measured=measured,
        drain_s=drain_estimate_s(work, current, rate),
        reason=reason,
        ceiling=ceiling,
    )


# -- throughput: burst and plateau (local backend) ------------------------------------


@dataclass(frozen=True, slots=True)
class Throughput:
    """What the burst and plateau rules see (:meth:`ThroughputMeter.view`)."""

    live: int  # renderers with a heartbeat
    pace: float | None  # aggregate tickets/s with ``live`` renderers in this burst; None: not measured yet
    rates: Mapping[int, float]  # recently measured aggregate tickets/s by renderers live
    ready: bool  # the last renderer added has been measured (or none was added in this burst)
    cores: int = 0  # the backend's CPU cap (0: none): up to it the cores are there to fill
    cores_full: bool = False  # the renderers get the backend's cores: another would only compete


def finished(lanes: list[LaneBacklog] | tuple[LaneBacklog, ...]) -> int | None:
    """Entries the group has finished with (delivered, no longer pending), summed
    over the lanes; None when Redis could not say for a lane."""
    total = 0
    for lane in lanes:
        if lane.entries_read is None:
            return None
        total += max(0, lane.entries_read - max(0, lane.pending))
    return total


def plateau(rates: Mapping[int, float], min_gain: float) -> int | None:
    """The renderer count past which adding renderers did not pay: the first
    measured step from ``lo`` to ``hi`` renderers that raised the aggregate rate
    by less than ``min_gain`` of what ``hi - lo`` average renderers of ``lo``
    brought makes ``hi - 1`` the ceiling. None without such evidence.

    Relative to the average renderer, so a step from 8 to 9 (+12 % at best) is
    judged as fairly as one from 1 to 2 (+100 % at best)."""
    counts = sorted(n for n, r in rates.items() if n > 0 and math.isfinite(r))
    for lo, hi in pairwise(counts):
        expected = rates[lo] / lo * (hi - lo)
        if rates[hi] - rates[lo] < min_gain * expected:
            return hi - 1
    return None


def warm_floor(cfg: PolicyConfig, cores: int) -> int:
    """Renderers the throughput policy keeps live while idle: min and its spares,
    within max and ``cores`` (the CPU cap; 0: none). A plateau may bound it lower."""
    return min(cfg.minimum + cfg.spare, cfg.maximum, cores or cfg.maximum)


def _throughput_rules(
    work: int, per_renderer: float, replicas: int, tp: Throughput, cfg: PolicyConfig
) -> tuple[int, int | None, str]:
    """``replicas`` after the burst rule and the plateau ceiling; the ceiling; why."""
    why = ""
    ceiling = plateau(tp.rates, cfg.min_gain)
    pace = tp.pace if tp.pace else max(tp.live, 1) * per_renderer
    lasts = work / max(pace, 1e-9)
    if work > 0 and lasts > cfg.burst_s:
        # While it lasts: one more when the last one added has been measured,
        # else hold the live ones (the drain rule may ask for fewer meanwhile).
        burst = f"; burst: {lasts:.1f}s of work at {pace:.0f}/s with {tp.live} live"
        want = tp.live
        if tp.live < tp.cores and (ceiling is None or tp.live < ceiling):
            want = min(tp.cores, cfg.maximum, ceiling or tp.cores)
            burst += f": free cores, {want} at once"
        elif ceiling is not None and tp.live >= ceiling:
            burst += ", none added past the plateau"
        elif not tp.ready:
            burst += ", the last one added not measured yet"
        elif tp.cores and tp.pace is None:
            # Past the cores only on evidence from this burst: its first tick
            # still sees the idle minute's CPU (a burst on warm spares).
            burst += ", the cores' count not measured yet"
        elif tp.cores_full:
            burst += ", the cores are full"
        elif tp.live < cfg.maximum:
            want = tp.live + 1
            burst += f": one more ({want})"
        want = min(want, cfg.maximum)
        if want > replicas:
            replicas = want
        why += burst
    warm = warm_floor(cfg, tp.cores)
    if replicas < warm:
        replicas = warm
        why += f"; {cfg.spare} spare above min: {warm} live"
    if ceiling is not None:
        bound = max(ceiling, cfg.minimum)
        shown = ", ".join(f"{n}: {r:.0f}/s" for n, r in sorted(tp.rates.items()))
        why += f"; plateau at {ceiling} ({shown})"
        if replicas > bound:
            replicas = bound
            why += f": at most {bound}"
    return replicas, ceiling, why


@dataclass(frozen=True, slots=True)
class Stretch:
    """Consecutive ticks with the same live renderers and work always waiting."""

    renderers: int
    start: float
    start_finished: int
    end: float
    end_finished: int

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def rate(self) -> float:
        """Aggregate tickets per second over the stretch."""
        return (self.end_finished - self.start_finished) / self.seconds if self.seconds > 0 else 0.0


@dataclass
class ThroughputMeter:
    """Aggregate throughput by number of live renderers (time passed in).

    A rate is measured over a *stretch*: ticks in a row with the same number of
    live renderers and undelivered work at each (the renderers never ran dry),
    starting ``settle_s`` after the count changed (a new renderer first loads its
    designs) and counting once it spans ``window_s``. The latest measured
    stretch of each count is kept for ``keep_s``. A burst starts at the first
    tick with work waiting; ``ready`` says whether the renderer added last in it
    has been measured (or none was added yet)."""

    window_s: float = 3.0
    settle_s: float = 1.0
    keep_s: float = 120.0
    _live: int | None = None
    _changed_at: float = -math.inf
    _current: Stretch | None = None
    _measured: dict[int, Stretch] = field(default_factory=dict)
    _burst_floor: int | None = None

    def observe(self, now: float, finished: int | None, live: int, waiting: bool) -> None:
        """One tick: entries finished so far (:func:`finished`), live renderers,
        and whether undelivered entries were waiting."""
        for n in [n for n, s in self._measured.items() if now - s.end > self.keep_s]:
            del self._measured[n]
        if live != self._live:
            self._current = None
            self._changed_at = now if self._live is not None else -math.inf
            self._live = live
        if not waiting:
            self._current, self._burst_floor = None, None
            return
        if self._burst_floor is None:
            self._burst_floor = live
        if finished is None:
            self._current = None
            return
        cur = self._current
        if cur is None or finished < cur.end_finished:  # a counter went back: start afresh
            if now - self._changed_at >= self.settle_s:
                self._current = Stretch(live, now, finished, now, finished)
            return
        cur = self._current = Stretch(cur.renderers, cur.start, cur.start_finished, now, finished)
        if cur.seconds >= self.window_s:
            self._measured[live] = cur

    def view(self) -> Throughput:
        live = self._live or 0
        cur = self._current
        measured_now = cur is not None and cur.seconds >= self.window_s
        ready = self._burst_floor is not None and (live <= self._burst_floor or measured_now)
        return Throughput(
            live=live,
            pace=cur.rate if cur is not None and measured_now else None,
            rates={n: s.rate for n, s in self._measured.items()},
            ready=ready,
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
    """Observe ``rec`` and stabilise it against ``current`` in one step; a plateau
    ceiling bounds the result whatever the down-window remembers (renderers
    that did not raise the rate are not kept for it)."""
    stabiliser.observe(now, rec.replicas)
    replicas, why = stabiliser.decide(now, current)
    if rec.ceiling is not None and replicas > rec.ceiling:
        replicas = rec.ceiling
        why = "scale-down (plateau)" if replicas < current else why
    if replicas != current:
        stabiliser.changed(now)
    return Decision(replicas=replicas, current=current, reason=f"{why}: {rec.reason}")
