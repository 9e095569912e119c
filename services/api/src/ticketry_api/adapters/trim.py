"""Stream trimming that never drops work a consumer group still owes.

``XTRIM MINID`` (https://redis.io/docs/latest/commands/xtrim/) removes entries
older than an id. The safe id of a stream is, over all its consumer groups, the
oldest of

* the group's oldest pending entry (delivered, not acknowledged: XPENDING), and
* the entry right after the group's ``last-delivered-id`` (never delivered yet),

and for the ticket-event stream also the start of the notifier's resume window
(``EVENTS_RETENTION_S``: a client reconnecting with ``?after=`` must find its
events). A stream without a group is never trimmed. The whole decision and the
XTRIM run in one Lua script, so no delivery, claim or new group can slip in
between reading the groups and trimming. The dead-letter stream is never
trimmed (an operator re-drives or deletes its entries).
"""

from __future__ import annotations

import logging
from typing import Any

from redis.asyncio import Redis
from ticketry import streams

log = logging.getLogger(__name__)

# KEYS: 1 stream. ARGV: 1 retention ms ('' = none), 2 '1' for exact trimming, else '~'.
# Returns {minid, entries removed} or false when nothing may be trimmed.
_TRIM_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function older(a, b)
  local am, as = parse(a)
  local bm, bs = parse(b)
  return am < bm or (am == bm and as < bs)
end
local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
if #groups == 0 then return false end
local minid = nil
for _, g in ipairs(groups) do
  local info = {}
  for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
  local safe
  if tonumber(info['pending']) > 0 then
    safe = redis.call('XPENDING', KEYS[1], info['name'])[2]
  else
    local ms, seq = parse(info['last-delivered-id'])
    safe = string.format('%.0f-%.0f', ms, seq + 1)
  end
  if minid == nil or older(safe, minid) then minid = safe end
end
if ARGV[1] ~= '' then
  local t = redis.call('TIME')
  local keep = string.format('%.0f-0', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[1]))
  if older(keep, minid) then minid = keep end
end
local n
if ARGV[2] == '1' then
  n = redis.call('XTRIM', KEYS[1], 'MINID', minid)
else
  n = redis.call('XTRIM', KEYS[1], 'MINID', '~', minid)
end
return {minid, n}
"""


class Trimmer:
    """Registers the script once; :meth:`trim` is safe to run from any number of
    api processes at any time."""

    def __init__(self, redis: Redis) -> None:
        self._script = redis.register_script(_TRIM_LUA)

    async def trim(self, stream: str, *, retention_ms: int | None = None, exact: bool = False) -> int:
        """Trim ``stream`` below its safe id; returns how many entries went."""
        resp: Any = await self._script(
            keys=[stream], args=["" if retention_ms is None else str(retention_ms), "1" if exact else "0"]
        )
        if not resp:
            return 0
        removed = int(resp[1])
        if removed:
            log.info("trimmed stream", extra={"stream": stream, "minid": resp[0], "removed": removed})
        return removed


async def trim_all(redis: Redis, trimmer: Trimmer | None = None) -> int:
    """Trim the render lanes and the ticket-event stream (never the dead letters)."""
    trimmer = trimmer or Trimmer(redis)
    removed = 0
    for lane in streams.RENDER_LANES:
        removed += await trimmer.trim(lane)
    removed += await trimmer.trim(streams.TICKET_EVENTS, retention_ms=streams.EVENTS_RETENTION_S * 1000)
    return removed
