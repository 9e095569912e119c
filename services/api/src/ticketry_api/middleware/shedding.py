"""Backpressure on ``POST /v1/orders``: a bound on the orders in flight, a
short queue, and ``503`` with ``Retry-After`` at once past both.

An order uses one Redis connection at a time, so N orders at once want N
connections: opened on the api's one event loop (TCP connect, ``HELLO``/``CLIENT
SETINFO``, the driver's metadata) they cost the CPU the orders need, and past
the pool's bound the rest would fail. So:

* at most ``TICKETRY_MAX_INFLIGHT_ORDERS`` orders run at once (the pool never
  needs more connections than that, plus the background work's);
* a request past the bound waits in a FIFO queue only while its expected wait
  (its place in the queue over the measured rate) is within
  ``TICKETRY_ORDER_QUEUE_S``, and at most ``TICKETRY_MAX_QUEUED_ORDERS`` wait;
  one that still has no slot after 1.5 times that (the rate fell meanwhile)
  is shed then;
* every other request is answered ``503`` problem+json with ``Retry-After``
  (the time to drain what is ahead) before its body is even read.

A slot is only ever held by a request that has a valid bearer token and whose
body is whole: :class:`OrderGate` answers 401 (and an order that would be shed
anyway 503) before the body is read, ``bodies.BodyDeadline`` then reads the
body within its deadline, and only then :class:`OrderSlots` takes a slot.
A client that trickles its body therefore holds no slot, and the seconds it
takes do not count as the api's (the meter below sees only slot time).

The measured rate (:class:`CapacityMeter`) is also what the waiting room admits
buyers at (``waitingroom``): what the api *sustains*, learned from the seconds
in which orders were waiting, so a quiet api does not under-rate itself.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
from prometheus_client import Counter, Gauge
from redis.asyncio import Redis
from redis.driver_info import DriverInfo
from starlette.types import ASGIApp, Receive, Scope, Send
from ticketry.auth import AuthError, UnboundStaffError, bearer_of
from ticketry.db import connect_redis
from ticketry.redis_ha import RedisTarget

from ticketry_api.http.errors import PROBLEM

SHED = Counter("ticketry_orders_shed", "POST /v1/orders answered 503 at once: past the in-flight bound and queue")
# With several workers (TICKETRY_API_WORKERS) a scrape sums the live workers' gauges.
INFLIGHT = Gauge(
    "ticketry_orders_inflight", "POST /v1/orders being processed now (bounded)", multiprocess_mode="livesum"
)
QUEUED = Gauge("ticketry_orders_queued", "POST /v1/orders waiting for a slot", multiprocess_mode="livesum")
CAPACITY = Gauge(
    "ticketry_orders_capacity_per_s",
    "Orders per second the api processes sustain (measured)",
    multiprocess_mode="livesum",
)


@dataclass
class CapacityMeter:
    """Orders per second the process sustains, from 1-second buckets of
    completions. A second in which orders queued or were shed was *saturated*:
    its completions are the capacity (smoothed). An unsaturated second only
    shows that the capacity is at least that. Pure: time is passed in."""

    initial: float = 50.0
    alpha: float = 0.5  # weight of a new saturated second
    capacity: float = 0.0
    _second: int = -1
    _done: int = 0
    _saturated: bool = False
    history: collections.deque[tuple[int, bool]] = field(default_factory=lambda: collections.deque(maxlen=10))

    def __post_init__(self) -> None:
        self.capacity = self.capacity or self.initial

    def _roll(self, now: float) -> None:
        second = int(now)
        if second == self._second:
            return
        if self._second >= 0:
            self.history.append((self._done, self._saturated))
            if self._saturated:
                self.capacity = (1 - self.alpha) * self.capacity + self.alpha * self._done
            elif second == self._second + 1:  # a whole second was observed
                self.capacity = max(self.capacity, float(self._done))
        self._second, self._done, self._saturated = second, 0, False

    def completed(self, now: float) -> None:
        self._roll(now)
        self._done += 1

    def saturated(self, now: float) -> None:
        self._roll(now)
        self._saturated = True

    def rate(self, now: float) -> float:
        """The capacity estimate (orders/s), never below 1."""
        self._roll(now)
        return max(1.0, self.capacity)


class Shed(Exception):
    """No slot: answer 503 with ``Retry-After`` = ``retry_after_s``."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__("busy")
        self.retry_after_s = retry_after_s


class Shedding:
    """The in-flight bound and its queue (one per api process)."""

    def __init__(
        self,
        max_inflight: int,
        *,
        max_queued: int,
        queue_s: float,
        initial_rate: float = 50.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_inflight = max_inflight
        self.max_queued = max_queued
        self.queue_s = queue_s
        self.clock = clock
        self.meter = CapacityMeter(initial=initial_rate)
        self.inflight = 0
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.shed = 0
        self.accepted = 0

    def _past_bounds(self, now: float) -> bool:
        """Whether a new arrival now would wait past the queue's bounds."""
        place = len(self.waiters) + 1
        return place > self.max_queued or place / self.meter.rate(now) > self.queue_s

    def refuse_now(self) -> int | None:
        """``Retry-After`` for an order arriving now that :meth:`enter` would
        shed at once (counted as shed), else None; so that it can be refused
        before anything about it is checked or read."""
        if self.inflight < self.max_inflight and not self.waiters:
            return None
        now = self.clock()
        self.meter.saturated(now)
        if not self._past_bounds(now):
            return None
        self.shed += 1
        SHED.inc()
        return self.retry_after(self.inflight + len(self.waiters))

    def retry_after(self, ahead: int) -> int:
        """Seconds until ``ahead`` orders are through at the measured rate (1 to 30)."""
        return min(30, max(1, math.ceil(ahead / self.meter.rate(self.clock()))))

    async def enter(self) -> None:
        """Take a slot (waiting in the queue when that is expected to be short);
        :class:`Shed` otherwise."""
        if self.inflight < self.max_inflight and not self.waiters:
            self.inflight += 1
            INFLIGHT.set(self.inflight)
            return
        now = self.clock()
        self.meter.saturated(now)
        if self._past_bounds(now):
            self.shed += 1
            SHED.inc()
            raise Shed(self.retry_after(self.inflight + len(self.waiters)))
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        QUEUED.set(len(self.waiters))
        try:
            # The estimate may be wrong (the api slowed down meanwhile): never
            # wait much longer than it promised.
            await asyncio.wait_for(asyncio.shield(waiter), timeout=1.5 * self.queue_s + 0.5)
        except TimeoutError:  # the builtin (asyncio's), not redis's
            if waiter.done():  # the slot came just now: keep it
                return
            waiter.cancel()
            self._forget(waiter)
            self.shed += 1
            SHED.inc()
            raise Shed(self.retry_after(self.inflight + len(self.waiters))) from None
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.leave(accepted=False)  # handed a slot, but the client went
            else:
                waiter.cancel()
                self._forget(waiter)
            raise

    def leave(self, *, accepted: bool) -> None:
        """Give the slot back (to the first waiter, if any)."""
        now = self.clock()
        self.meter.completed(now)
        if accepted:
            self.accepted += 1
        if self.waiters:
            self.meter.saturated(now)
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes on: inflight unchanged
                self._trim(now)
                QUEUED.set(len(self.waiters))
                return
        self.inflight -= 1
        INFLIGHT.set(self.inflight)
        QUEUED.set(0)
        CAPACITY.set(self.meter.capacity)

    def _trim(self, now: float) -> None:
        """Shed the newest waiters at once when the rate measured meanwhile says
        they would wait past their bound anyway (the rate a queue was filled at
        may have been a good second's): a 503 now, not one after 3.5 s."""
        keep = max(1, math.floor(self.meter.rate(now) * (1.5 * self.queue_s + 0.5)))
        while len(self.waiters) > keep:
            waiter = self.waiters.pop()
            if not waiter.done():
                self.shed += 1
                SHED.inc()
                waiter.set_exception(Shed(self.retry_after(self.inflight + len(self.waiters))))

    def _forget(self, waiter: asyncio.Future[None]) -> None:
        with contextlib.suppress(ValueError):  # handed a slot meanwhile
            self.waiters.remove(waiter)
        QUEUED.set(len(self.waiters))


def _shed_response(retry_after_s: int) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    body = orjson.dumps(
        {
            "type": "about:blank",
            "status": 503,
            "title": "busy",
            "detail": "the api is at its bound of orders in flight; retry after the time given",
        }
    )
    headers = [
        (b"content-type", PROBLEM.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(retry_after_s).encode()),
    ]
    return body, headers


def _is_order(scope: Scope) -> bool:
    return bool(scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/v1/orders")


def bearer_token(scope: Scope) -> str | None:
    """The token of the request's ``Authorization: Bearer`` header, if any."""
    for name, value in scope.get("headers") or []:
        if name == b"authorization":
            return bearer_of(value.decode("latin-1"))
    return None


def _unauthorized(detail: str) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    body = orjson.dumps({"type": "about:blank", "status": 401, "title": "unauthorized", "detail": detail})
    headers = [
        (b"content-type", PROBLEM.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", b"Bearer"),
        # The body was not read: the server would go on receiving (and
        # dropping) whatever the client still trickles of it.
        (b"connection", b"close"),
    ]
    return body, headers


# The scope key under which OrderGate leaves the token it verified and its
# principal: the route's get_principal takes it instead of decoding the token
# again (a JWT decode is ~3 % of an order's api CPU, docs/performance.md).
VERIFIED = "ticketry.verified"


class OrderGate:
    """Pure-ASGI middleware, before ``POST /v1/orders``'s body is read: 503 at
    once when the order would be shed anyway (the cheapest answer, checked
    first), 401 without a valid bearer token (``verify`` raises ``AuthError``,
    as the route's own check does; the route still checks the role, and
    answers a genuine but unusable token). Neither reads the body or takes a
    slot. A token it verified goes on in ``scope[VERIFIED]`` with its principal."""

    def __init__(self, app: ASGIApp, shedding: Shedding, verify: Callable[[str], object]) -> None:
        self.app, self.shedding, self.verify = app, shedding, verify

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _is_order(scope):
            await self.app(scope, receive, send)
            return
        retry_after_s = self.shedding.refuse_now()
        if retry_after_s is not None:
            body, headers = _shed_response(retry_after_s)
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        token = bearer_token(scope)
        detail = "a bearer token is required"
        if token is not None:
            try:
                principal = self.verify(token)
            except UnboundStaffError:
                # A genuine token its holder may not use here: the route says
                # why (403), as it does everywhere else.
                await self.app(scope, receive, send)
                return
            except AuthError:
                detail = "invalid or expired token"
            else:
                scope[VERIFIED] = (token, principal)
                await self.app(scope, receive, send)
                return
        body, headers = _unauthorized(detail)
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class OrderSlots:
    """Pure-ASGI middleware: ``POST /v1/orders`` runs only with a slot of
    :class:`Shedding`; without one it is answered 503 (at once, or after its
    short wait in the queue). It sits inside :class:`OrderGate` and
    ``bodies.BodyDeadline``: the token is valid and the body whole before
    a slot is taken."""

    def __init__(self, app: ASGIApp, shedding: Shedding) -> None:
        self.app, self.shedding = app, shedding

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _is_order(scope):
            await self.app(scope, receive, send)
            return
        try:
            await self.shedding.enter()
        except Shed as shed:
            body, headers = _shed_response(shed.retry_after_s)
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        status = 500

        async def observed(msg: dict[str, object]) -> None:
            nonlocal status
            if msg["type"] == "http.response.start":
                status = int(msg["status"])  # type: ignore[call-overload]
            await send(msg)

        try:
            await self.app(scope, receive, observed)  # type: ignore[arg-type]
        finally:
            self.shedding.leave(accepted=status == 202)


def bounded_redis(target: RedisTarget | str, *, max_connections: int, wait_s: float, timeout_s: float = 10.0) -> Redis:
    """The api's Redis client: ``ticketry.db.connect_redis`` (budgeted
    retries; the primary found through Sentinel when ``target`` has
    sentinels), on a pool of at most ``max_connections`` that makes a caller
    wait up to ``wait_s`` for a free connection (then ``ConnectionError``:
    503) instead of opening one per concurrent request. The driver's name and
    version are read once here, not by every new connection."""
    return connect_redis(
        target, max_connections=max_connections, wait_s=wait_s, timeout_s=timeout_s, driver_info=DriverInfo()
    )
