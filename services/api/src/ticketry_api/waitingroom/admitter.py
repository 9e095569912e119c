"""The admission loop, in every api process: each tick it reports this
process's measured order rate (for whichever api admits), and for each open
room whose lock it holds (one admitter per room, any api) it measures, sets the
rate (:func:`ticketry_api.core.waitingroom.admission_rate`) and admits the next buyers with signed
permissions (:func:`rooms.admit`, compare-and-set).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from redis.asyncio import Redis
from ticketry.documents import Event
from ticketry.tasks import pause

from ticketry_api.adapters.replicas import ReplicaSettings, replicated
from ticketry_api.core import waitingroom
from ticketry_api.core.problem import Problem
from ticketry_api.middleware.shedding import Shedding
from ticketry_api.store import Store
from ticketry_api.waitingroom import rooms

log = logging.getLogger(__name__)


@dataclass
class _Room:
    """What the admitter remembers of a room between its ticks."""

    last_at: float = 0.0
    last_used: int = -1
    used_per_s: float = 0.0


@dataclass
class Admitter:
    redis: Redis
    store: Store
    shedding: Shedding
    consumer: str
    key: bytes  # waitingroom.permission_key
    tick_s: float = 1.0
    permission_ttl_s: float = 120.0
    replicas: ReplicaSettings | None = None  # None: admissions are not waited for
    limits: waitingroom.RateLimits = field(default_factory=waitingroom.RateLimits)
    rooms: dict[str, _Room] = field(default_factory=dict)
    _last_shed: int = 0
    _last_at: float = 0.0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.tick()
            except Exception:
                log.exception("waiting room: admission tick failed; will retry")
            await pause(stop, self.tick_s)

    async def tick(self) -> None:
        now = time.monotonic()
        now_ms = int(time.time() * 1000)
        dt = now - self._last_at if self._last_at else self.tick_s
        shed_per_s = (self.shedding.shed - self._last_shed) / max(dt, 1e-3)
        self._last_shed, self._last_at = self.shedding.shed, now
        await rooms.report_capacity(self.redis, self.consumer, self.shedding.meter.rate(now), shed_per_s, now_ms)
        for event_id in await rooms.rooms(self.redis):
            if await rooms.hold_lock(self.redis, event_id, self.consumer):
                await self.tick_room(event_id, now, now_ms)
            else:
                self.rooms.pop(event_id, None)  # another api admits; start afresh if it comes back

    async def tick_room(self, event_id: str, now: float, now_ms: int) -> None:
        event = await self.store.event(event_id)
        if event is None or not event.waiting_room:
            await rooms.stop_ticking(self.redis, event_id)
            return
        on_sale_ms = on_sale_ms_of(event)
        if now_ms < on_sale_ms:
            return  # the draw is not final yet; the script checks Redis's clock too
        room = self.rooms.setdefault(event_id, _Room())
        st = await rooms.read_state(self.redis, event_id, now_ms)
        if st.pending:
            # The last tick's permissions wait for a replica: announce them first;
            # the next tick admits from there (the script refuses until then).
            await self._announce(event_id)
            return
        if st.closed:  # for good (the script refuses too)
            await rooms.stop_ticking(self.redis, event_id)
            self.rooms.pop(event_id, None)
            return
        if st.paused:
            # Nobody is admitted while paused (the script refuses too), and the
            # pause is not time to admit for: the first tick after a resume
            # admits one tick's worth, not the whole pause's.
            room.last_at, room.last_used = now, st.used
            return
        dt = now - room.last_at if room.last_at else self.tick_s
        if room.last_used >= 0:
            room.used_per_s = max(st.used - room.last_used, 0) / max(dt, 1e-3)
        else:  # this admitter's first tick (a new room, or taken over): assume buyers keep pace
            room.used_per_s = st.rate
        room.last_used, room.last_at = st.used, now
        cap, shed = await rooms.api_capacity(self.redis, now_ms, fresh_ms=int(3000 * max(self.tick_s, 1.0)))
        signals = waitingroom.Signals(
            capacity_per_s=cap or self.shedding.meter.rate(now), used_per_s=room.used_per_s, shed_per_s=shed,
            outstanding=st.outstanding,
        )  # fmt: skip
        # A room's first tick starts from what the api sustains (measured), then adjusts.
        rate = waitingroom.admission_rate(st.rate or signals.capacity_per_s, signals, self.limits)
        left = tickets_left(event, (await self.store.ledger.sold(event.id)).sold)
        n, carry = waitingroom.to_admit(
            rate, dt, st.carry, waiting=st.waiting, tickets_left=left, outstanding=st.outstanding
        )
        sold_out = left <= 0
        expires_ms = now_ms + int(self.permission_ttl_s * 1000)
        nxt = await rooms.next_in_line(self.redis, event_id, st.admitted, n)
        permits = [(b, waitingroom.sign_permission(self.key, event_id, b, q, expires_ms), expires_ms) for b, q in nxt]
        got = await rooms.admit(
            self.redis, event_id, expected=st.admitted, on_sale_ms=on_sale_ms, rate=rate, carry=carry,
            sold_out=sold_out, permits=permits,
        )  # fmt: skip
        if got < 0:
            log.info("waiting room: admission raced (%s); next tick", got, extra={"event_id": event_id})
            return
        announced = await self._announce(event_id) if permits else True
        if announced and (st.waiting - len(permits) <= 0 or sold_out) and st.outstanding == 0:
            # Everybody in line has been admitted (or told it is sold out), and
            # no permission is out: nothing to tick until somebody joins again.
            await rooms.stop_ticking(self.redis, event_id)
            self.rooms.pop(event_id, None)

    async def _announce(self, event_id: str) -> bool:
        """Publish the room's pending permissions once a replica holds them
        (False: not yet; the next tick tries again). A permission published
        before would be one a failover can take back: the buyer would hold a
        permission the new primary never issued, refused at the order."""
        if self.replicas is not None:
            try:
                await replicated(self.redis, self.replicas)
            except Problem as exc:
                log.warning(
                    "waiting room: admissions not on a replica yet: %s", exc.detail, extra={"event_id": event_id}
                )
                return False
        await rooms.announce(self.redis, event_id)
        return True


def on_sale_ms_of(event: Event) -> int:
    """When the event's sale starts (ms); its creation for an event without ``on_sale_at``."""
    at = event.on_sale_at or event.created_at
    return int(at.timestamp() * 1000)


def tickets_left(event: Event, sold: int) -> int:
    return max(event.capacity - sold, 0)
