"""The renderer's batch pipeline: decode → render → store → emit + ack, or
retry / dead-letter.

``BatchPipeline.process`` handles a batch, read by a lane's subscriber
(``main``) or taken by the claim loop (``claims``); what becomes of each
entry is queued by ``outcomes`` on one MULTI/EXEC that runs at the end:

* undecodable, or ids we never issue → dead-letter at once (retrying cannot
  help), ack;
* already final (in the order's done set) or PDF already stored → emit (a no-op
  for a ticket that already has its event) and ack, no second render;
* render or storage error, attempts left → leave it pending; retried by the
  claim loop after a jittered exponential backoff;
* render or storage error on the last attempt → dead-letter with the history,
  emit ``ticket.failed``, ack.

A slow batch resets its remaining entries' idle time as it goes, so no peer
claims them from under it (``ticketry.consumer.Claimer.touch``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from ticketry import streams
from ticketry.consumer import Claimer
from ticketry.emit import cancelled_orders
from ticketry.events import DecodeError, RenderRequest, decode_render_request
from ticketry.pdfstores import open_store
from ticketry.replies import Entry, as_text
from ticketry.storage import PdfStore, StorageUnavailable, pdf_key
from ticketry.tracing import context_from, tracer

from ticketry_renderer import designs, metrics
from ticketry_renderer.config import RendererSettings
from ticketry_renderer.decision import Retries, parts, touch_due
from ticketry_renderer.outcomes import Outcomes
from ticketry_renderer.rate import BusyClock
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


# Entries per claim, per read of our own pending entries.
CLAIM_COUNT = 50
# Renders between two turns of the event loop in one batch (~5 ms of stamping).
YIELD_EVERY = 8


@dataclass
class BatchPipeline:
    """The renderer ``consumer``'s batches. Its state is shared with the claim
    loop (``claimers``, ``retries``) and the heartbeat (``rendered``, ``clock``)."""

    redis: Redis
    settings: RendererSettings
    consumer: str
    design: Design = field(default_factory=Design.default)
    # Where PDFs go (ticketry.storage); from the settings unless given.
    store: PdfStore = field(default=None)  # type: ignore[assignment]
    rng: random.Random = field(default_factory=random.Random)
    retries: Retries = field(default_factory=Retries)
    clock: BusyClock = field(default_factory=BusyClock)
    rendered: int = 0
    # Each lane whose last read was full (a backlog): its next read is handled whole.
    busy: dict[str, bool] = field(default_factory=dict)
    # Each render lane's claim side of this consumer (ticketry.consumer.Claimer).
    claimers: Mapping[str, Claimer] = field(init=False)
    outcomes: Outcomes = field(init=False)

    def __post_init__(self) -> None:
        if self.store is None:
            self.store = open_store(self.settings)
        self.claimers = {
            lane: Claimer(
                self.redis, lane, streams.RENDERERS_GROUP, self.consumer, self.settings.claim_idle_ms, CLAIM_COUNT
            )
            for lane in streams.RENDER_LANES
        }
        self.outcomes = Outcomes(self.settings, self.consumer, self.retries, self.rng)

    async def handle_read(self, lane: str, entries: Sequence[Entry], batch: int) -> None:
        """One read of ``lane`` (at most ``batch`` entries): whole while the lane
        has a backlog, in growing parts after it was idle, each part announced
        once stored (``decision.parts``)."""
        at, touched = 0, time.monotonic()
        for size in parts(len(entries), self.busy.get(lane, False)):
            # The parts still waiting keep their claim, as a slow batch's entries do.
            touched = await self._keep_claimed(lane, entries, at, touched)
            await self.process(lane, entries[at : at + size])
            at += size
        self.busy[lane] = len(entries) >= batch

    async def process(self, lane: str, entries: Sequence[Entry], deliveries: dict[str, int] | None = None) -> None:
        """Handle one batch from ``lane`` (``deliveries``: each entry's delivery
        count, when past its first); never raises for a bad entry."""
        with self.clock.handling():
            await self._process(lane, entries, deliveries or {})

    async def _process(self, lane: str, entries: Sequence[Entry], deliveries: dict[str, int]) -> None:
        t0 = time.perf_counter()
        # MULTI/EXEC: a dead letter, its ticket.failed and the ack land together or not at all.
        # Every step below queues its outcomes on this one pipeline; it runs once, at the end.
        async with self.redis.pipeline(transaction=True) as pipe:
            decoded = self._decode(pipe, lane, entries)
            done = await self._already_done(decoded)
            # A cancelled order's tickets are never rendered: acked, counted, no PDF.
            cancelled = await cancelled_orders(self.redis, list({req.order_id for _, req in decoded}))
            # Each event look's design: loaded from a peer that stored it, else built here once.
            todo = [r for _, r in decoded if r.order_id not in cancelled and not _is_done(r, done)]
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
                self.outcomes.parked(pipe, lane, entry_id, fields, "undecodable", str(exc))
        return decoded

    async def _render(
        self,
        pipe: Pipeline,
        lane: str,
        decoded: list[tuple[str, RenderRequest]],
        cancelled: set[str],
        done: dict[str, set[str]],
        stored: set[str],
        deliveries: dict[str, int],
    ) -> list[_Made]:
        """Render each request that needs it; what needs no PDF (a cancelled
        order's ticket, invalid ids, one done or stored already, a failed
        render) has its outcome queued on ``pipe``. The PDFs made are returned,
        not stored: the caller stores them all at once."""
        touched = time.monotonic()
        made: list[_Made] = []
        for i, (entry_id, req) in enumerate(decoded):
            if req.order_id in cancelled:
                self.outcomes.skipped(pipe, lane, entry_id)
                continue
            try:
                pdf_key(req.order_id, req.ticket_id)
            except ValueError as exc:  # ids we never issue: no ticket to fail
                self.outcomes.parked(pipe, lane, entry_id, req.to_fields(), "invalid_ids", f"invalid ids: {exc}")
                continue
            # One span per ticket, continuing the api's (the request's traceparent);
            # it ends once the ticket's outcome is queued.
            span = _TRACER.start_span(
                "ticket.render", context=context_from(req.traceparent),
                attributes={"ticket.id": req.ticket_id, "order.id": req.order_id, "lane": lane},
            )  # fmt: skip
            with trace.use_span(span, end_on_exit=False):
                if _is_done(req, done) or req.ticket_id in stored:
                    self.outcomes.final(pipe, lane, entry_id, req, "rendered")
                    span.end()
                    continue
                if i and i % YIELD_EVERY == 0:
                    # The event loop's turn: a vip read that returned meanwhile gets its
                    # batch going between these renders, not after all of them.
                    await asyncio.sleep(0)
                touched = await self._keep_claimed(lane, decoded, i, touched)
                try:
                    with time_limit(self.settings.render_timeout_s), metrics.render_timer(lane):
                        pdf = render_ticket(req, self.design)
                except Exception as exc:
                    self.outcomes.failed(pipe, lane, entry_id, req, exc, deliveries.get(entry_id, 1))
                    span.end()
                    continue
            made.append((entry_id, req, span, pdf))
        return made

    async def _keep_claimed(self, lane: str, held: Sequence[tuple[Any, Any]], start: int, since: float) -> float:
        """Reset the idle time of ``held[start:]``'s entries (id first) once due
        (``touch_due``: a third of the claim threshold since ``since``), so no
        peer claims what this renderer still works on. Returns when they were
        last touched."""
        untouched_ms = int((time.monotonic() - since) * 1000)
        if not touch_due(untouched_ms, self.settings.claim_idle_ms):
            return since
        await self.claimers[lane].touch([as_text(e) for e, _ in held[start:]], untouched_ms)
        return time.monotonic()

    async def _store_and_announce(
        self, pipe: Pipeline, lane: str, made: list[_Made], deliveries: dict[str, int]
    ) -> None:
        """Every PDF of the batch is stored (durable) before any of it is
        announced: then each ticket's outcome is queued on ``pipe`` (rendered,
        or failed where its PDF could not be stored) and its span ends."""
        errors = await self.store.put_all([(r.order_id, r.ticket_id, pdf) for _, r, _, pdf in made]) if made else []
        for (entry_id, req, span, _), error in zip(made, errors, strict=True):
            with trace.use_span(span, end_on_exit=True):
                if error is not None:
                    self.outcomes.failed(pipe, lane, entry_id, req, error, deliveries.get(entry_id, 1))
                    continue
                self.rendered += 1
                metrics.RENDERED.inc()
                self.outcomes.final(pipe, lane, entry_id, req, "rendered")

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

    async def _stored(self, todo: Sequence[RenderRequest]) -> set[str]:
        """Which of these tickets already have a PDF stored (rendered before a
        crash cut their announcement short): announced without a second render.
        With the store unreachable: none (each is rendered, and its put fails
        and is retried like any render error)."""
        by_order: dict[str, list[str]] = {}
        # A re-issued ticket's stored PDF is its old one: rendered again, never skipped.
        for r in (r for r in todo if not r.ticket_version):
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
            by_order.setdefault(req.order_id, []).append(streams.done_member(req.ticket_id, req.ticket_version))
        out: dict[str, set[str]] = {}
        for order_id, tids in by_order.items():
            flags = await self.redis.smismember(streams.order_done(order_id), tids)
            out[order_id] = {t for t, f in zip(tids, flags, strict=True) if f}
        return out


def _is_done(req: RenderRequest, done: dict[str, set[str]]) -> bool:
    """Whether ``req``'s ticket (at its version) has its final event already."""
    return streams.done_member(req.ticket_id, req.ticket_version) in done.get(req.order_id, ())
