"""Exactly-once final ticket events.

A ticket's final event (``ticket.rendered`` or ``ticket.failed``), its order's
counters, the ``order.completed`` event and the XACK of the request that caused
them are applied by one Lua script, so Redis sees all of it or none of it. The
per-order ``done`` set makes a redelivered or re-driven request a no-op apart
from the ack: a second event that counts twice cannot exist.
"""

from __future__ import annotations

from typing import Literal

from redis.asyncio.client import Pipeline

from ticketry import streams

# KEYS: 1 ticket-events stream, 2 order done set, 3 order progress hash, 4 source stream
# ARGV: 1 group, 2 entry id to ack ('' = none), 3 ticket id, 4 counter field
#       ('rendered' | 'failed'), 5 ttl seconds, 6.. event field/value pairs
_EMIT_LUA = """
local fresh = redis.call('SADD', KEYS[2], ARGV[3])
local ev = false
if fresh == 1 then
  redis.call('HINCRBY', KEYS[3], ARGV[4], 1)
  local p = redis.call('HMGET', KEYS[3], 'total', 'rendered', 'failed', 'order_id')
  local total = tonumber(p[1]) or 0
  local rendered = tonumber(p[2]) or 0
  local failed = tonumber(p[3]) or 0
  local f = {}
  local occurred_at = ''
  for i = 6, #ARGV do
    f[#f + 1] = ARGV[i]
    if ARGV[i] == 'occurred_at' and i % 2 == 0 then occurred_at = ARGV[i + 1] end
  end
  for _, v in ipairs({'total', total, 'rendered', rendered, 'failed', failed}) do
    f[#f + 1] = v
  end
  ev = redis.call('XADD', KEYS[1], '*', unpack(f))
  if total > 0 and rendered + failed == total and not redis.call('HGET', KEYS[3], 'completed') then
    local done = redis.call('XADD', KEYS[1], '*',
      'type', 'order.completed', 'v', '1', 'event_uuid', 'completed:' .. (p[4] or ''),
      'order_id', p[4] or '', 'ticket_id', '', 'occurred_at', occurred_at,
      'total', total, 'rendered', rendered, 'failed', failed)
    redis.call('HSET', KEYS[3], 'completed', done)
  end
  redis.call('EXPIRE', KEYS[2], ARGV[5])
  redis.call('EXPIRE', KEYS[3], ARGV[5])
end
if ARGV[2] ~= '' then
  redis.call('XACK', KEYS[4], ARGV[1], ARGV[2])
end
return ev
"""


def queue_final(
    pipe: Pipeline,
    *,
    order_id: str,
    ticket_id: str,
    outcome: Literal["rendered", "failed"],
    fields: list[str],
    source_stream: str = "",
    entry_id: str = "",
) -> None:
    """Queue one final event (and the ack of ``entry_id``) on ``pipe``.

    ``fields`` come from :func:`ticketry.events.event_fields`; their
    ``occurred_at`` is reused for ``order.completed``.
    """
    keys = [
        streams.TICKET_EVENTS,
        streams.order_done(order_id),
        streams.order_progress(order_id),
        source_stream or streams.RENDER_STD,
    ]
    args = [
        streams.RENDERERS_GROUP,
        entry_id,
        ticket_id,
        outcome,
        str(streams.PROGRESS_TTL_S),
        *fields,
    ]
    # EVAL with the body, not a registered script's EVALSHA: a pipeline holding
    # registered scripts asks SCRIPT EXISTS first on every execute, one more
    # round trip per batch. Redis caches the compiled body by its digest, and
    # an EVAL cannot meet NOSCRIPT after a Redis restart.
    pipe.eval(_EMIT_LUA, len(keys), *keys, *args)
