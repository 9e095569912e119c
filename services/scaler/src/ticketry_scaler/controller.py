"""One scaler tick: observe → recommend → (leader only) stabilise, record, apply.

While there is no work the loop waits for the first render request (``XREAD
BLOCK`` on the lanes, at most one interval) rather than a whole interval, so a
burst is answered the moment it is accepted, not up to a second later.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from redis.asyncio import Redis
from redis.exceptions import RedisError
from ticketry import streams
from ticketry.tasks import pause

from ticketry_scaler import metrics, observe
from ticketry_scaler.backends import Backend, BackendError, BackendStatus
from ticketry_scaler.leader import Leader
from ticketry_scaler.policy import (
    Decision,
    LaneBacklog,
    PolicyConfig,
    Recommendation,
    Stabiliser,
    ThroughputMeter,
    decide,
    finished,
    lane_lag,
    recommend,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything one tick saw (returned for tests and the bench)."""

    leading: bool
    status: BackendStatus
    live: int
    recommendation: Recommendation
    decision: Decision | None


class Controller:
    def __init__(
        self,
        redis: Redis,
        backend: Backend,
        leader: Leader,
        cfg: PolicyConfig,
        *,
        standby_replicas: int | None = None,
        lag_scan_cap: int = 10_000,
        meter: ThroughputMeter | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """``standby_replicas``: what a non-leader runs (the local floor); None: leave it.
        ``meter``: measures the aggregate rate for the throughput policy's rules
        (None: the drain policy)."""
        self._redis = redis
        self._backend = backend
        self._leader = leader
        self._cfg = cfg
        self._standby = standby_replicas
        self._scan_cap = lag_scan_cap
        self._clock, self._wall = clock, wall
        self._stabiliser = Stabiliser.from_config(cfg)
        self._meter = meter
        # After a tick that saw no work: where each lane's group stood (see run).
        self._idle_at: dict[str, str] | None = None

    async def tick(self) -> Observation | None:
        """One round; ``None`` when Redis or the backend could not be read (state held)."""
        self._idle_at = None  # a failed tick waits a whole interval
        try:
            leading = await self._leader.tick()
            lanes = await observe.backlogs(self._redis, scan_cap=self._scan_cap)
            beats = await observe.heartbeats(self._redis)
        except RedisError as exc:
            log.warning("redis unavailable; holding", extra={"error": repr(exc)})
            return None
        try:
            status = await self._backend.status()
        except BackendError as exc:
            log.warning("backend unavailable; holding", extra={"error": str(exc)})
            return None
        now = self._clock()
        throughput = None
        lag = sum(lane_lag(lane) for lane in lanes)
        if self._meter is not None:
            self._meter.observe(now, finished(lanes), len(beats), waiting=lag > 0)
            throughput = replace(self._meter.view(), cores=status.cpu_cap, cores_full=status.cores_full)
        rec = recommend(lanes, [b.rate for b in beats], status.running, self._cfg, throughput)
        idle = rec.lag + rec.pending == 0 and all(lane.last_delivered for lane in lanes)
        self._idle_at = {lane.stream: lane.last_delivered or "$" for lane in lanes} if idle else None
        self._export(lanes, rec, status, len(beats), leading)
        if not leading:
            self._stabiliser.observe(now, rec.replicas)
            metrics.DESIRED.set(status.target)
            if self._standby is not None and status.target != self._standby:
                log.info("standby: back to the floor", extra={"replicas": self._standby})
                await self._apply(self._standby)
            return Observation(False, status, len(beats), rec, None)
        decision = decide(self._stabiliser, now, rec, status.target)
        metrics.DESIRED.set(decision.replicas)
        if decision.changed and await self._record(decision, rec, status, len(beats)):
            await self._apply(decision.replicas)
        return Observation(True, status, len(beats), rec, decision)

    async def run(self, stop: asyncio.Event, interval_s: float) -> None:
        """Tick until ``stop`` is set. The loop itself never dies."""
        # Renew well inside the lock's TTL whatever the interval.
        period = min(interval_s, streams.LEADER_TTL_S / 3)
        while not stop.is_set():
            try:
                await self.tick()
            except Exception:
                log.exception("scaler tick failed")
            if self._idle_at:
                await self._work_or(stop, self._idle_at, period)
            else:
                await pause(stop, period)

    async def _work_or(self, stop: asyncio.Event, after: dict[str, str], seconds: float) -> None:
        """Until a render request newer than ``after`` (each lane's last delivered
        entry when the tick saw no work, so none appended since is missed) is in
        a lane, at most ``seconds`` (https://redis.io/docs/latest/commands/xread/)."""
        try:
            await self._redis.xread(after, count=1, block=max(1, int(seconds * 1000)))  # type: ignore[arg-type]
        except RedisError:
            await pause(stop, seconds)

    async def _record(self, decision: Decision, rec: Recommendation, status: BackendStatus, live: int) -> bool:
        fields = {
            "reason": decision.reason,
            "lag": rec.lag,
            "pending": rec.pending,
            "rate": round(rec.rate, 3),
            "running": status.running,
            "live": live,
            "from": decision.current,
            "to": decision.replicas,
            "recommended": rec.replicas,
            "drain_s": "inf" if math.isinf(rec.drain_s) else round(rec.drain_s, 1),
            "backend": self._backend.name,
            "instance": self._leader.instance,
            "ts": round(self._wall(), 3),
        }
        try:
            entry = await self._leader.record(streams.SCALER_DECISIONS, fields, maxlen=streams.SCALER_DECISIONS_MAXLEN)
        except RedisError as exc:
            log.warning("could not record decision; not applying", extra={"error": repr(exc)})
            return False
        if entry is None:
            log.warning("lost leadership before recording; not applying")
            return False
        direction = "up" if decision.replicas > decision.current else "down"
        metrics.DECISIONS.labels(direction).inc()
        log.info("scaling decision", extra={"decision_id": entry, **fields})
        return True

    async def _apply(self, replicas: int) -> None:
        try:
            await self._backend.scale(replicas)
        except BackendError as exc:
            log.error("backend refused the replica count", extra={"error": str(exc)})

    def _export(
        self,
        lanes: list[LaneBacklog],
        rec: Recommendation,
        status: BackendStatus,
        live: int,
        leading: bool,
    ) -> None:
        for lane in lanes:
            metrics.LAG.labels(lane.stream).set(lane_lag(lane))
            metrics.PENDING.labels(lane.stream).set(lane.pending)
        metrics.RATE.set(rec.rate)
        metrics.DRAIN.set(rec.drain_s)
        metrics.TARGET.set(status.target)
        metrics.RUNNING.set(status.running)
        metrics.LIVE.set(live)
        metrics.LEADER.set(1 if leading else 0)
