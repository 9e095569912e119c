"""The renderer's edge: decode → render → store → emit + ack, or retry / dead-letter.

``Worker.process`` handles a batch; what becomes of an entry that did not
succeed is decided by a pure function (``ticketry_renderer.decision.decide``)
and carried out here:

* undecodable, or ids we never issue → dead-letter at once (retrying cannot
  help), ack;
* already final (in the order's done set) or PDF already stored → emit (a no-op
  for a ticket that already has its event) and ack, no second render;
* render or storage error, attempts left → leave it pending; retried here after
  a jittered exponential backoff (XCLAIM to ourselves, which counts the delivery);
* render or storage error on the last attempt → dead-letter with the history,
  emit ``ticket.failed``, ack.

Crashed peers' entries are claimed by XAUTOCLAIM once idle past ``claim_idle_ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from opentelemetry import trace
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from ticketry import streams
from ticketry.db import claim_idle, entries_of
from ticketry.emit import cancelled_orders, queue_final
from ticketry.events import DecodeError, RenderRequest, decode_render_request, event_fields
from ticketry.pdfstores import open_store
from ticketry.replies import Entry, as_text
from ticketry.storage import PdfStore, StorageUnavailable, pdf_key
from ticketry.tasks import pause
from ticketry.tracing import context_from, current_traceparent, tracer

from ticketry_renderer import designs, metrics
from ticketry_renderer.config import RendererSettings
from ticketry_renderer.decision import DeadLetter, ErrorKind, RenderRetryPolicy, RetryAfter, decide
from ticketry_renderer.rate import RateMeter, utilisation
from ticketry_renderer.render import Design, render_ticket

log = logging.getLogger(__name__)
_TRACER = tracer(__name__)
# A ticket rendered in a batch, not stored yet: its entry id, request, span and PDF.
_Made = tuple[str, RenderRequest, trace.Span, bytes]


class RenderTimeout(Exception):
    """A render ran past ``render_timeout_s``."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Interrupt the block with RenderTimeout after ``seconds`` (SIGALRM; main
    thread only, where the renderer renders)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum: int, frame: object) -> None:
        raise RenderTimeout(f"render exceeded {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Worker:
    redis: Redis
    settings: RendererSettings
    consumer: str
    design: Design = field(default_factory=Design.default)
    # Where PDFs go (ticketry.storage); from the settings unless given.
    store: PdfStore = field(default=None)  # type: ignore[assignment]
    rng: random.Random = field(default_factory=random.Random)
    # (lane, entry id) → monotonic time its retry is due
    retry_due: dict[tuple[str, str], float] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)
    rendered: int = 0
    started: float = field(default_factory=time.time)
    # Capacity (tickets per busy second) for the scaler; see rate.py.
    meter: RateMeter = field(default_factory=RateMeter)
    busy: float = 0.0  # share of the last heartbeat interval spent handling batches
    # Busy time: the union of the intervals in which any batch is being handled
    # (the two lane subscribers and the claimer may interleave at their awaits).
    _busy_s: float = 0.0
    _active: int = 0
    _busy_since: float = 0.0

    def __post_init__(self) -> None:
        if self.store is None:
            self.store = open_store(self.settings)

    @property
    def rate(self) -> float:
        return self.meter.rate

    def busy_seconds(self) -> float:
        """Cumulative seconds spent handling batches, including the one in hand."""
        if self._active:
            return self._busy_s + time.monotonic() - self._busy_since
        return self._busy_s

    @contextlib.contextmanager
    def _handling(self) -> Iterator[None]:
        if self._active == 0:
            self._busy_since = time.monotonic()
        self._active += 1
        try:
            yield
        finally:
            self._active -= 1
            if self._active == 0:
                self._busy_s += time.monotonic() - self._busy_since

    async def process(self, lane: str, entries: Sequence[Entry], deliveries: dict[str, int] | None = None) -> None:
        """Handle one batch from ``lane``; never raises for a bad entry."""
        with self._handling():
            await self._process(lane, entries, deliveries)

    async def _process(self, lane: str, entries: Sequence[Entry], deliveries: dict[str, int] | None) -> None:
        t0 = time.perf_counter()
        # MULTI/EXEC: a dead letter, its ticket.failed and the ack land together or not at all.
        # Every step below queues its outcomes on this one pipeline; it runs once, at the end.
        async with self.redis.pipeline(transaction=True) as pipe:
            decoded = self._decode(pipe, lane, entries)
            done = await self._already_done(decoded)
            # A cancelled order's tickets are never rendered: acked, counted, no PDF.
            cancelled = await cancelled_orders(self.redis, list({req.order_id for _, req in decoded}))
            # Each event look's design: loaded from a peer that stored it, else built here once.
            todo = [
                r for _, r in decoded if r.order_id not in cancelled and r.ticket_id not in done.get(r.order_id, ())
            ]
            if todo:
                await designs.prepare(self.redis, self.design, todo, self.consumer)
            stored = await self._stored(todo)
            made = await self._render(pipe, lane, decoded, cancelled, done, stored, deliveries)
            await self._store_and_announce(pipe, lane, made, deliveries)
            metrics.count_final(lane, list(pipe.command_stack), await pipe.execute())
        if made:
            await self._drop_cancelled({req.order_id for _, req, _, _ in made})
        if entries:
            metrics.BATCH_SECONDS.observe(time.perf_counter() - t0)

    def _decode(self, pipe: Pipeline, lane: str, entries: Sequence[Entry]) -> list[tuple[str, RenderRequest]]:
        """The batch's render requests by entry id; one that cannot be decoded
        is dead-lettered (queued on ``pipe``)."""
        decoded: list[tuple[str, RenderRequest]] = []
        for raw_id, fields in entries:
            entry_id = as_text(raw_id)
            try:
                decoded.append((entry_id, decode_render_request(fields)))
            except DecodeError as exc:
                self._park(pipe, lane, entry_id, fields, "undecodable", str(exc))
        return decoded

    async def _render(
        self,
        pipe: Pipeline,
        lane: str,
        decoded: list[tuple[str, RenderRequest]],
        cancelled: set[str],
        done: dict[str, set[str]],
        stored: set[str],
        deliveries: dict[str, int] | None,
    ) -> list[_Made]:
        """Render each request that needs it; what needs no PDF (a cancelled
        order's ticket, invalid ids, one done or stored already, a failed
        render) has its outcome queued on ``pipe``. The PDFs made are returned,
        not stored: the caller stores them all at once."""
        touched = time.monotonic()
        made: list[_Made] = []
        for i, (entry_id, req) in enumerate(decoded):
            if req.order_id in cancelled:
                pipe.xack(lane, streams.RENDERERS_GROUP, entry_id)
                self._forget(lane, entry_id)
                metrics.SKIPPED.inc()
                continue
            try:
                pdf_key(req.order_id, req.ticket_id)
            except ValueError as exc:  # ids we never issue: no ticket to fail
                self._park(pipe, lane, entry_id, req.to_fields(), "invalid_ids", f"invalid ids: {exc}")
                continue
            # One span per ticket, continuing the api's (the request's traceparent);
            # it ends once the ticket's outcome is queued.
            span = _TRACER.start_span(
                "ticket.render", context=context_from(req.traceparent),
                attributes={"ticket.id": req.ticket_id, "order.id": req.order_id, "lane": lane},
            )  # fmt: skip
            with trace.use_span(span, end_on_exit=False):
                if req.ticket_id in done.get(req.order_id, ()) or req.ticket_id in stored:
                    self._final(pipe, lane, entry_id, req, "rendered")
                    span.end()
                    continue
                touched = await self._keep_alive(lane, [e for e, _ in decoded[i:]], touched)
                try:
                    with time_limit(self.settings.render_timeout_s), metrics.render_timer(lane):
                        pdf = render_ticket(req, self.design)
                except Exception as exc:
                    await self._failed(pipe, lane, entry_id, req, exc, deliveries)
                    span.end()
                    continue
            made.append((entry_id, req, span, pdf))
        return made

    async def _store_and_announce(
        self, pipe: Pipeline, lane: str, made: list[_Made], deliveries: dict[str, int] | None
    ) -> None:
        """Every PDF of the batch is stored (durable) before any of it is
        announced: then each ticket's outcome is queued on ``pipe`` (rendered,
        or failed where its PDF could not be stored) and its span ends."""
        outcomes = await self.store.put_all([(r.order_id, r.ticket_id, pdf) for _, r, _, pdf in made]) if made else []
        for (entry_id, req, span, _), error in zip(made, outcomes, strict=True):
            with trace.use_span(span, end_on_exit=True):
                if error is not None:
                    await self._failed(pipe, lane, entry_id, req, error, deliveries)
                    continue
                self.rendered += 1
                metrics.RENDERED.inc()
                self._final(pipe, lane, entry_id, req, "rendered")

    async def _drop_cancelled(self, order_ids: set[str]) -> None:
        """Delete the PDFs of any of these orders cancelled while this batch
        rendered them. A cancel marks the order first, then deletes its PDFs;
        this looks after storing: a PDF stored before that delete goes with
        it, one stored after it is deleted here. No PDF of a cancelled order
        stays (none is served either way: 410)."""
        for order_id in await cancelled_orders(self.redis, sorted(order_ids)):
            await self.store.delete_order(order_id)

    async def build_designs(self, entries: Sequence[Entry]) -> int:
        """Design requests (``ticketry.designs.request_designs``): build and store
        the designs no peer stored yet, then ack. Best effort: a design that
        fails here is built (or its error reported) at its first ticket."""
        requests = []
        for _, fields in entries:
            try:
                requests.append(decode_render_request(fields))
            except DecodeError as exc:
                log.warning("renderer: undecodable design request", extra={"error": str(exc)[:200]})
        try:
            built = await designs.prepare(self.redis, self.design, requests, self.consumer)
        finally:
            if entries:
                await self.redis.xack(streams.DESIGN_REQUESTS, streams.DESIGNERS_GROUP, *[e for e, _ in entries])
        if built:
            log.info("renderer: designs built ahead of their first ticket", extra={"built": built})
        return built

    async def _keep_alive(self, lane: str, ids: list[Any], touched: float) -> float:
        """Reset the idle time of the batch's remaining entries once a third of
        ``claim_idle_ms`` has passed, so a live but slow batch is never claimed by
        a peer (the idle threshold bounds one render, not a whole batch).

        ``XCLAIM … JUSTID`` to ourselves resets idle without counting a delivery
        (https://redis.io/docs/latest/commands/xclaim/). ``min-idle-time`` is the
        time since our last touch, so an entry a peer claimed meanwhile (idle
        reset by that claim) is left with the peer instead of being taken back.
        """
        elapsed_ms = int((time.monotonic() - touched) * 1000)
        if elapsed_ms < self.settings.claim_idle_ms // 3 or not ids:
            return touched
        await self.redis.xclaim(lane, streams.RENDERERS_GROUP, self.consumer, max(elapsed_ms - 50, 0), ids, justid=True)
        return time.monotonic()

    async def _stored(self, todo: Sequence[RenderRequest]) -> set[str]:
        """Which of these tickets already have a PDF stored (rendered before a
        crash cut their announcement short): announced without a second render.
        With the store unreachable: none (each is rendered, and its put fails
        and is retried like any render error)."""
        by_order: dict[str, list[str]] = {}
        for r in todo:
            with contextlib.suppress(ValueError):
                pdf_key(r.order_id, r.ticket_id)
                by_order.setdefault(r.order_id, []).append(r.ticket_id)
        out: set[str] = set()
        for order_id, tids in by_order.items():
            try:
                out |= await self.store.stored(order_id, tids)
            except StorageUnavailable as exc:
                log.warning("renderer: storage unavailable", extra={"order_id": order_id, "error": str(exc)[:300]})
        return out

    async def _already_done(self, decoded: list[tuple[str, RenderRequest]]) -> dict[str, set[str]]:
        by_order: dict[str, list[str]] = {}
        for _, req in decoded:
            by_order.setdefault(req.order_id, []).append(req.ticket_id)
        out: dict[str, set[str]] = {}
        for order_id, tids in by_order.items():
            flags = await self.redis.smismember(streams.order_done(order_id), tids)
            out[order_id] = {t for t, f in zip(tids, flags, strict=True) if f}
        return out

    async def _failed(
        self,
        pipe: Pipeline,
        lane: str,
        entry_id: str,
        req: RenderRequest,
        exc: Exception,
        deliveries: dict[str, int] | None,
    ) -> None:
        attempt = (deliveries or {}).get(entry_id, 1)
        reason = f"{type(exc).__name__}: {exc}"[:300]
        history = self.errors.setdefault(entry_id, [])
        history.append(f"attempt {attempt}: {reason}")
        metrics.RETRIES.inc()
        log.warning(
            "render failed",
            extra={"ticket_id": req.ticket_id, "order_id": req.order_id, "attempt": attempt, "error": reason},
        )
        kind: ErrorKind = "storage" if isinstance(exc, StorageUnavailable) else "render"
        age_s = time.time() - streams.stream_key(entry_id)[0] / 1000
        decision = decide(attempt, kind, reason, RenderRetryPolicy.of(self.settings), self.rng.random(), age_s)
        if not isinstance(decision, DeadLetter):
            delay = decision.delay_s if isinstance(decision, RetryAfter) else 0.0
            self.retry_due[(lane, entry_id)] = time.monotonic() + delay
            return
        metrics.DEAD_LETTERS.inc()
        parked = self._dead_letter_fields(lane, entry_id, req.to_fields(), decision.reason, history)
        self._final(pipe, lane, entry_id, req, "failed", decision.reason, parked)

    def _final(
        self, pipe: Pipeline, lane: str, entry_id: str, req: RenderRequest,
        outcome: Literal["rendered", "failed"], reason: str | None = None,
        dead_letter: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        """Queue the ticket's final event (exactly once, see ``ticketry.emit``),
        its dead letter with it when it failed for good, and the ack of its
        request; its retry bookkeeping ends here."""
        self._forget(lane, entry_id)
        queue_final(
            pipe,
            order_id=req.order_id,
            ticket_id=req.ticket_id,
            outcome=outcome,
            fields=event_fields(
                type="ticket.rendered" if outcome == "rendered" else "ticket.failed",
                event_uuid=f"{outcome}:{req.ticket_id}",
                order_id=req.order_id, ticket_id=req.ticket_id, reason=reason,
                correlation_id=req.correlation_id, traceparent=current_traceparent(),
            ),
            source_stream=lane,
            entry_id=entry_id,
            dead_letter=dead_letter,
        )  # fmt: skip

    def _forget(self, lane: str, entry_id: str) -> None:
        """End an entry's retry bookkeeping (it is acked in the same pipeline)."""
        self.retry_due.pop((lane, entry_id), None)
        self.errors.pop(entry_id, None)

    def _park(
        self,
        pipe: Pipeline,
        lane: str,
        entry_id: str,
        fields: Mapping[bytes, bytes] | Mapping[str, bytes],
        kind: ErrorKind,
        reason: str,
    ) -> None:
        """Queue the dead letter of a request that has no ticket to fail
        (undecodable, ids we never issue: a permanent error, parked at its
        first delivery) with its reason, and its ack."""
        decision = decide(1, kind, reason, RenderRetryPolicy.of(self.settings), 0.0)
        assert isinstance(decision, DeadLetter), decision  # permanent kinds are never retried
        metrics.DEAD_LETTERS.inc()
        parked = self._dead_letter_fields(lane, entry_id, fields, decision.reason, [decision.reason])
        pipe.xadd(streams.DEAD_LETTERS, parked)  # type: ignore[arg-type]
        pipe.xack(lane, streams.RENDERERS_GROUP, entry_id)

    def _dead_letter_fields(
        self,
        lane: str,
        entry_id: str,
        fields: Mapping[bytes, bytes] | Mapping[str, bytes],
        reason: str,
        history: list[str],
    ) -> dict[str, Any]:
        """A dead letter: the request, its reason and attempt history, where it came from."""
        return {
            **{as_text(k): v for k, v in fields.items()},
            streams.DLQ_REASON: reason,
            streams.DLQ_HISTORY: orjson.dumps(history),
            streams.DLQ_SOURCE: lane,
            streams.DLQ_ENTRY: entry_id,
            streams.DLQ_CONSUMER: self.consumer,
            streams.DLQ_AT: str(time.time()),
        }

    # -- claiming -----------------------------------------------------------------

    async def claim_once(self) -> int:
        """Retry our own due failures, then claim entries abandoned by dead peers."""
        handled = 0
        now = time.monotonic()
        for lane in streams.RENDER_LANES:
            due = [eid for (ln, eid), t in self.retry_due.items() if ln == lane and t <= now]
            if due:
                # XCLAIM with min-idle 0 to ourselves: counts one more delivery.
                claimed: Any = await self.redis.xclaim(lane, streams.RENDERERS_GROUP, self.consumer, 0, list(due))
                handled += await self._process_claimed(lane, entries_of(claimed), due)
            claimed = await claim_idle(
                self.redis, lane, streams.RENDERERS_GROUP, self.consumer, self.settings.claim_idle_ms, 50
            )
            if claimed:
                log.info("claimed abandoned entries", extra={"lane": lane, "count": len(claimed)})
                metrics.CLAIMED.inc(len(claimed))
                handled += await self._process_claimed(lane, claimed, None)
        return handled

    async def _process_claimed(self, lane: str, claimed: list[Entry], asked: list[str] | None) -> int:
        live = [(eid, f) for eid, f in claimed if f]
        if asked is not None:
            got = {as_text(e) for e, _ in claimed}
            for eid in asked:
                if eid not in got:  # acked meanwhile, or trimmed
                    self.retry_due.pop((lane, eid), None)
        if not live:
            return 0
        counts = await self.delivery_counts(lane, [as_text(e) for e, _ in live])
        await self.process(lane, live, counts)
        return len(live)

    async def delivery_counts(self, lane: str, ids: list[str]) -> dict[str, int]:
        """Times each entry was delivered (XPENDING's counter)."""
        rows = await self.redis.xpending_range(
            lane, streams.RENDERERS_GROUP, min=min(ids), max=max(ids), count=len(ids) + 100
        )
        wanted = set(ids)
        out = {}
        for r in rows:
            mid = as_text(r["message_id"])
            if mid in wanted:
                out[mid] = int(r["times_delivered"])
        return out

    async def drain_own_pending(self) -> int:
        """Process whatever is still pending under our name (used at shutdown)."""
        total = 0
        for lane in streams.RENDER_LANES:
            while True:
                mine: Any = await self.redis.xreadgroup(streams.RENDERERS_GROUP, self.consumer, {lane: "0"}, count=50)
                entries = [(e, f) for e, f in entries_of(mine) if f]
                fresh = [e for e in entries if (lane, as_text(e[0])) not in self.retry_due]
                if not fresh:
                    break
                counts = await self.delivery_counts(lane, [as_text(e) for e, _ in fresh])
                await self.process(lane, fresh, counts)
                total += len(fresh)
        return total

    async def forget_consumer_if_idle(self) -> None:
        """Remove our consumer from the group once nothing is pending under it.

        Never with pending entries: XGROUP DELCONSUMER drops them from the PEL,
        which would make them unclaimable (lost).
        """
        for lane in streams.RENDER_LANES:
            rows = await self.redis.xpending_range(
                lane, streams.RENDERERS_GROUP, min="-", max="+", count=1, consumername=self.consumer
            )
            if not rows:
                await self.redis.xgroup_delconsumer(lane, streams.RENDERERS_GROUP, self.consumer)

    async def claim_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.claim_once()
            except (RedisConnectionError, RedisTimeoutError) as exc:
                log.warning("claimer: redis unavailable", extra={"error": str(exc)})
            except ResponseError as exc:
                log.warning("claimer: redis error", extra={"error": str(exc)})
            except Exception:
                log.exception("claimer: unexpected error")
            await pause(stop, self.settings.claim_interval_s)

    async def heartbeat_loop(self, stop: asyncio.Event) -> None:
        key = streams.renderer_heartbeat(self.consumer)
        last_busy, last_t = self.busy_seconds(), time.monotonic()
        while not stop.is_set():
            now, busy = time.monotonic(), self.busy_seconds()
            self.meter = self.meter.update(self.rendered, busy)
            self.busy = utilisation(busy - last_busy, now - last_t)
            last_busy, last_t = busy, now
            try:
                async with self.redis.pipeline(transaction=True) as pipe:
                    pipe.hset(
                        key,
                        mapping={
                            streams.HEARTBEAT_PID: os.getpid(), streams.HEARTBEAT_HOST: socket.gethostname(),
                            streams.HEARTBEAT_CONSUMER: self.consumer, streams.HEARTBEAT_RATE: f"{self.rate:.2f}",
                            streams.HEARTBEAT_BUSY: f"{self.busy:.3f}", streams.HEARTBEAT_RENDERED: self.rendered,
                            streams.HEARTBEAT_STARTED: f"{self.started:.0f}",
                        },
                    )  # fmt: skip
                    pipe.expire(key, streams.HEARTBEAT_TTL_S)
                    await pipe.execute()
            except (RedisConnectionError, RedisTimeoutError):
                pass
            await pause(stop, 1.0)
        await self.redis.delete(key)


def default_consumer() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"
