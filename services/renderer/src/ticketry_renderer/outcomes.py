"""What becomes of each entry of a batch, queued on the batch's MULTI/EXEC
pipeline: a dead letter, its ``ticket.failed`` and the ack land together or
not at all (the pipeline runs once, at the end of the batch; see ``handlers``).

* rendered, or done already → its final event (exactly once: ``ticketry.emit``)
  and the ack;
* a cancelled order's ticket → the ack only;
* undecodable, or ids we never issue → its dead letter and the ack;
* a failed render or store → :func:`ticketry_renderer.decision.decide`: left
  pending for a retry (noted in :class:`~ticketry_renderer.decision.Retries`),
  or dead-lettered with its history and failed for good.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from redis.asyncio.client import Pipeline
from ticketry import streams
from ticketry.emit import queue_final
from ticketry.events import RenderRequest, event_fields
from ticketry.replies import as_text
from ticketry.storage import StorageUnavailable
from ticketry.tracing import current_traceparent

from ticketry_renderer import metrics
from ticketry_renderer.config import RendererSettings
from ticketry_renderer.decision import DeadLetter, ErrorKind, RenderRetryPolicy, Retries, RetryAfter, decide

log = logging.getLogger(__name__)

Fields = Mapping[bytes, bytes] | Mapping[str, bytes]


@dataclass
class Outcomes:
    """Queues outcomes for the renderer ``consumer``."""

    settings: RendererSettings
    consumer: str
    retries: Retries
    rng: random.Random

    def skipped(self, pipe: Pipeline, lane: str, entry_id: str) -> None:
        """A cancelled order's ticket: acked, never rendered."""
        pipe.xack(lane, streams.RENDERERS_GROUP, entry_id)
        self.retries.forget(lane, entry_id)
        metrics.SKIPPED.inc()

    def failed(
        self, pipe: Pipeline, lane: str, entry_id: str, req: RenderRequest, exc: Exception, attempt: int
    ) -> None:
        """Delivery ``attempt`` of ``req`` failed with ``exc``: retry it later, or fail it for good."""
        reason = f"{type(exc).__name__}: {exc}"[:300]
        history = self.retries.failed(entry_id, attempt, reason)
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
            self.retries.retry_at(lane, entry_id, time.monotonic() + delay)
            return
        metrics.DEAD_LETTERS.inc()
        parked = self._dead_letter(lane, entry_id, req.to_fields(), decision.reason, history)
        self.final(pipe, lane, entry_id, req, "failed", decision.reason, parked)

    def final(
        self, pipe: Pipeline, lane: str, entry_id: str, req: RenderRequest,
        outcome: Literal["rendered", "failed"], reason: str | None = None,
        dead_letter: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        """Queue the ticket's final event (exactly once, see ``ticketry.emit``),
        its dead letter with it when it failed for good, and the ack of its
        request; its retry bookkeeping ends here."""
        self.retries.forget(lane, entry_id)
        reissued = outcome == "rendered" and req.ticket_version > 0
        queue_final(
            pipe,
            order_id=req.order_id,
            ticket_id=req.ticket_id,
            outcome=outcome,
            ticket_version=req.ticket_version,
            fields=event_fields(
                type="ticket.reissued" if reissued else "ticket.rendered" if outcome == "rendered" else "ticket.failed",
                event_uuid=f"{outcome}:{streams.done_member(req.ticket_id, req.ticket_version)}",
                order_id=req.order_id, ticket_id=req.ticket_id, reason=reason,
                correlation_id=req.correlation_id, traceparent=current_traceparent(),
            ),
            source_stream=lane,
            entry_id=entry_id,
            dead_letter=dead_letter,
        )  # fmt: skip

    def parked(self, pipe: Pipeline, lane: str, entry_id: str, fields: Fields, kind: ErrorKind, reason: str) -> None:
        """Queue the dead letter of a request that has no ticket to fail
        (undecodable, ids we never issue: a permanent error, parked at its
        first delivery) with its reason, and its ack."""
        decision = decide(1, kind, reason, RenderRetryPolicy.of(self.settings), 0.0)
        assert isinstance(decision, DeadLetter), decision  # permanent kinds are never retried
        metrics.DEAD_LETTERS.inc()
        parked = self._dead_letter(lane, entry_id, fields, decision.reason, [decision.reason])
        pipe.xadd(streams.DEAD_LETTERS, parked)  # type: ignore[arg-type]
        pipe.xack(lane, streams.RENDERERS_GROUP, entry_id)

    def _dead_letter(self, lane: str, entry_id: str, fields: Fields, reason: str, history: list[str]) -> dict[str, Any]:
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
