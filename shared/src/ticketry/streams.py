"""Every Redis stream, consumer group, key and hash field name Ticketry uses, in one place.

Streams
-------
``ticketry:render:vip`` / ``ticketry:render:std``
    Render requests, one entry per ticket (fields: see ``events.RenderRequest``).
    VIP orders and small orders go to the vip lane so a 10,000-ticket order never
    starves them. Consumer group ``renderers``. Trimmed only below the oldest
    entry the group has not acknowledged (``XTRIM MINID``), never by length.
``ticketry:ticket-events``
    Ticket events (``ticket.rendered``, ``ticket.failed``, ``order.completed``,
    ``order.cancelled``).
    Consumer group ``projector`` (api); read without a group by every notifier.
    Trimmed by MINID to the older of: the projector's oldest unacked entry and
    the resume window (``EVENTS_RETENTION_S``).
``ticketry:render:dead``
    Dead letters: render requests that failed ``TICKETRY_RENDER_MAX_ATTEMPTS``
    times or could not be decoded, with the reason and attempt history (the
    request's fields plus the ``DLQ_*`` ones, each starting ``dlq_``). Kept
    until an operator re-drives or deletes them.
``ticketry:scaler:decisions``
    One entry per scaling decision (reason, inputs, from, to). ``MAXLEN ~ 10000``.
``ticketry:ops:audit``
    What operators did to dead letters (who: the token's ``sub`` or the
    ``ticketryctl`` user; action, kind, target, outcome, at), listed by the
    console at ``/ops`` (``ticketry_api.ops``). ``MAXLEN ~ OPS_AUDIT_MAXLEN``.
    Waiting rooms paused, resumed or closed (kind ``room``) are written there too.
``ticketry:ops:first-ticket`` (stream: ``ms``)
    One entry per order whose first final event is a ``ticket.rendered``,
    added by the emit script with it (``ticketry.emit``): ms from its render
    request's id (written when the order was accepted) to the event. The
    console's first-ticket latency p50/p99 over the last 15 minutes.
    ``MAXLEN ~ FIRST_TICKET_MAXLEN``.
``ticketry:ops:throughput`` (stream: the console's counters)
    One entry each ``TICKETRY_OPS_HISTORY_INTERVAL_S`` (whichever api takes
    the interval's tick, ``OPS_THROUGHPUT_TICK``, a key set NX): the growing totals the console
    draws its throughput from (orders accepted, tickets ordered and rendered),
    so a console opened mid-sale draws the last 15 minutes at once.
    ``MAXLEN ~ OPS_THROUGHPUT_MAXLEN``.
``ticketry:designs:requests``
    Designs (stamping templates) to build ahead of an event's first ticket, one
    entry per event look (fields: a sample ``events.RenderRequest``), appended by
    ``ticketry.designs.request_designs``. Consumer group ``designers`` (every
    renderer; one builds each). ``MAXLEN ~ DESIGN_REQUESTS_MAXLEN``.

Stream ids
----------
``<ms>-<seq>``, two unsigned 64-bit numbers. :func:`stream_key` reads one Redis
gave us as ``(ms, seq)``, which sorts like the id (the projector, the notifier);
:func:`parse_stream_id` is the strict reader for one a client sent (``after=``).
The trim script (``ticketry_api.adapters.trim``) compares ids in Lua with its own reader.

Keys
----
``ticketry:order:{id}:progress`` (hash: total, rendered, failed, owner, order_id, event_id, completed, cancelled;
the ``PROGRESS_*`` constants)
    Live counters, updated atomically with each ticket event (``event_id``: for
    the webhook dispatcher; orders placed before it was written have none). ``completed`` /
    ``cancelled`` hold the stream id of the order's ``order.completed`` /
    ``order.cancelled`` event once there is one; a cancelled order emits no
    further ticket events. TTL ``PROGRESS_TTL_S``.
``ticketry:order:{id}:done`` (set of ticket ids with a final event)
    Makes each ticket's final event exactly-once. TTL ``PROGRESS_TTL_S``. A
    re-issued ticket's render is a member of its own, ``<ticket id>@<version>``
    (``done_member``).
``ticketry:idem:{sha256 of user and key}`` (string: order id)
    Idempotency-Key → order: noted by the key's first request at step 1 (SET NX),
    so that a retry can tell that request is still in flight, and set to the
    recorded order with its render requests. TTL ``IDEMPOTENCY_TTL_S``.
    Hashed from the user and the key with a separator no user id or key can
    hold (``idempotency_scope``), so no two buyers' keys can ever meet.
``ticketry:held:{event}:{tier}:{user}`` (integer)
    Tickets a buyer holds in a tier with ``max_per_buyer``: counted up with the
    order's outbox entry, down when the order is refused, cancelled, or given
    up by the outbox sweep (its api crashed before recording it).
    TTL ``HELD_TTL_S``, renewed by each order.
``ticketry:renderer:{consumer}`` (hash: pid, host, consumer, rate, busy, rendered, started, rss; ``HEARTBEAT_*``)
    Renderer heartbeat; TTL ``HEARTBEAT_TTL_S`` so a dead renderer disappears.
    ``rate`` is capacity (tickets per busy second), ``busy`` the share of the last
    second spent rendering.
``ticketry:orders:in-flight`` (sorted set: ``<order id> <event id> <quantity> <tier> <owner>``, score ms)
    The api's outbox. An order is added before its capacity is reserved and
    removed by the MULTI/EXEC that appends its render requests; what stays past
    the grace is the outbox sweep's work (see ``ticketry_api.service_layer.orders``). Whoever
    removes the member of an order that will not exist gives back its ``held``
    count in the same script, so that happens once.
``ticketry:orders:accepted`` (integer)
    Orders enqueued (their render requests appended), counted by the same
    MULTI/EXEC that removes their outbox entry: the console's orders per
    second. An order the outbox sweep finishes while its slow request does
    too may count twice.
``ticketry:reissues:in-flight`` (sorted set: ``<ticket id>@<version>``, score ms)
    The re-issues' outbox: added before a re-issue's insert, removed once its
    render request is on the fast lane; what stays past the grace, the outbox
    sweep renders again if that version is still the ticket's newest
    (``ticketry_api.service_layer.reissue``).
``ticketry:scaler:leader`` (string: holder + fencing token)
    Scaler leadership lock, TTL ``LEADER_TTL_S``.
``ticketry:scaler:fence`` (integer) — fencing token counter, no TTL.
``ticketry:replica:fence`` (integer) — written (INCR) right before a ``WAIT``
    (``ticketry_api.adapters.replicas``): a replica that acknowledged it holds every write
    made before it, whichever connection made them. No TTL; one small key.
``ticketry:ratelimit:{scope}:{user}`` (integer) — fixed-window counter, TTL = window.
``ticketry:design:{digest}`` (string: a renderer's serialized stamping template)
    An event look's design, built once by any renderer and loaded by the others
    (``digest``: sha256 of the template key). TTL ``DESIGN_TTL_S``, refreshed on use.
``ticketry:design:{digest}:building`` (string: builder) — one builder at a time,
    TTL ``DESIGN_LOCK_MS``.
``ticketry:ops:sales:cursor`` (string: a ``ticket-events`` id)
    How far the console's poll has folded the ticket events into the sales
    counters below (``ticketry_api.ops.sales``). No TTL; one small key.
``ticketry:ops:sales:events`` (sorted set: event id, score = ms of its newest ticket event)
    The events the console's sales panel lists beside the waiting rooms: the
    newest ``OPS_SALES_EVENTS_MAX`` kept (ZREMRANGEBYRANK on each fold).
``ticketry:ops:sales:{event}:orders`` (hash: order id → ``<rank>:<status>``)
``ticketry:ops:sales:{event}:counts`` (hash: status → orders)
    Orders of the event by status as the ticket events tell them (processing,
    completed, partially_failed, failed, cancelled); an order only moves up in
    rank (processing 0, an outcome 1, cancelled 2), once, by one script, so
    two polls folding the same entries count it once. TTL ``PROGRESS_TTL_S``.
``ticketry:pdfs:purged`` (set of event ids)
    Events whose PDFs the api's retention sweep deleted
    (``TICKETRY_PDF_RETENTION_DAYS``), so a sweep visits each old event once.
    No TTL; one member per past event.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

from ticketry.replies import as_text

RENDER_VIP: Final = "ticketry:render:vip"
RENDER_STD: Final = "ticketry:render:std"
# Read order matters: the vip lane is always drained first.
RENDER_LANES: Final = (RENDER_VIP, RENDER_STD)
TICKET_EVENTS: Final = "ticketry:ticket-events"
DEAD_LETTERS: Final = "ticketry:render:dead"
SCALER_DECISIONS: Final = "ticketry:scaler:decisions"
OPS_AUDIT: Final = "ticketry:ops:audit"
FIRST_TICKET: Final = "ticketry:ops:first-ticket"
OPS_THROUGHPUT: Final = "ticketry:ops:throughput"
OPS_THROUGHPUT_TICK: Final = "ticketry:ops:throughput:tick"

RENDERERS_GROUP: Final = "renderers"
PROJECTOR_GROUP: Final = "projector"

PROGRESS_TTL_S: Final = 7 * 24 * 3600
HELD_TTL_S: Final = 400 * 24 * 3600
IDEMPOTENCY_TTL_S: Final = 24 * 3600
HEARTBEAT_TTL_S: Final = 5
LEADER_TTL_S: Final = 10
EVENTS_RETENTION_S: Final = 24 * 3600
SCALER_DECISIONS_MAXLEN: Final = 10_000
OPS_AUDIT_MAXLEN: Final = 10_000
FIRST_TICKET_MAXLEN: Final = 20_000
OPS_THROUGHPUT_MAXLEN: Final = 2_000  # 15 minutes at intervals down to 0.5 s

# Orders up to this many tickets ride the vip lane with vip orders.
SMALL_ORDER_MAX: Final = 20

# -- field names, one spelling each (Python and the Lua scripts) ----------------------
# ``ticketry:order:{id}:progress`` (``order_progress``)
PROGRESS_TOTAL: Final = "total"
PROGRESS_RENDERED: Final = "rendered"
PROGRESS_FAILED: Final = "failed"
PROGRESS_OWNER: Final = "owner"
PROGRESS_ORDER_ID: Final = "order_id"
PROGRESS_EVENT_ID: Final = "event_id"
PROGRESS_COMPLETED: Final = "completed"  # the stream id of the order's order.completed
PROGRESS_CANCELLED: Final = "cancelled"  # the stream id of its order.cancelled
# ``ticketry:renderer:{consumer}`` (``renderer_heartbeat``)
HEARTBEAT_PID: Final = "pid"
HEARTBEAT_HOST: Final = "host"
HEARTBEAT_CONSUMER: Final = "consumer"
HEARTBEAT_RATE: Final = "rate"  # tickets per busy second
HEARTBEAT_BUSY: Final = "busy"  # share of the last second spent rendering
HEARTBEAT_RENDERED: Final = "rendered"
HEARTBEAT_STARTED: Final = "started"  # unix seconds
HEARTBEAT_RSS: Final = "rss"  # resident memory, bytes
# A dead letter (``DEAD_LETTERS``, ``WEBHOOK_DEAD``): the parked message's own
# fields plus these, which all start with ``DLQ_PREFIX`` (re-driving drops them).
DLQ_PREFIX: Final = "dlq_"
DLQ_REASON: Final = "dlq_reason"
DLQ_HISTORY: Final = "dlq_history"  # JSON list of "attempt n: reason"
DLQ_SOURCE: Final = "dlq_source"  # the stream it came from
DLQ_ENTRY: Final = "dlq_entry"  # its id there
DLQ_CONSUMER: Final = "dlq_consumer"
DLQ_AT: Final = "dlq_at"
# ``ticketry:ops:first-ticket`` (``FIRST_TICKET``)
FIRST_TICKET_MS: Final = "ms"  # an order's first ticket, ms after its acceptance

# -- stream ids -------------------------------------------------------------------------
StreamKey = tuple[int, int]
STREAM_ID_MAX: Final = 2**64 - 1
# ASCII digits only (``\d`` would take other scripts' digits too), at most 20 of them.
_STREAM_ID = re.compile(r"([0-9]{1,20})(?:-([0-9]{1,20}))?", re.ASCII)


class BadStreamId(ValueError):
    """Not a Redis stream id: ``<ms>-<seq>`` or ``<ms>``, ASCII digits, each < 2**64."""


def stream_key(entry_id: str | bytes) -> StreamKey:
    """``(ms, seq)`` of a stream id Redis gave us (a bare ``<ms>``: seq 0); sorts
    like the ids. For an id a client sent, :func:`parse_stream_id`."""
    text = as_text(entry_id)
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def parse_stream_id(raw: str) -> StreamKey:
    """``"1700000000000-3"`` → ``(1700000000000, 3)``; a bare ``"1700000000000"``
    means its sequence 0. Strict: what Python's ``int()`` would also take
    (``1_0``, `` 1``, ``+1``, Arabic-Indic digits) is refused, so Redis never sees it."""
    m = _STREAM_ID.fullmatch(raw)
    if m is None:
        raise BadStreamId(f"not a stream id: {raw[:40]!r}")
    ms, seq = int(m.group(1)), int(m.group(2) or 0)
    if ms > STREAM_ID_MAX or seq > STREAM_ID_MAX:
        raise BadStreamId(f"stream id out of range: {raw[:40]!r}")
    return ms, seq


def format_stream_id(key: StreamKey) -> str:
    return f"{key[0]}-{key[1]}"


def next_stream_id(key: StreamKey) -> StreamKey | None:
    """The smallest id after ``key`` (an inclusive XRANGE start), None past the last."""
    ms, seq = key
    if seq < STREAM_ID_MAX:
        return ms, seq + 1
    if ms < STREAM_ID_MAX:
        return ms + 1, 0
    return None


def sortable_stream_id(entry_id: str) -> str:
    """A stream id as a string that sorts like the id (``ms-seq`` zero-padded;
    what the store keeps, e.g. ``OrderState.last_event``)."""
    ms, seq = stream_key(entry_id)
    return f"{ms:015d}-{seq:010d}"


ORDERS_IN_FLIGHT: Final = "ticketry:orders:in-flight"
ORDERS_ACCEPTED: Final = "ticketry:orders:accepted"
REISSUES_IN_FLIGHT: Final = "ticketry:reissues:in-flight"
SCALER_LEADER: Final = "ticketry:scaler:leader"
SCALER_FENCE: Final = "ticketry:scaler:fence"
REPLICA_FENCE: Final = "ticketry:replica:fence"
RENDERER_PREFIX: Final = "ticketry:renderer:"
PDFS_PURGED: Final = "ticketry:pdfs:purged"
OPS_SALES_CURSOR: Final = "ticketry:ops:sales:cursor"
OPS_SALES_EVENTS: Final = "ticketry:ops:sales:events"
OPS_SALES_EVENTS_MAX: Final = 12


def ops_sales_orders(event_id: str) -> str:
    """An event's orders → their status as the console last folded it."""
    return f"ticketry:ops:sales:{event_id}:orders"


def ops_sales_counts(event_id: str) -> str:
    """An event's orders counted by status."""
    return f"ticketry:ops:sales:{event_id}:counts"


def render_lane(lane: str, quantity: int) -> str:
    """The render stream an order's requests go to (priority lanes): its tier's
    lane, or the vip stream for a small order."""
    return RENDER_VIP if lane == "vip" or quantity <= SMALL_ORDER_MAX else RENDER_STD


def order_progress(order_id: str) -> str:
    """Hash of an order's live counters."""
    return f"ticketry:order:{order_id}:progress"


def in_flight_member(order_id: str, event_id: str, quantity: int, tier: str, owner: str | None = None) -> str:
    """An order's member of ``ORDERS_IN_FLIGHT`` (everything the sweep needs:
    ``owner`` is whose ``held`` count it gives back). The owner comes last, as
    the rest of the member: a user id may hold spaces."""
    member = f"{order_id} {event_id} {quantity} {tier}"
    return member if owner is None else f"{member} {owner}"


def parse_in_flight_member(member: str) -> tuple[str, str, int, str, str | None]:
    """``(order id, event id, quantity, tier, owner)`` of an ``ORDERS_IN_FLIGHT``
    member (members written before tiers have no tier: ``standard``; before
    owners, no owner: None)."""
    order_id, event_id, quantity, *rest = member.split(" ", 4)
    tier = rest[0] if rest else "standard"
    return order_id, event_id, int(quantity), tier, rest[1] if len(rest) > 1 else None


def done_member(ticket_id: str, ticket_version: int = 0) -> str:
    """A ticket's member of its order's ``done`` set: its id, or for a
    re-issue's render ``<ticket id>@<version>`` (each version renders once)."""
    return f"{ticket_id}@{ticket_version}" if ticket_version else ticket_id


def order_done(order_id: str) -> str:
    """Set of an order's ticket ids that already have their final event."""
    return f"ticketry:order:{order_id}:done"


def idempotency_scope(user_id: str, key: str) -> str:
    """A user's Idempotency-Key as one string that no other (user, key) pair
    spells: user ids are printable, keys are ``[A-Za-z0-9_.:-]``, and the
    separator (US, 0x1f) is neither."""
    return f"{user_id}\x1f{key}"


def idempotency(user_id: str, key: str) -> str:
    """Idempotency-Key record for one user."""
    return "ticketry:idem:" + hashlib.sha256(idempotency_scope(user_id, key).encode()).hexdigest()


def held(event_id: str, tier: str, user_id: str) -> str:
    """Tickets ``user_id`` holds in a tier of an event (for ``max_per_buyer``)."""
    return f"ticketry:held:{event_id}:{tier}:{user_id}"


def ledger_baton(event_id: str) -> str:
    """The event's ledger baton: a list of at most one entry, the head its last
    writer appended, handed from api process to api process (``adapters.baton``)."""
    return f"ticketry:ledger-baton:{event_id}"


LEDGER_BATON_TTL_MS = 60_000  # an event's baton outlives its last append this long


def renderer_heartbeat(consumer: str) -> str:
    """Heartbeat hash of one renderer process."""
    return f"{RENDERER_PREFIX}{consumer}"


def rate_limit(scope: str, user_id: str) -> str:
    """Fixed-window rate-limit counter."""
    return f"ticketry:ratelimit:{scope}:{user_id}"


# -- designs built ahead of the first ticket ----------------------------------------
DESIGN_REQUESTS: Final = "ticketry:designs:requests"
DESIGNERS_GROUP: Final = "designers"
DESIGN_REQUESTS_MAXLEN: Final = 10_000
DESIGN_TTL_S: Final = 30 * 24 * 3600
DESIGN_LOCK_MS: Final = 10_000


def design(digest: str) -> str:
    """A stored design (stamping template) by its digest."""
    return f"ticketry:design:{digest}"


def design_lock(digest: str) -> str:
    """Held by the one process building a design."""
    return f"ticketry:design:{digest}:building"


# -- shop webhooks -------------------------------------------------------------------
# ``ticketry:ticket-events``, consumer group ``webhooks``
#     The webhook dispatcher (in every api) reads the ticket events and turns each
#     ``order.completed`` / ``order.cancelled`` into one delivery per endpoint of
#     the order's event. Created at the stream's end (``$``) the first time, so a
#     first deploy does not replay a day of events; trimming keeps what it still
#     owes like any group's (``ticketry_api.adapters.trim``).
# ``ticketry:webhooks:deliveries`` (stream; fields: ``ticketry_api.webhooks.models.Delivery``)
#     One entry per attempt to deliver one message to one endpoint. Consumer group
#     ``webhook-senders`` (every api). Each entry is acked and deleted (XDEL) in the
#     same MULTI that records what came of it (done, retry scheduled, dead letter),
#     so the stream holds only work in hand and needs no trimming.
# ``ticketry:webhooks:retries`` (sorted set: a delivery's fields as JSON, score = due ms)
#     Attempts waiting for their backoff; moved back onto the deliveries stream
#     when due (one ZREM-then-XADD script per member, so each moves once). Bounded
#     by the endpoints' failing deliveries; emptied as they succeed or die.
# ``ticketry:webhooks:dead`` (stream: the delivery's fields + ``dlq_reason``,
#     ``dlq_at``) — deliveries that failed their last attempt or were refused for
#     good. Never trimmed: ``ticketryctl webhooks redrive`` / ``… delete`` empties it.
# ``ticketry:webhooks:events`` (set of event ids, and the marker ``*``)
#     Events that have webhook endpoints (``ticketry_api.webhooks.index``), kept
#     by the endpoint routes; the dispatcher reads the store only for orders of
#     these. ``*``: built from the store (without it the dispatcher rebuilds it).
#     No TTL; one member per event with an endpoint (one whose last was deleted may linger).
WEBHOOK_DELIVERIES: Final = "ticketry:webhooks:deliveries"
WEBHOOK_RETRIES: Final = "ticketry:webhooks:retries"
WEBHOOK_DEAD: Final = "ticketry:webhooks:dead"
WEBHOOK_EVENTS: Final = "ticketry:webhooks:events"
WEBHOOK_EVENTS_BUILT: Final = "*"  # no event id is "*"
WEBHOOKS_GROUP: Final = "webhooks"
WEBHOOK_SENDERS_GROUP: Final = "webhook-senders"


# -- tickets by email ------------------------------------------------------------------
# ``ticketry:ticket-events``, consumer group ``mailer``
#     The mailer (in every api, beside the webhook dispatcher) reads the ticket
#     events and mails each ``order.completed`` order that has an ``email``
#     (ticketry_api.mail). Created at the stream's end (``$``) the first time;
#     trimming keeps what it still owes like any group's.
# ``ticketry:mail:retries`` (sorted set: JSON {order, attempt, history}, score = due ms)
#     Mails waiting for their next attempt. A sender leases a due member by moving
#     its score ahead (``MAIL_LEASE`` script), so one sender at a time tries it and
#     a killed one's lease runs out; removed once it is sent or dead.
# ``ticketry:mail:dead`` (stream: order, attempt, history + ``dlq_reason``, ``dlq_at``)
#     Mails that failed their last attempt or were refused for good. Never trimmed:
#     ``ticketryctl mail delete`` empties it.
# ``ticketry:mail:sent:{order}`` (string: the Message-ID) — the once-only marker,
#     set right after the SMTP server's 250 to DATA; a redelivered order with it is
#     not mailed again. TTL ``MAIL_SENT_TTL_S`` (far past the events' retention).
MAIL_GROUP: Final = "mailer"
MAIL_RETRIES: Final = "ticketry:mail:retries"
MAIL_DEAD: Final = "ticketry:mail:dead"
MAIL_SENT_TTL_S: Final = 30 * 24 * 3600


def mail_sent(order_id: str) -> str:
    """The once-only marker of an order's email."""
    return f"ticketry:mail:sent:{order_id}"


# -- the waiting room of an on-sale -------------------------------------------------
# Every key below lives ``ROOM_TTL_S`` after its last write (each join and each
# admission tick renews what it writes). ``{event}`` is an event id with
# ``waiting_room: true``; ``{buyer}`` a token's ``sub``. See ticketry_api.waitingroom.
# ``ticketry:rooms`` (set of event ids)
#     Rooms somebody has joined: what the admitters (one per room, any api) tick.
#     An id leaves when its line is fully admitted, the event is sold out or the
#     room is closed (not while paused); a join, a resume or tickets coming back
#     (a cancel) put it back.
# ``ticketry:room:{event}:line`` (sorted set: buyer, score = place)
#     One place per buyer (ZADD NX): early arrivals (before ``on_sale_at`` by
#     Redis's clock) a random score in [0, 1), later ones ``1 + n`` in arrival order.
# ``ticketry:room:{event}:seq`` (integer) — later arrivals so far (their ``n``).
# ``ticketry:room:{event}:ids`` (hash: buyer → queue id) — a buyer's place, again on a second join.
# ``ticketry:queue:{queue id}`` (hash: event, buyer; ``QUEUE_*``) — a place by its id (the notifier's lookup).
# ``ticketry:room:{event}:state`` (hash: admitted, pending, rate, carry, on_sale_ms, sold_out, at, drawn, paused,
#     closed; ``ROOM_*``)
#     ``admitted``: how many of the line, in score order, have been admitted (only
#     grows; compare-and-set by the admission script); ``rate`` the current
#     admission rate (buyers/s); ``sold_out`` 1 while nothing is left to sell;
#     ``paused`` 1 while its organiser has paused admission (the script refuses then);
#     ``closed`` 1 once its organiser closed it for good (no join, no admission).
# ``ticketry:room:{event}:permits`` (hash: buyer → "<permission> <expires ms>")
#     Every permission issued, to hand it again to a buyer who asks again.
# ``ticketry:room:{event}:pending`` (hash: buyer → "<permission> <expires ms>")
#     An admission tick's permissions until a replica holds them
#     (``TICKETRY_REDIS_MIN_REPLICAS``): the admitter then moves them to
#     ``permits`` and announces them on ``updates`` in one step, and the state's
#     ``admitted`` becomes its ``pending``. Nothing reads them before: a buyer never
#     sees a permission that a failover could still take back.
# ``ticketry:room:{event}:outstanding`` (sorted set: buyer, score = expires ms)
#     Permissions issued and not yet used (expired ones are pruned each tick).
#     An order claims its buyer's entry (ZREM: one order per permission) and puts
#     it back if it is not accepted.
# ``ticketry:room:{event}:used`` (integer) — permissions used by an accepted order.
# ``ticketry:room:{event}:updates`` (stream: admitted, rate, at, sold_out, drawn, permits, paused?, closed?;
#     ``ROOM_*``)
#     One entry per admission tick (``permits``: JSON of the buyers admitted by
#     it → [permission, expires ms]), and one per pause, resume or close (``paused``
#     1 or 0, ``closed`` 1 for a close and 0 otherwise, no permits; a tick's entry
#     has neither: not paused, not closed); read without a group
#     by every notifier with a queue socket of the event. ``MAXLEN ~ ROOM_UPDATES_MAXLEN``.
# ``ticketry:room:{event}:admitter`` (string: holder) — the one api admitting for
#     the room, ``PX ROOM_ADMITTER_LOCK_MS``, renewed each tick.
# ``ticketry:api:capacity`` (hash: api consumer → JSON {capacity, shed_per_s, at})
#     Each api process's measured order rate (ticketry_api.middleware.shedding), written
#     every tick; the admitter sums the fresh ones. Entries older than a minute are deleted.
ROOMS: Final = "ticketry:rooms"
# ``ticketry:queue:{queue id}`` (``queue_place``)
QUEUE_EVENT: Final = "event"
QUEUE_BUYER: Final = "buyer"
# ``ticketry:room:{event}:state`` (``room_state``); the room's update entries
# (``room_updates``) carry the same names for the same values.
ROOM_ADMITTED: Final = "admitted"  # how many of the line were admitted
ROOM_PENDING: Final = "pending"  # state only: ``admitted`` once the pending permissions are announced
ROOM_RATE: Final = "rate"  # buyers admitted per second
ROOM_CARRY: Final = "carry"  # state only: the fraction of a buyer left from the last tick
ROOM_ON_SALE_MS: Final = "on_sale_ms"  # state only
ROOM_SOLD_OUT: Final = "sold_out"  # "1" while nothing is left to sell
ROOM_AT: Final = "at"  # Redis ms of the tick
ROOM_DRAWN: Final = "drawn"  # "1" once the early arrivals' draw is final
ROOM_PAUSED: Final = "paused"  # "1" while paused (an update: only a pause's or resume's)
ROOM_CLOSED: Final = "closed"  # "1" once closed for good (an update: only a close's)
ROOM_PERMITS: Final = "permits"  # updates only: JSON buyer → [permission, expires ms]
API_CAPACITY: Final = "ticketry:api:capacity"
ROOM_TTL_S: Final = 7 * 24 * 3600
ROOM_UPDATES_MAXLEN: Final = 10_000
ROOM_ADMITTER_LOCK_MS: Final = 5_000


def room_line(event_id: str) -> str:
    """The event's line: buyer → place score."""
    return f"ticketry:room:{event_id}:line"


def room_seq(event_id: str) -> str:
    """Later arrivals so far."""
    return f"ticketry:room:{event_id}:seq"


def room_ids(event_id: str) -> str:
    """Buyer → queue id."""
    return f"ticketry:room:{event_id}:ids"


def queue_place(queue_id: str) -> str:
    """A place by its queue id: event and buyer."""
    return f"ticketry:queue:{queue_id}"


def room_state(event_id: str) -> str:
    """Admitted count, rate, sold-out flag of the room."""
    return f"ticketry:room:{event_id}:state"


def room_permits(event_id: str) -> str:
    """Buyer → the permission issued to them."""
    return f"ticketry:room:{event_id}:permits"


def room_pending(event_id: str) -> str:
    """Buyer → a permission issued and not yet announced (not yet on a replica)."""
    return f"ticketry:room:{event_id}:pending"


def room_outstanding(event_id: str) -> str:
    """Permissions not yet used: buyer → expiry (ms)."""
    return f"ticketry:room:{event_id}:outstanding"


def room_used(event_id: str) -> str:
    """Permissions used by accepted orders."""
    return f"ticketry:room:{event_id}:used"


def room_updates(event_id: str) -> str:
    """The room's admission ticks, for the notifiers."""
    return f"ticketry:room:{event_id}:updates"


def room_admitter(event_id: str) -> str:
    """Lock of the api process admitting for the room."""
    return f"ticketry:room:{event_id}:admitter"
