"""The renderers' dead letters (``ticketry:render:dead``): list, show, re-drive,
delete; what ``ticketryctl dlq`` and the console at ``/ops`` both call.

Re-drive. A ticket that was dead-lettered after its last render attempt already
has its final event (``ticket.failed``): it is in the order's ``done`` set and
counted in ``failed``, so a plain re-add would be acked as a no-op by the emit
script. One Lua script (atomic, like MULTI/EXEC, and conditional) therefore

1. does nothing if the dead letter is gone (already re-driven or deleted), so a
   repeated or concurrent re-drive of the same id is a no-op;
2. removes the ticket from the ``done`` set and, only if it was there, moves the
   counters back (``failed`` minus 1) and clears ``completed`` so the order completes
   again when the ticket reaches its new final event;
3. XADDs the original request (fields ``v``/``data``) to its lane and XDELs the
   dead letter.

The renderer then treats it as a fresh request (new entry, fresh attempt
count). If it renders, ``ticket.rendered`` follows; the projector accepts
``failed → rendered`` and takes the order's counters from the newest event, so
the read model shows the ticket rendered and the order ``completed``. If it
fails again it is dead-lettered again, with a new ``ticket.failed``.
Malformed dead letters (no decodable request) cannot be re-driven; they stay
listed until deleted (``dlq delete``).
"""

from __future__ import annotations

from collections.abc import Sequence
from string import Template
from typing import Any

import orjson
from redis.asyncio import Redis
from ticketry import streams
from ticketry.db import entries_of, read_all
from ticketry.events import DecodeError, decode_render_request

# KEYS: 1 dead letters, 2 lane, 3 order done set, 4 order progress hash
# ARGV: 1 dead-letter id, 2 the ticket's done member, 3 "1" if it counted in the order's progress,
#       4.. field/value pairs of the request
_REDRIVE_LUA = Template("""
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return false end
if redis.call('SREM', KEYS[3], ARGV[2]) == 1 and ARGV[3] == '1' then
  redis.call('HINCRBY', KEYS[4], '$failed', -1)
  redis.call('HDEL', KEYS[4], '$completed')
end
local f = {}
for i = 4, #ARGV do f[#f + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[2], '*', unpack(f))
redis.call('XDEL', KEYS[1], ARGV[1])
return id
""").substitute(failed=streams.PROGRESS_FAILED, completed=streams.PROGRESS_COMPLETED)

_DLQ_PREFIX = streams.DLQ_PREFIX.encode()


def _field(fields: dict[bytes, bytes], name: str) -> bytes | None:
    return fields.get(name.encode())


def _s(v: bytes | str | None) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else (v or "")


def describe(entry_id: bytes | str, fields: dict[bytes, bytes]) -> dict[str, Any]:
    """One dead letter as a plain dict (what ``dlq list`` prints)."""
    out: dict[str, Any] = {
        "id": _s(entry_id),
        "source": _s(_field(fields, streams.DLQ_SOURCE)),
        "reason": _s(_field(fields, streams.DLQ_REASON)),
        "history": orjson.loads(_field(fields, streams.DLQ_HISTORY) or b"[]"),
        "source_entry": _s(_field(fields, streams.DLQ_ENTRY)),
        "consumer": _s(_field(fields, streams.DLQ_CONSUMER)),
        "at": _s(_field(fields, streams.DLQ_AT)),
    }
    try:
        req = decode_render_request(fields)
        out |= {"order_id": req.order_id, "ticket_id": req.ticket_id, "redrivable": True}
    except DecodeError:
        out |= {"order_id": None, "ticket_id": None, "redrivable": False}
    return out


async def list_dead_letters(redis: Redis) -> list[dict[str, Any]]:
    return [describe(eid, f) for eid, f in await read_all(redis, streams.DEAD_LETTERS)]


async def show_dead_letter(redis: Redis, dlq_id: str) -> dict[str, Any] | None:
    """One dead letter with its whole request (decoded when it decodes)."""
    found = entries_of(await redis.xrange(streams.DEAD_LETTERS, min=dlq_id, max=dlq_id))
    if not found:
        return None
    fields = found[0][1]
    out = describe(dlq_id, fields)
    try:
        out["request"] = decode_render_request(fields).model_dump(mode="json")
    except DecodeError:
        out["request"] = None
        out["raw"] = {_s(k): _s(v) for k, v in fields.items() if not k.startswith(_DLQ_PREFIX)}
    return out


async def redrive(redis: Redis, ids: Sequence[str]) -> dict[str, str]:
    """Re-drive the given dead letters; id → new lane entry id, or why not."""
    script = redis.register_script(_REDRIVE_LUA)
    result: dict[str, str] = {}
    for dlq_id in ids:
        found = entries_of(await redis.xrange(streams.DEAD_LETTERS, min=dlq_id, max=dlq_id))
        if not found:
            result[dlq_id] = "not found (already re-driven?)"
            continue
        fields = found[0][1]
        try:
            req = decode_render_request(fields)
        except DecodeError as exc:
            result[dlq_id] = f"not re-drivable: {exc}"
            continue
        lane = _s(_field(fields, streams.DLQ_SOURCE))
        if lane not in streams.RENDER_LANES:
            lane = streams.render_lane(req.lane, req.total)
        payload: list[bytes | str] = []
        for k, v in fields.items():
            if not k.startswith(_DLQ_PREFIX):
                payload += [k, v]
        counts = int(not req.ticket_version)
        new_id = await script(
            keys=[
                streams.DEAD_LETTERS,
                lane,
                streams.order_done(req.order_id),
                streams.order_progress(req.order_id),
            ],
            # A re-issue's render has its own done member and never counted in the
            # order's progress: re-driving it moves no counter back.
            args=[dlq_id, streams.done_member(req.ticket_id, req.ticket_version), counts, *payload],
        )
        result[dlq_id] = f"re-driven to {lane} as {_s(new_id)}" if new_id else "not found (already re-driven?)"
    return result


async def delete(redis: Redis, ids: Sequence[str]) -> dict[str, str]:
    """Delete dead letters for good (their tickets stay ``failed``)."""
    return {i: "deleted" if await redis.xdel(streams.DEAD_LETTERS, i) else "not found" for i in ids}
