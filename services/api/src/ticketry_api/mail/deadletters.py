"""Mails that died (``ticketry:mail:dead``): what operators list, re-drive and
delete (``ticketryctl mail …``).

A re-drive is one Lua script: if the dead letter is still there, its order
goes back in the retry set as a fresh first try, due now, and the dead letter
is deleted; a second or concurrent re-drive of the same id does nothing. An
order that was mailed meanwhile is not mailed again (its marker).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import orjson
from redis.asyncio import Redis
from ticketry import streams
from ticketry.db import read_all
from ticketry.replies import as_text

from ticketry_api.mail.mailer import Job

# KEYS: 1 dead letters, 2 retry set. ARGV: 1 dead-letter id, 2 member, 3 due ms.
_REDRIVE_LUA = """
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return false end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[1])
return 1
"""


def describe(entry_id: bytes | str, fields: dict[bytes, bytes]) -> dict[str, Any]:
    """One dead letter as a plain dict (what ``ticketryctl mail dead`` prints)."""
    text = {as_text(k): as_text(v) for k, v in fields.items()}
    history: list[str] = []
    with contextlib.suppress(orjson.JSONDecodeError):
        history = list(orjson.loads(text.get("history") or "[]"))
    return {
        "id": as_text(entry_id), "order_id": text.get("order", ""), "attempts": int(text.get("attempt") or 0),
        "reason": text.get(streams.DLQ_REASON, ""), "at": text.get(streams.DLQ_AT, ""), "history": history,
    }  # fmt: skip


async def list_dead(redis: Redis) -> list[dict[str, Any]]:
    return [describe(eid, f) for eid, f in await read_all(redis, streams.MAIL_DEAD)]


async def redrive(redis: Redis, ids: Sequence[str]) -> dict[str, str]:
    """Mail dead-lettered orders again (a fresh run of tries); id → what happened."""
    script = redis.register_script(_REDRIVE_LUA)
    dead = {d["id"]: d for d in await list_dead(redis)}
    out: dict[str, str] = {}
    for dead_id in ids:
        d = dead.get(dead_id)
        if d is None or not d["order_id"]:
            out[dead_id] = "not found (already re-driven?)"
            continue
        member = Job(d["order_id"]).member()
        done = await script(keys=[streams.MAIL_DEAD, streams.MAIL_RETRIES], args=[dead_id, member, 0])
        out[dead_id] = "re-driven" if done else "not found (already re-driven?)"
    return out


async def delete(redis: Redis, ids: Sequence[str]) -> dict[str, str]:
    """Delete dead letters for good; id → what happened."""
    return {i: "deleted" if await redis.xdel(streams.MAIL_DEAD, i) else "not found" for i in ids}
