"""The progress socket's core: what an order's socket is sent, as plain
functions and classes of plain data (the progress hash, the order's head and
outcome from the store, stream entries). No Redis, no store, no socket: the
route (``routes.progress``) and the hub do that I/O and ask this module what
to send.

* :func:`owner` / :func:`needs_head` / :func:`needs_outcome` — whose order it
  is, and which store reads the snapshot needs (only when the progress hash has
  expired or lacks the field).
* :class:`Snapshot` — the first message: the order's counters and status as of
  a stream id (``upto``), from the live hash, else from the store.
* :class:`Replay` — resuming after ``after=<stream id>``: where to read next,
  and for each chunk of ``ticketry:ticket-events`` read in ``(after, upto]``
  the messages of this order to send, up to its cancellation.
* :func:`outgoing` / :func:`message_for` — what a stream entry becomes on every
  socket of its order (built once, shared).
* :func:`ends_socket` — when an order's socket is done: after
  ``order.cancelled`` nothing more can come, so the socket closes (1000).
  ``order.completed`` does not close it: the buyer's page keeps it open.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import orjson
from ticketry import streams
from ticketry.events import DecodeError, TicketEvent, decode_ticket_event
from ticketry.replies import Entry, as_text
from ticketry.streams import StreamKey, stream_key

from ticketry_notifier import handshake
from ticketry_notifier.handshake import Close

Progress = Mapping[str, str]
_ORDER_ID = b"order_id"  # a ticket event's field (ticketry.events.event_fields)


@dataclass(frozen=True, slots=True)
class OrderHead:
    """What the store says of a placed order (``Order``: owner, size, status)."""

    owner: str
    quantity: int
    cancelled: bool


@dataclass(frozen=True, slots=True)
class OrderOutcome:
    """The counters the projector recorded once the order completed (``OrderState``)."""

    total: int
    rendered: int
    failed: int


# -- who may watch, and what the snapshot needs from the store ------------------------


def owner(progress: Progress, head: OrderHead | None) -> str | None:
    """The order's buyer: from the progress hash, else from the store (None: no such order)."""
    return progress.get(streams.PROGRESS_OWNER) or (head.owner if head is not None else None)


def needs_head(progress: Progress) -> bool:
    """Whether the order's head must be read from the store: the hash names no
    owner, or has no counters to show (it expired)."""
    return not progress.get(streams.PROGRESS_OWNER) or not progress.get(streams.PROGRESS_TOTAL)


def needs_outcome(progress: Progress, head: OrderHead | None) -> bool:
    """Whether the projector's record of the order is needed: the hash has no
    counters and the order exists."""
    return not progress.get(streams.PROGRESS_TOTAL) and head is not None


def may_watch(progress: Progress, head: OrderHead | None, owns: Callable[[str], bool]) -> bool:
    """A socket may watch an order that exists and that its token may read."""
    who = owner(progress, head)
    return who is not None and owns(who)


def stored_progress(head: OrderHead | None, outcome: OrderOutcome | None) -> dict[str, str]:
    """The progress once the hash has expired: the outcome as the projector
    recorded it (none yet: still rendering, nothing counted), ``cancelled``
    from the order itself."""
    if head is None:
        return {}
    cancelled = {streams.PROGRESS_CANCELLED: "1"} if head.cancelled else {}
    if outcome is None:
        return {streams.PROGRESS_TOTAL: str(head.quantity), **cancelled}
    return {
        streams.PROGRESS_TOTAL: str(outcome.total), streams.PROGRESS_RENDERED: str(outcome.rendered),
        streams.PROGRESS_FAILED: str(outcome.failed), streams.PROGRESS_COMPLETED: "1", **cancelled,
    }  # fmt: skip


def snapshot_progress(progress: Progress, head: OrderHead | None, outcome: OrderOutcome | None) -> dict[str, str]:
    """The progress a snapshot shows: the live hash while it has counters, else
    the store's, keeping the hash's ``completed`` / ``cancelled`` marks."""
    if progress.get(streams.PROGRESS_TOTAL):
        return dict(progress)
    marks = {k: v for k, v in progress.items() if k in (streams.PROGRESS_COMPLETED, streams.PROGRESS_CANCELLED)}
    return {**stored_progress(head, outcome), **marks}


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An order's first message, as of stream id ``upto``."""

    order_id: str
    upto: str
    progress: Mapping[str, str]

    @classmethod
    def of(
        cls, order_id: str, upto: str, progress: Progress, head: OrderHead | None, outcome: OrderOutcome | None
    ) -> Snapshot:
        return cls(order_id, upto, snapshot_progress(progress, head, outcome))

    @property
    def key(self) -> StreamKey:
        return stream_key(self.upto)

    @property
    def status(self) -> handshake.Status:
        return handshake.snapshot_status(self.progress)

    @property
    def text(self) -> str:
        return handshake.snapshot_text(self.order_id, self.upto, self.progress)

    @property
    def close(self) -> Close | None:
        """A cancelled order's socket closes once the snapshot (and replay) are out."""
        return handshake.CANCELLED if self.status == "cancelled" else None


# -- stream entries → messages ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One stream entry as every socket of its order is sent it (built once per entry)."""

    key: StreamKey
    id: str
    type: str
    text: str
    order_id: str
    ticket_id: str | None = None
    traceparent: str = ""

    @property
    def final(self) -> bool:
        """Nothing follows a cancellation: the socket is closed after it."""
        return ends_socket(self.type)


def ends_socket(event_type: str) -> bool:
    """Whether an order's socket closes after a message of this type."""
    return event_type == "order.cancelled"


def entry_order(fields: Mapping[bytes, bytes]) -> str:
    """The order a ticket-events entry is about, without decoding the rest."""
    return fields.get(_ORDER_ID, b"").decode(errors="replace")


def outgoing(ev: TicketEvent) -> Outgoing:
    return Outgoing(
        key=stream_key(ev.id), id=ev.id, type=ev.type, text=orjson.dumps(ev.to_ws()).decode(),
        order_id=ev.order_id, ticket_id=ev.ticket_id, traceparent=ev.traceparent,
    )  # fmt: skip


def message_for(entry_id: bytes | str, fields: Mapping[bytes, bytes]) -> Outgoing | None:
    """What a ticket-events entry becomes on a socket; None for one that does not decode."""
    try:
        return outgoing(decode_ticket_event(as_text(entry_id), fields))
    except DecodeError:
        return None


# -- resuming after a stream id --------------------------------------------------------


class Replay:
    """What a socket that came back with ``after=`` missed in ``(after, upto]``.

    ``start`` is where to read next (an inclusive XRANGE start; None: nothing
    more); :meth:`feed` takes each chunk read from there up to ``upto`` and
    answers the messages of this order to send. An empty chunk, the end of the
    id space or the order's cancellation ends it (``cancelled`` then says so).
    """

    __slots__ = ("cancelled", "order_id", "start")

    def __init__(self, order_id: str, after: StreamKey | None, upto: StreamKey) -> None:
        self.order_id = order_id
        self.cancelled = False
        # Nothing to replay without ``after``, or when the snapshot already covers it.
        self.start = streams.next_stream_id(after) if after is not None and after < upto else None

    def feed(self, chunk: Iterable[Entry]) -> list[Outgoing]:
        out: list[Outgoing] = []
        last: bytes | str | None = None
        for raw_id, fields in chunk:
            last = raw_id
            if entry_order(fields) != self.order_id:
                continue
            missed = message_for(raw_id, fields)
            if missed is None:
                continue
            out.append(missed)
            if missed.final:
                self.cancelled, self.start = True, None
                return out
        self.start = None if last is None else streams.next_stream_id(stream_key(last))
        return out
