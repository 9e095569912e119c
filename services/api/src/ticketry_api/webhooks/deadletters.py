"""Dead-lettered webhook deliveries: what the sender writes, what operators
list, re-drive and delete (``ticketryctl webhooks …``).

A re-drive is one Lua script: if the dead letter is still there, its delivery
goes back on the deliveries stream as attempt 1 of a fresh run (same
``webhook-id``, same body: the shop dedupes) and the dead letter is deleted;
a second or concurrent re-drive of the same id finds nothing and does nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from redis.asyncio import Redis
from ticketry import streams
from ticketry.db import entries_of, read_all
from ticketry.events import DecodeError
from ticketry.replies import as_text

from ticketry_api.webhooks.models import Delivery

# KEYS: 1 dead letters, 2 deliveries. ARGV: 1 dead-letter id, 2.. field/value pairs.
_REDRIVE_LUA = """
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return false end
local f = {}
for i = 2, #ARGV do f[#f + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[2], '*', unpack(f))
redis.call('XDEL', KEYS[1], ARGV[1])
return id
"""

REASON, AT, ENTRY = streams.DLQ_REASON, streams.DLQ_AT, streams.DLQ_ENTRY


def dead_fields(fields: dict[str, str], reason: str, entry_id: str) -> dict[str, str]:
    """A dead letter's fields: the delivery's and why it died."""
    return {**fields, REASON: reason[:500], AT: datetime.now(UTC).isoformat(), ENTRY: entry_id}


def describe(entry_id: bytes | str, fields: dict[bytes, bytes]) -> dict[str, Any]:
    """One dead letter as a plain dict (what ``ticketryctl webhooks dead`` prints)."""
    text = {as_text(k): as_text(v) for k, v in fields.items()}
    out: dict[str, Any] = {"id": as_text(entry_id), "reason": text.get(REASON, ""), "at": text.get(AT, "")}
    try:
        d = Delivery.from_fields(fields)
    except DecodeError:
        own = {k: v for k, v in text.items() if not k.startswith(streams.DLQ_PREFIX)}
        return out | {"redrivable": False, "fields": own}
    return out | {
        "redrivable": True, "endpoint_id": d.endpoint_id, "webhook_id": d.msg_id, "type": d.type,
        "order_id": d.order_id, "event_id": d.event_id, "attempts": d.attempt, "history": list(d.history),
        "body": orjson.loads(d.body) if d.body else None,
    }  # fmt: skip


async def list_dead(redis: Redis) -> list[dict[str, Any]]:
    return [describe(eid, f) for eid, f in await read_all(redis, streams.WEBHOOK_DEAD)]


async def redrive(redis: Redis, ids: Sequence[str]) -> dict[str, str]:
    """Re-drive dead letters; id → what happened."""
    script = redis.register_script(_REDRIVE_LUA)
    result: dict[str, str] = {}
    now = datetime.now(UTC).isoformat()
    for dead_id in ids:
        found = entries_of(await redis.xrange(streams.WEBHOOK_DEAD, min=dead_id, max=dead_id))
        if not found:
            result[dead_id] = "not found (already re-driven?)"
            continue
        try:
            d = Delivery.from_fields(found[0][1])
        except DecodeError as exc:
            result[dead_id] = f"not re-drivable: {exc}"
            continue
        fresh = d.redriven(f"re-driven at {now}")
        args = [dead_id, *(x for kv in fresh.to_fields().items() for x in kv)]
        new_id = await script(keys=[streams.WEBHOOK_DEAD, streams.WEBHOOK_DELIVERIES], args=args)
        result[dead_id] = f"re-driven as {as_text(new_id)}" if new_id else "not found (already re-driven?)"
    return result


async def delete(redis: Redis, ids: Sequence[str]) -> dict[str, str]:
    """Delete dead letters for good; id → what happened."""
    out: dict[str, str] = {}
    for dead_id in ids:
        out[dead_id] = "deleted" if await redis.xdel(streams.WEBHOOK_DEAD, dead_id) else "not found"
    return out
