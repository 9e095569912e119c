"""Exactly-once final ticket events.

A ticket's final event (``ticket.rendered`` or ``ticket.failed``), its order's
counters, the ``order.completed`` event and the XACK of the request that caused
them are applied by one Lua script, so Redis sees all of it or none of it. The
per-order ``done`` set makes a redelivered or re-driven request a no-op apart
from the ack: a second event that counts twice cannot exist.

A cancelled order (its progress hash has ``cancelled``) gets no further ticket
event: a render that was under way when the order was cancelled is acked and
not announced, so ``order.cancelled`` is the order's last event.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from string import Template
from typing import Any, Literal

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from ticketry import streams
from ticketry.events import COUNTERS, EventType, event_fields
from ticketry.replies import as_text

_PROGRESS = {
    "total": streams.PROGRESS_TOTAL, "rendered": streams.PROGRESS_RENDERED, "failed": streams.PROGRESS_FAILED,
    "order_id": streams.PROGRESS_ORDER_ID, "completed": streams.PROGRESS_COMPLETED,
    "cancelled": streams.PROGRESS_CANCELLED,
}  # fmt: skip

# The scripts write events in the wire format of ``ticketry.events.event_fields``:
# their text is built from that function's own output once, at import, with
# placeholders where a value is only known inside Redis.
_ORDER, _AT = "\x00order\x00", "\x00at\x00"
_SHAPE = event_fields(type="order.completed", event_uuid="", order_id="", ticket_id="", occurred_at=_AT)
_OCCURRED_AT = _SHAPE[_SHAPE.index(_AT) - 1]


def _quote(text: str) -> str:
    """``text`` as a Lua string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _lua_fields(fields: Sequence[str], slots: Mapping[str, str], counters: Sequence[str]) -> str:
    """``fields`` (name/value pairs) followed by the counters, as Lua
    arguments: literals, except that each placeholder in ``slots`` becomes
    its Lua expression and the counters' values are Lua expressions."""
    split = re.compile("(" + "|".join(map(re.escape, slots)) + ")")

    def lua(value: str) -> str:
        parts = [slots[p] if p in slots else _quote(p) for p in split.split(value) if p]
        return " .. ".join(parts) or "''"

    pairs = zip(COUNTERS, counters, strict=True)
    return ", ".join([*map(lua, fields), *(x for name, expr in pairs for x in (_quote(name), expr))])


def _order_event(type: EventType, order_id: str, occurred_at: str, counters: Sequence[str]) -> str:
    """The Lua arguments of an order event (``XADD stream * <these>``): its
    ``order_id`` and ``occurred_at`` are Lua expressions, its uuid ``<kind>:<order id>``."""
    kind = type.removeprefix("order.")
    fields = event_fields(type=type, event_uuid=f"{kind}:{_ORDER}", order_id=_ORDER, ticket_id="", occurred_at=_AT)
    return _lua_fields(fields, {_ORDER: order_id, _AT: occurred_at}, counters)


_COUNTS = ("total", "rendered", "failed")  # the emit script's locals of the counters

# KEYS: 1 ticket-events stream, 2 order done set, 3 order progress hash, 4 source stream,
#       5 dead-letter stream, 6 first-ticket latencies (``streams.FIRST_TICKET``)
# ARGV: 1 group, 2 entry id to ack ('' = none), 3 the done set's member (the
#       ticket id, ``streams.done_member``), 4 counter field ('rendered' |
#       'failed'; '' = a re-issued ticket's render, which counts nothing), 5 ttl
#       seconds, 6 n = how many event field/value arguments follow, 7..6+n the
#       event's, then (optional) the dead letter's field/value pairs: parked only
#       with a fresh final event, so two renderers that both ran out of attempts
#       on one request (a claim race) park it once
# The progress hash's field names come from ``streams`` ($total, $cancelled, …).
_EMIT_LUA = Template("""
if redis.call('HEXISTS', KEYS[3], '$cancelled') == 1 then
  if ARGV[2] ~= '' then redis.call('XACK', KEYS[4], ARGV[1], ARGV[2]) end
  return false
end
local fresh = redis.call('SADD', KEYS[2], ARGV[3])
local ev = false
if fresh == 1 then
  if ARGV[4] ~= '' then redis.call('HINCRBY', KEYS[3], ARGV[4], 1) end
  local p = redis.call('HMGET', KEYS[3], '$total', '$rendered', '$failed', '$order_id')
  local total = tonumber(p[1]) or 0
  local rendered = tonumber(p[2]) or 0
  local failed = tonumber(p[3]) or 0
  local f = {}
  local occurred_at = ''
  local n = tonumber(ARGV[6])
  for i = 7, 6 + n do
    f[#f + 1] = ARGV[i]
    if ARGV[i] == '$occurred_at' and (i - 7) % 2 == 0 then occurred_at = ARGV[i + 1] end
  end
  for _, v in ipairs({$ticket_counters}) do
    f[#f + 1] = v
  end
  ev = redis.call('XADD', KEYS[1], '*', unpack(f))
  if #ARGV > 6 + n then
    redis.call('XADD', KEYS[5], '*', unpack(ARGV, 7 + n, #ARGV))
  end
  if ARGV[4] == '$rendered' and rendered == 1 and failed == 0 and ARGV[2] ~= '' and KEYS[6] then
    -- the order's first ticket: ms from its render request (added when the order was accepted)
    local t = redis.call('TIME')
    local waited = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(string.match(ARGV[2], '^%d+'))
    redis.call('XADD', KEYS[6], 'MAXLEN', '~', $first_maxlen, '*', '$first_ms', math.max(waited, 0))
  end
  if ARGV[4] ~= '' and total > 0 and rendered + failed == total and not redis.call('HGET', KEYS[3], '$completed') then
    local done = redis.call('XADD', KEYS[1], '*', $completed_event)
    redis.call('HSET', KEYS[3], '$completed', done)
  end
  redis.call('EXPIRE', KEYS[2], ARGV[5])
  redis.call('EXPIRE', KEYS[3], ARGV[5])
end
if ARGV[2] ~= '' then
  redis.call('XACK', KEYS[4], ARGV[1], ARGV[2])
end
return ev
""").substitute(
    _PROGRESS,
    occurred_at=_OCCURRED_AT,
    first_maxlen=streams.FIRST_TICKET_MAXLEN,
    first_ms=streams.FIRST_TICKET_MS,
    ticket_counters=_lua_fields([], {}, _COUNTS),
    completed_event=_order_event("order.completed", "(p[4] or '')", "occurred_at", _COUNTS),
)


def queue_final(
    pipe: Pipeline,
    *,
    order_id: str,
    ticket_id: str,
    outcome: Literal["rendered", "failed"],
    fields: list[str],
    source_stream: str = "",
    entry_id: str = "",
    dead_letter: Mapping[str, str | bytes] | None = None,
    ticket_version: int = 0,
) -> None:
    """Queue one final event (and the ack of ``entry_id``) on ``pipe``.

    ``ticket_version``: a re-issued ticket's render, once per version; it
    leaves its order's counters (and completion) as they are.

    ``fields`` come from :func:`ticketry.events.event_fields`; their
    ``occurred_at`` is reused for ``order.completed``. ``dead_letter``: the
    request parked in the dead-letter stream with the event, once.
    """
    keys = [
        streams.TICKET_EVENTS,
        streams.order_done(order_id),
        streams.order_progress(order_id),
        source_stream or streams.RENDER_STD,
        streams.DEAD_LETTERS,
        streams.FIRST_TICKET,
    ]
    parked = [x for k, v in (dead_letter or {}).items() for x in (k, v)]
    args = [
        streams.RENDERERS_GROUP,
        entry_id,
        streams.done_member(ticket_id, ticket_version),
        "" if ticket_version else streams.PROGRESS_RENDERED if outcome == "rendered" else streams.PROGRESS_FAILED,
        str(streams.PROGRESS_TTL_S),
        str(len(fields)),
        *fields,
        *parked,
    ]
    # EVAL with the body, not a registered script's EVALSHA: a pipeline holding
    # registered scripts asks SCRIPT EXISTS first on every execute, one more
    # round trip per batch. Redis caches the compiled body by its digest, and
    # an EVAL cannot meet NOSCRIPT after a Redis restart.
    pipe.eval(_EMIT_LUA, len(keys), *keys, *args)


def emitted(command: Sequence[Any], result: Any) -> Literal["rendered", "failed"] | None:
    """The outcome of a final event that one executed command appended: for
    a :func:`queue_final` script (``command`` as a pipeline's command stack
    holds it) that returned an event id, its outcome; else None (another
    command, or a ticket that already had its event or whose order was
    cancelled)."""
    if result is None or len(command) < 3 or command[0] != "EVAL" or command[1] != _EMIT_LUA:
        return None
    outcome_at = 3 + int(command[2]) + 3  # EVAL, body, numkeys, KEYS…, group, entry id, ticket id, outcome
    if len(command) <= outcome_at:
        return None
    outcome = as_text(command[outcome_at])
    if outcome == streams.PROGRESS_RENDERED:
        return "rendered"
    return "failed" if outcome == streams.PROGRESS_FAILED else None


# KEYS: 1 ticket-events stream, 2 order progress hash, 3 (optional) the buyer's held count
# ARGV: 1 order id, 2 occurred_at, 3 ttl seconds, 4 the order's ticket count
_CANCEL_LUA = Template("""
local p = redis.call('HMGET', KEYS[2], '$cancelled', '$rendered', '$failed')
if p[1] then return p[1] end
if KEYS[3] then redis.call('DECRBY', KEYS[3], ARGV[4]) end
local ev = redis.call('XADD', KEYS[1], '*', $cancelled_event)
redis.call('HSET', KEYS[2], '$cancelled', ev, '$total', ARGV[4])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return ev
""").substitute(
    _PROGRESS,
    cancelled_event=_order_event(
        "order.cancelled", "ARGV[1]", "ARGV[2]", ("ARGV[4]", "tonumber(p[2]) or 0", "tonumber(p[3]) or 0")
    ),
)


async def announce_cancelled(redis: Redis, order_id: str, total: int, held: str | None = None) -> str:
    """Mark an order cancelled for the renderers (its pending requests are
    skipped, its running renders no longer announced) and append its
    ``order.cancelled`` event, once; returns that event's stream id. ``held``:
    the buyer's count of tickets in the order's tier, taken down by ``total``
    with it (once)."""
    keys = [streams.TICKET_EVENTS, streams.order_progress(order_id), *([held] if held else [])]
    args = [order_id, datetime.now(UTC).isoformat(), str(streams.PROGRESS_TTL_S), str(total)]
    got = await redis.eval(_CANCEL_LUA, len(keys), *keys, *args)
    return as_text(got)


async def cancelled_orders(redis: Redis, order_ids: list[str]) -> set[str]:
    """Which of these orders are cancelled (one round trip)."""
    if not order_ids:
        return set()
    async with redis.pipeline(transaction=False) as pipe:
        for order_id in order_ids:
            pipe.hexists(streams.order_progress(order_id), streams.PROGRESS_CANCELLED)
        flags = await pipe.execute()
    return {o for o, f in zip(order_ids, flags, strict=True) if f}
