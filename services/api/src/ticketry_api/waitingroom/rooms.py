"""The waiting room in Redis (keys: ``ticketry.streams``, "the waiting room
of an on-sale"). Scripts carry the rules that must hold under any
concurrency: :data:`_JOIN` gives each buyer one place (early or late by
Redis's own clock) while fewer than the bound wait, :data:`_ADMIT` advances
the admitted count by compare-and-set, only from ``on_sale_at`` on, only
while the room is neither paused nor closed and only over the exact buyers
the admitter signed permissions for, which stay pending until
:data:`_ANNOUNCE` makes them the room's (once a replica holds them);
:data:`_PAUSE` pauses, resumes or closes
a room and tells its sockets in the same step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from string import Template
from typing import Any

import orjson
from redis.asyncio import Redis
from ticketry import streams
from ticketry.replies import as_text

# The scripts' hash and update field names, from ``streams`` ($admitted, $event, …).
_FIELDS = {
    "event": streams.QUEUE_EVENT, "buyer": streams.QUEUE_BUYER, "admitted": streams.ROOM_ADMITTED,
    "rate": streams.ROOM_RATE, "carry": streams.ROOM_CARRY, "on_sale_ms": streams.ROOM_ON_SALE_MS,
    "sold_out": streams.ROOM_SOLD_OUT, "at": streams.ROOM_AT, "drawn": streams.ROOM_DRAWN,
    "paused": streams.ROOM_PAUSED, "permits": streams.ROOM_PERMITS, "closed": streams.ROOM_CLOSED,
    "pending": streams.ROOM_PENDING,
}  # fmt: skip

# KEYS: line, seq, ids, place (of the new id), rooms, state, permits
# ARGV: buyer, on_sale_ms, early score, new queue id, event id, ttl, max waiting
# → {queue id, score, new (0/1), rank, admitted, now ms, rate, sold_out, permit or false, drawn, paused, closed}
# or, for a buyer without a place while max waiting places wait: {'', waiting, rate, now ms}
# or, for a buyer without a place in a closed room: {'', -1, '0', now ms}
_JOIN = Template("""
local qid = redis.call('HGET', KEYS[3], ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local new = 0
local score
local closed = redis.call('HGET', KEYS[6], '$closed') or '0'
if qid then
  score = redis.call('ZSCORE', KEYS[1], ARGV[1])
elseif closed == '1' then
  return {'', -1, '0', now}
else
  local waiting = redis.call('ZCARD', KEYS[1]) - tonumber(redis.call('HGET', KEYS[6], '$admitted') or '0')
  if waiting >= tonumber(ARGV[7]) then
    return {'', waiting, redis.call('HGET', KEYS[6], '$rate') or '0', now}
  end
  new = 1
  qid = ARGV[4]
  if now < tonumber(ARGV[2]) then score = ARGV[3] else score = tostring(1 + redis.call('INCR', KEYS[2])) end
  redis.call('ZADD', KEYS[1], 'NX', score, ARGV[1])
  redis.call('HSET', KEYS[3], ARGV[1], qid)
  redis.call('HSET', KEYS[4], '$event', ARGV[5], '$buyer', ARGV[1])
  redis.call('HSETNX', KEYS[6], '$on_sale_ms', ARGV[2])
  for i = 1, 4 do redis.call('EXPIRE', KEYS[i], ARGV[6]) end
  redis.call('EXPIRE', KEYS[6], ARGV[6])
end
if closed ~= '1' then redis.call('SADD', KEYS[5], ARGV[5]) end
local st = redis.call('HMGET', KEYS[6], '$admitted', '$rate', '$sold_out', '$paused')
local drawn = 0
if now >= tonumber(ARGV[2]) then drawn = 1 end
return {qid, score, new, redis.call('ZRANK', KEYS[1], ARGV[1]), st[1] or '0', now, st[2] or '0', st[3] or '0',
        redis.call('HGET', KEYS[7], ARGV[1]), drawn, st[4] or '0', closed}
""").substitute(_FIELDS)

# KEYS: line, state, pending, outstanding, updates
# ARGV: expected admitted, on_sale ms, rate, carry, sold_out, ttl, maxlen, n, buyers…, values…, expiries…
# → new admitted count (once announced, for a tick that admitted), or -1 (not on sale by Redis's clock),
#   -2 (admitted moved), -3 (line moved), -4 (paused), -5 (closed), -6 (the last tick's permissions not
#   announced yet: :data:`_ANNOUNCE` first)
# A tick that admits nobody publishes its rate at once; one that admits keeps its
# permissions pending (nobody reads them) until :data:`_ANNOUNCE`.
_ADMIT = Template("""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now < tonumber(ARGV[2]) then return -1 end
if redis.call('HGET', KEYS[2], '$paused') == '1' then return -4 end
if redis.call('HGET', KEYS[2], '$closed') == '1' then return -5 end
if redis.call('HEXISTS', KEYS[2], '$pending') == 1 then return -6 end
local cur = tonumber(redis.call('HGET', KEYS[2], '$admitted') or '0')
if cur ~= tonumber(ARGV[1]) then return -2 end
local n = tonumber(ARGV[8])
if n > 0 then
  local got = redis.call('ZRANGE', KEYS[1], cur, cur + n - 1)
  if #got ~= n then return -3 end
  for i = 1, n do
    if got[i] ~= ARGV[8 + i] then return -3 end
  end
  for i = 1, n do
    redis.call('HSET', KEYS[3], got[i], ARGV[8 + n + i])
    redis.call('ZADD', KEYS[4], ARGV[8 + 2 * n + i], got[i])
  end
  redis.call('HSET', KEYS[2], '$pending', cur + n, '$rate', ARGV[3], '$carry', ARGV[4], '$sold_out', ARGV[5],
             '$at', now, '$drawn', 1)
else
  redis.call('HSET', KEYS[2], '$rate', ARGV[3], '$carry', ARGV[4], '$sold_out', ARGV[5], '$at', now, '$drawn', 1)
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[7], '*', '$admitted', cur, '$rate', ARGV[3], '$at', now,
             '$sold_out', ARGV[5], '$drawn', 1, '$permits', '{}')
end
for i = 1, 5 do redis.call('EXPIRE', KEYS[i], ARGV[6]) end
return cur + n
""").substitute(_FIELDS)

# KEYS: state, pending, permits, updates; ARGV: ttl, maxlen → permissions announced, or -1 (none pending)
# The pending permissions become the room's (the gate, a buyer's poll and a
# socket's first message read them there) and go out on the updates stream,
# and ``admitted`` takes the pending count: one step, after a replica holds them.
_ANNOUNCE = Template("""
local target = redis.call('HGET', KEYS[1], '$pending')
if not target then return -1 end
local flat = redis.call('HGETALL', KEYS[2])
local body = {}
for i = 1, #flat, 2 do
  redis.call('HSET', KEYS[3], flat[i], flat[i + 1])
  local sp = string.find(flat[i + 1], ' ', 1, true)
  body[flat[i]] = {string.sub(flat[i + 1], 1, sp - 1), tonumber(string.sub(flat[i + 1], sp + 1))}
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], '$admitted', target)
redis.call('HDEL', KEYS[1], '$pending')
local st = redis.call('HMGET', KEYS[1], '$rate', '$at', '$sold_out')
local permits = '{}'
if #flat > 0 then permits = cjson.encode(body) end
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[2], '*', '$admitted', target, '$rate', st[1] or '0',
           '$at', st[2] or '0', '$sold_out', st[3] or '0', '$drawn', 1, '$permits', permits)
redis.call('EXPIRE', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[3], ARGV[1])
redis.call('EXPIRE', KEYS[4], ARGV[1])
return #flat / 2
""").substitute(_FIELDS)

# KEYS: state, line, updates, rooms
# ARGV: paused (0/1), event id, ttl, maxlen, close (0/1) → {admitted, places in the line, closed (0/1)}
# The update carries the room's state as it is (absolute values, as every tick):
# each socket of the room shows the paused flag with its position at once, or
# hears that the room is closed. A closed room stays closed: a pause or resume
# of it changes nothing and says so.
_PAUSE = Template("""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local closed = redis.call('HGET', KEYS[1], '$closed') == '1'
if closed then
  return {tonumber(redis.call('HGET', KEYS[1], '$admitted') or '0'), redis.call('ZCARD', KEYS[2]), 1}
end
if ARGV[5] == '1' then
  redis.call('HSET', KEYS[1], '$closed', 1)
else
  redis.call('HSET', KEYS[1], '$paused', ARGV[1])
end
local st = redis.call('HMGET', KEYS[1], '$admitted', '$rate', '$sold_out', '$drawn', '$on_sale_ms',
                     '$paused')
local drawn = st[4] or '0'
if drawn ~= '1' and st[5] and now >= tonumber(st[5]) then drawn = '1' end
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[4], '*', '$admitted', st[1] or '0', '$rate', st[2] or '0',
           '$at', now, '$sold_out', st[3] or '0', '$drawn', drawn, '$permits', '{}', '$paused', st[6] or '0',
           '$closed', ARGV[5])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[3], ARGV[3])
if ARGV[5] == '1' then
  redis.call('SREM', KEYS[4], ARGV[2])
elseif ARGV[1] == '0' then
  redis.call('SADD', KEYS[4], ARGV[2])
end
return {tonumber(st[1] or '0'), redis.call('ZCARD', KEYS[2]), tonumber(ARGV[5])}
""").substitute(_FIELDS)

# KEYS: lock; ARGV: holder, ttl ms → 1 if held by holder now
_LOCK = """
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if cur then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""


@dataclass(frozen=True)
class Full:
    """No place was made: ``waiting`` places wait, the bound (the buyer has none)."""

    waiting: int
    rate: float
    now_ms: int


@dataclass(frozen=True)
class Closed:
    """No place was made: the room was closed for good (the buyer has none)."""

    now_ms: int


@dataclass(frozen=True)
class Joined:
    """A buyer's place as the join found or made it."""

    queue_id: str
    score: float
    new: bool
    rank: int
    admitted: int
    now_ms: int
    rate: float
    sold_out: bool
    permit: tuple[str, int] | None  # (permission, expires ms) once admitted
    drawn: bool
    paused: bool = False
    closed: bool = False


def _permit(raw: Any) -> tuple[str, int] | None:
    if not raw:
        return None
    token, _, expires = as_text(raw).partition(" ")
    return token, int(expires)


async def join(
    redis: Redis, event_id: str, buyer: str, *, on_sale_ms: int, early: float, new_id: str, max_waiting: int
) -> Joined | Full | Closed:
    """The buyer's place in the event's line: the one they hold, or a new one
    while fewer than ``max_waiting`` places wait (:class:`Full` otherwise) and
    the room is open (:class:`Closed` otherwise); the count and the insert are
    one script, so a flood never overshoots."""
    keys = [
        streams.room_line(event_id), streams.room_seq(event_id), streams.room_ids(event_id),
        streams.queue_place(new_id), streams.ROOMS, streams.room_state(event_id), streams.room_permits(event_id),
    ]  # fmt: skip
    args: list[str | int] = [buyer, on_sale_ms, repr(early), new_id, event_id, streams.ROOM_TTL_S, max_waiting]
    r: list[Any] = await redis.register_script(_JOIN)(keys, args)  # EVALSHA
    if not r[0]:
        if int(r[1]) < 0:
            return Closed(now_ms=int(r[3]))
        return Full(waiting=int(r[1]), rate=float(as_text(r[2])), now_ms=int(r[3]))
    return Joined(
        queue_id=as_text(r[0]), score=float(as_text(r[1])), new=bool(r[2]), rank=int(r[3]),
        admitted=int(as_text(r[4])), now_ms=int(r[5]), rate=float(as_text(r[6])), sold_out=as_text(r[7]) == "1",
        permit=_permit(r[8]), drawn=bool(r[9]), paused=as_text(r[10]) == "1", closed=as_text(r[11]) == "1",
    )  # fmt: skip


async def place_holder(redis: Redis, queue_id: str) -> tuple[str, str] | None:
    """``(event id, buyer)`` of a place by its queue id (None: no such place)."""
    got = await redis.hmget(streams.queue_place(queue_id), [streams.QUEUE_EVENT, streams.QUEUE_BUYER])
    if got[0] is None or got[1] is None:
        return None
    return as_text(got[0]), as_text(got[1])


@dataclass(frozen=True)
class RoomState:
    """One tick's reading of a room."""

    admitted: int
    rate: float
    carry: float
    sold_out: bool
    line: int  # places in the line
    outstanding: int  # permissions not used nor expired
    used: int  # permissions used so far
    paused: bool = False
    closed: bool = False
    pending: bool = False  # the last tick's permissions are not announced yet

    @property
    def waiting(self) -> int:
        return max(self.line - self.admitted, 0)


async def read_state(redis: Redis, event_id: str, now_ms: int) -> RoomState:
    """The room as the admitter sees it (expired permissions pruned first)."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hmget(
            streams.room_state(event_id),
            [
                streams.ROOM_ADMITTED, streams.ROOM_RATE, streams.ROOM_CARRY, streams.ROOM_SOLD_OUT,
                streams.ROOM_PAUSED, streams.ROOM_CLOSED, streams.ROOM_PENDING,
            ],
        )  # fmt: skip
        pipe.zcard(streams.room_line(event_id))
        pipe.zremrangebyscore(streams.room_outstanding(event_id), "-inf", now_ms)
        pipe.zcard(streams.room_outstanding(event_id))
        pipe.get(streams.room_used(event_id))
        st, line, _, outstanding, used = await pipe.execute()
    admitted, rate, carry, sold_out, paused, closed, pending = (as_text(v) if v is not None else None for v in st)
    return RoomState(
        admitted=int(admitted or 0), rate=float(rate or 0), carry=float(carry or 0), sold_out=sold_out == "1",
        line=int(line), outstanding=int(outstanding), used=int(used or 0), paused=paused == "1",
        closed=closed == "1", pending=pending is not None,
    )  # fmt: skip


async def next_in_line(redis: Redis, event_id: str, admitted: int, n: int) -> list[tuple[str, str]]:
    """``(buyer, queue id)`` of the ``n`` places after the first ``admitted``."""
    if n <= 0:
        return []
    buyers = [as_text(b) for b in await redis.zrange(streams.room_line(event_id), admitted, admitted + n - 1)]
    ids = await redis.hmget(streams.room_ids(event_id), buyers) if buyers else []
    return [(b, as_text(q) if q is not None else "") for b, q in zip(buyers, ids, strict=True)]


async def admit(
    redis: Redis,
    event_id: str,
    *,
    expected: int,
    on_sale_ms: int,
    rate: float,
    carry: float,
    sold_out: bool,
    permits: Sequence[tuple[str, str, int]],  # (buyer, permission, expires ms)
) -> int:
    """Admit ``permits``' buyers (the next in line), their permissions pending
    until :func:`announce`; the admitted count it leads to, or a negative
    refusal (see :data:`_ADMIT`)."""
    keys = [
        streams.room_line(event_id), streams.room_state(event_id), streams.room_pending(event_id),
        streams.room_outstanding(event_id), streams.room_updates(event_id),
    ]  # fmt: skip
    args: list[str | int] = [
        expected, on_sale_ms, f"{rate:.3f}", f"{carry:.4f}", int(sold_out), streams.ROOM_TTL_S,
        streams.ROOM_UPDATES_MAXLEN, len(permits),
        *(b for b, _, _ in permits), *(f"{p} {e}" for _, p, e in permits), *(e for _, _, e in permits),
    ]  # fmt: skip
    return int(await redis.register_script(_ADMIT)(keys, args))


async def announce(redis: Redis, event_id: str) -> int:
    """Make the pending permissions the room's and publish them (call once a
    replica holds them); how many, or -1 when none were pending."""
    keys = [
        streams.room_state(event_id), streams.room_pending(event_id), streams.room_permits(event_id),
        streams.room_updates(event_id),
    ]  # fmt: skip
    return int(await redis.register_script(_ANNOUNCE)(keys, [streams.ROOM_TTL_S, streams.ROOM_UPDATES_MAXLEN]))


@dataclass(frozen=True)
class Paused:
    """A room as a pause, a resume or a close left it (``closed``: for good,
    whatever was asked)."""

    paused: bool
    admitted: int
    line: int
    closed: bool = False

    @property
    def waiting(self) -> int:
        return max(self.line - self.admitted, 0)


async def set_paused(redis: Redis, event_id: str, paused: bool) -> Paused:
    """Pause (nobody admitted, every place kept) or resume the room's admission,
    and publish it to its sockets; a resumed room is ticked again. A closed
    room stays as it is."""
    return await _set_admission(redis, event_id, paused=paused, close=False)


async def close_for_good(redis: Redis, event_id: str) -> Paused:
    """Close the room: no new place, nobody more admitted (permissions already
    out stay good until they expire), every socket told; it cannot reopen."""
    return await _set_admission(redis, event_id, paused=False, close=True)


async def _set_admission(redis: Redis, event_id: str, *, paused: bool, close: bool) -> Paused:
    keys = [streams.room_state(event_id), streams.room_line(event_id), streams.room_updates(event_id), streams.ROOMS]
    args: list[str | int] = [int(paused), event_id, streams.ROOM_TTL_S, streams.ROOM_UPDATES_MAXLEN, int(close)]
    r: list[Any] = await redis.register_script(_PAUSE)(keys, args)
    closed = bool(r[2])
    return Paused(paused=paused and not closed, admitted=int(r[0]), line=int(r[1]), closed=closed)


async def hold_lock(redis: Redis, event_id: str, holder: str) -> bool:
    """Take or renew the room's admitter lock; True while ``holder`` has it."""
    got = await redis.register_script(_LOCK)([streams.room_admitter(event_id)], [holder, streams.ROOM_ADMITTER_LOCK_MS])
    return bool(got)


async def claim(redis: Redis, event_id: str, buyer: str) -> bool:
    """Take the buyer's unused permission for one order (True: this call has it)."""
    return bool(await redis.zrem(streams.room_outstanding(event_id), buyer))


async def give_back(redis: Redis, event_id: str, buyer: str, expires_ms: int) -> None:
    """The order was not accepted: the permission may be used again until it expires."""
    await redis.zadd(streams.room_outstanding(event_id), {buyer: expires_ms}, nx=True)


async def used(redis: Redis, event_id: str) -> None:
    """Count one permission used by an accepted order (the admission rate reads it)."""
    await redis.incr(streams.room_used(event_id))


async def report_capacity(redis: Redis, consumer: str, capacity: float, shed_per_s: float, now_ms: int) -> None:
    """This api process's measured order rate and shedding, for the admitters."""
    body = orjson.dumps({"capacity": round(capacity, 2), "shed_per_s": round(shed_per_s, 2), "at": now_ms})
    await redis.hset(streams.API_CAPACITY, consumer, body)


async def api_capacity(redis: Redis, now_ms: int, fresh_ms: int) -> tuple[float, float]:
    """``(orders/s, shed/s)`` summed over the api processes that reported
    within ``fresh_ms``; entries a minute old are deleted."""
    raw = await redis.hgetall(streams.API_CAPACITY)
    capacity = shed = 0.0
    stale: list[str] = []
    for consumer, value in raw.items():
        try:
            v = orjson.loads(value)
            at, cap, sh = int(v["at"]), float(v["capacity"]), float(v["shed_per_s"])
        except (ValueError, KeyError, TypeError):
            stale.append(as_text(consumer))
            continue
        if now_ms - at <= fresh_ms:
            capacity += cap
            shed += sh
        elif now_ms - at > 60_000:
            stale.append(as_text(consumer))
    if stale:
        await redis.hdel(streams.API_CAPACITY, *stale)
    return capacity, shed


async def stop_ticking(redis: Redis, event_id: str) -> None:
    """Nothing left to admit: the admitters stop ticking it (a new join puts it back)."""
    await redis.srem(streams.ROOMS, event_id)


async def tickets_back(redis: Redis, event_id: str) -> None:
    """Tickets came back to the event (a cancel, a reservation given back): the
    admitters tick its room again, if it has one still open, so the places
    told it was sold out move on (the next tick clears ``sold_out``)."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.exists(streams.room_state(event_id))
        pipe.hget(streams.room_state(event_id), streams.ROOM_CLOSED)
        exists, closed = await pipe.execute()
    if exists and closed != b"1":
        await redis.sadd(streams.ROOMS, event_id)


async def rooms(redis: Redis) -> list[str]:
    return sorted(as_text(e) for e in await redis.smembers(streams.ROOMS))
