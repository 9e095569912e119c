"""``ticketryctl``: operator commands.

``ticketryctl dlq list [--json]``
    Every dead letter: id, source lane, order, ticket, reason, attempt history.
``ticketryctl dlq redrive (--all | ID...)``
    Put dead letters back on their lane, exactly-once in effect.
``ticketryctl keys rotate``
    New check-in code signing key, made active; issued codes keep verifying.

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
listed until deleted with ``XDEL``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any

import orjson
from pydantic_settings import BaseSettings, SettingsConfigDict
from redis.asyncio import Redis
from ticketry import streams
from ticketry.db import connect_redis, entries_of
from ticketry.events import DecodeError, decode_render_request

# KEYS: 1 dead letters, 2 lane, 3 order done set, 4 order progress hash
# ARGV: 1 dead-letter id, 2 ticket id, 3.. field/value pairs of the request
_REDRIVE_LUA = """
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return false end
if redis.call('SREM', KEYS[3], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[4], 'failed', -1)
  redis.call('HDEL', KEYS[4], 'completed')
end
local f = {}
for i = 3, #ARGV do f[#f + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[2], '*', unpack(f))
redis.call('XDEL', KEYS[1], ARGV[1])
return id
"""


class CtlSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TICKETRY_", extra="ignore")
    redis_url: str = "redis://127.0.0.1:6379/0"


def _s(v: bytes | str | None) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else (v or "")


def describe(entry_id: bytes | str, fields: dict[bytes, bytes]) -> dict[str, Any]:
    """One dead letter as a plain dict (what ``dlq list`` prints)."""
    out: dict[str, Any] = {
        "id": _s(entry_id),
        "source": _s(fields.get(b"dlq_source")),
        "reason": _s(fields.get(b"dlq_reason")),
        "history": orjson.loads(fields.get(b"dlq_history", b"[]")),
        "source_entry": _s(fields.get(b"dlq_entry")),
        "consumer": _s(fields.get(b"dlq_consumer")),
        "at": _s(fields.get(b"dlq_at")),
    }
    try:
        req = decode_render_request(fields)
        out |= {"order_id": req.order_id, "ticket_id": req.ticket_id, "redrivable": True}
    except DecodeError:
        out |= {"order_id": None, "ticket_id": None, "redrivable": False}
    return out


async def list_dead_letters(redis: Redis) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    start = "-"
    while True:
        chunk = entries_of(await redis.xrange(streams.DEAD_LETTERS, min=start, max="+", count=500))
        if not chunk:
            return out
        out += [describe(eid, f) for eid, f in chunk]
        start = "(" + _s(chunk[-1][0])


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
        lane = _s(fields.get(b"dlq_source"))
        if lane not in streams.RENDER_LANES:
            lane = streams.render_lane(req.lane, req.total)
        payload: list[bytes | str] = []
        for k, v in fields.items():
            if not k.startswith(b"dlq_"):
                payload += [k, v]
        new_id = await script(
            keys=[
                streams.DEAD_LETTERS,
                lane,
                streams.order_done(req.order_id),
                streams.order_progress(req.order_id),
            ],
            args=[dlq_id, req.ticket_id, *payload],
        )
        result[dlq_id] = f"re-driven to {lane} as {_s(new_id)}" if new_id else "not found (already re-driven?)"
    return result


async def _main(args: argparse.Namespace) -> int:
    redis = connect_redis(CtlSettings().redis_url)
    try:
        if args.cmd == "list":
            items = await list_dead_letters(redis)
            if args.json:
                sys.stdout.write(orjson.dumps(items, option=orjson.OPT_INDENT_2).decode() + "\n")
            else:
                for it in items:
                    sys.stdout.write(
                        f"{it['id']}  {it['source']}  order={it['order_id']}  ticket={it['ticket_id']}  "
                        f"attempts={len(it['history'])}  reason={it['reason']}\n"
                    )
                sys.stdout.write(f"{len(items)} dead letter(s)\n")
            return 0
        ids = [it["id"] for it in await list_dead_letters(redis)] if args.all else list(args.ids)
        if not ids:
            sys.stderr.write("nothing to re-drive (give IDs or --all)\n")
            return 2
        failed = 0
        for dlq_id, outcome in (await redrive(redis, ids)).items():
            sys.stdout.write(f"{dlq_id}: {outcome}\n")
            failed += not outcome.startswith("re-driven")
        return 1 if failed else 0
    finally:
        await redis.aclose()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ticketryctl", description="Ticketry operator commands")
    sub = p.add_subparsers(dest="area", required=True)
    dlq = sub.add_parser("dlq", help="dead letters").add_subparsers(dest="cmd", required=True)
    ls = dlq.add_parser("list", help="list dead letters")
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    rd = dlq.add_parser("redrive", help="put dead letters back on their lane (exactly-once in effect)")
    g = rd.add_mutually_exclusive_group(required=True)
    g.add_argument("--all", action="store_true", help="every dead letter")
    g.add_argument("ids", nargs="*", default=[], metavar="ID", help="dead-letter ids")
    keys = sub.add_parser("keys", help="check-in code signing keys").add_subparsers(dest="cmd", required=True)
    keys.add_parser("rotate", help="create a new signing key and make it active (old codes keep verifying)")
    return p


def rotate_keys() -> int:
    """``ticketryctl keys rotate``: the CLI twin of ``POST /v1/checkins/keys/rotate``."""
    from ticketry.codes import rotate_key

    from ticketry_api.config import ApiSettings

    kid = rotate_key(ApiSettings().keys_dir)
    sys.stdout.write(f"active signing key: {kid}\n")
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.area == "keys":
        raise SystemExit(rotate_keys())
    raise SystemExit(asyncio.run(_main(args)))
