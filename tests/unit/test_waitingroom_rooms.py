"""The waiting room's Redis scripts against a real redis-server: one place per
buyer under concurrency, early or late by Redis's clock, admission by
compare-and-set over the exact next buyers, one order per permission."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

from redis.asyncio import Redis
from ticketry import streams
from ticketry.ids import new_id
from ticketry_api.core import waitingroom
from ticketry_api.waitingroom import rooms

EVENT = "ev_" + "ab" * 10


def now_ms() -> int:
    return int(time.time() * 1000)


async def join(
    redis: Redis, buyer: str, *, on_sale_ms: int = 0, early: float = 0.5, max_waiting: int = 1_000_000
) -> rooms.Joined:
    """A join that must get a place."""
    got = await rooms.join(
        redis, EVENT, buyer, on_sale_ms=on_sale_ms, early=early, new_id=new_id("qu"), max_waiting=max_waiting
    )
    assert isinstance(got, rooms.Joined), got
    return got


async def test_one_place_per_buyer_however_often_and_at_once(redis: Redis) -> None:
    # Given a sale that has started, when one buyer joins 50 times at once
    got = await asyncio.gather(*(join(redis, "alice") for _ in range(50)))
    # Then it holds one place: one queue id, one member, one new
    assert len({j.queue_id for j in got}) == 1 and sum(j.new for j in got) == 1
    assert await redis.zcard(streams.room_line(EVENT)) == 1
    assert await redis.hgetall(streams.queue_place(got[0].queue_id)) == {b"event": EVENT.encode(), b"buyer": b"alice"}


async def test_early_by_redis_clock_random_then_late_in_order(redis: Redis) -> None:
    future = now_ms() + 3_600_000
    early = [await join(redis, f"e{i}", on_sale_ms=future, early=waitingroom.early_score()) for i in range(20)]
    assert all(j.score < 1 and not j.drawn for j in early)
    # The same line once the sale started (an event whose on_sale_at passed)
    late = await asyncio.gather(*(join(redis, f"l{i}") for i in range(30)))
    assert sorted(j.score for j in late) == [float(1 + n) for n in range(1, 31)]
    assert all(j.drawn for j in late)
    ranks = [j.rank for j in late]
    assert min(ranks) == 20  # every late place behind every early one


async def _line(redis: Redis, n: int) -> list[str]:
    for i in range(n):
        await join(redis, f"b{i}")
    return [f"b{i}" for i in range(n)]


async def test_admission_is_compare_and_set_over_the_next_buyers(redis: Redis) -> None:
    buyers = await _line(redis, 5)
    exp = now_ms() + 60_000

    def permits(names: list[str]) -> list[tuple[str, str, int]]:
        return [(b, f"perm-{b}", exp) for b in names]

    async def admit(expected: int, names: list[str], on_sale_ms: int = 0) -> int:
        return await rooms.admit(
            redis, EVENT, expected=expected, on_sale_ms=on_sale_ms, rate=10.0, carry=0.0, sold_out=False,
            permits=permits(names),
        )  # fmt: skip

    # Not on sale yet by Redis's clock, a stale count, or not the next buyers: refused
    assert await admit(0, buyers[:2], on_sale_ms=now_ms() + 60_000) == -1
    assert await admit(3, buyers[:2]) == -2
    assert await admit(0, buyers[1:3]) == -3
    # The next two: admitted, their permissions pending: nobody can see them yet
    assert await admit(0, buyers[:2]) == 2
    assert await admit(0, buyers[2:3]) == -6  # the next tick waits for them to be announced
    assert await redis.hget(streams.room_permits(EVENT), "b1") is None
    pending = await join(redis, "b0")
    assert pending.admitted == 0 and pending.permit is None
    assert list(await redis.xrange(streams.room_updates(EVENT)) or []) == []
    # Once announced (a replica holds them): the room's, and on the update stream, once
    assert await rooms.announce(redis, EVENT) == 2
    assert await rooms.announce(redis, EVENT) == -1
    assert await admit(0, buyers[2:3]) == -2  # raced
    st = await rooms.read_state(redis, EVENT, now_ms())
    assert (st.admitted, st.outstanding, st.waiting) == (2, 2, 3)
    assert await redis.hget(streams.room_permits(EVENT), "b1") == f"perm-b1 {exp}".encode()
    ticks: list[Any] = list(await redis.xrange(streams.room_updates(EVENT)) or [])
    assert len(ticks) == 1 and ticks[0][1][b"admitted"] == b"2"
    # A join after admission sees its permission
    again = await join(redis, "b0")
    assert again.rank < again.admitted and again.permit == ("perm-b0", exp)


async def test_a_permission_places_one_order(redis: Redis) -> None:
    buyers = await _line(redis, 1)
    exp = now_ms() + 60_000
    assert (
        await rooms.admit(
            redis, EVENT, expected=0, on_sale_ms=0, rate=1.0, carry=0.0, sold_out=False,
            permits=[(buyers[0], "p", exp)],
        )
        == 1
    )  # fmt: skip
    claims = await asyncio.gather(*(rooms.claim(redis, EVENT, buyers[0]) for _ in range(20)))
    assert claims.count(True) == 1
    await rooms.give_back(redis, EVENT, buyers[0], exp)  # that order was not accepted
    assert await rooms.claim(redis, EVENT, buyers[0])
    await rooms.used(redis, EVENT)
    st = await rooms.read_state(redis, EVENT, now_ms())
    assert (st.outstanding, st.used) == (0, 1)


async def test_expired_permissions_are_pruned(redis: Redis) -> None:
    buyers = await _line(redis, 2)
    t = now_ms()
    await rooms.admit(
        redis, EVENT, expected=0, on_sale_ms=0, rate=1.0, carry=0.0, sold_out=False,
        permits=[(buyers[0], "p0", t + 1_000), (buyers[1], "p1", t + 60_000)],
    )  # fmt: skip
    assert (await rooms.read_state(redis, EVENT, t)).outstanding == 2
    assert (await rooms.read_state(redis, EVENT, t + 2_000)).outstanding == 1


async def test_the_admitter_lock_has_one_holder(redis: Redis) -> None:
    got = await asyncio.gather(*(rooms.hold_lock(redis, EVENT, f"api-{i}") for i in range(10)))
    assert got.count(True) == 1
    holder = f"api-{got.index(True)}"
    assert await rooms.hold_lock(redis, EVENT, holder)  # renewed by its holder
    assert not await rooms.hold_lock(redis, EVENT, "api-x")


async def test_a_join_past_the_bound_makes_no_place_however_many_come_at_once(redis: Redis) -> None:
    # Given a room bounded at 10 waiting places, 2 of them admitted
    await _line(redis, 4)
    exp = now_ms() + 60_000
    got = await rooms.admit(
        redis, EVENT, expected=0, on_sale_ms=0, rate=5.0, carry=0.0, sold_out=False,
        permits=[("b0", "p0", exp), ("b1", "p1", exp)],
    )  # fmt: skip
    assert got == 2
    assert await rooms.announce(redis, EVENT) == 2

    # When 50 new buyers join at once
    async def one(i: int) -> rooms.Joined | rooms.Full | rooms.Closed:
        return await rooms.join(redis, EVENT, f"n{i}", on_sale_ms=0, early=0.5, new_id=new_id("qu"), max_waiting=10)

    answers = await asyncio.gather(*(one(i) for i in range(50)))
    # Then exactly 8 get a place (10 waiting: the admitted do not count), the rest none, told how many wait
    placed = [a for a in answers if isinstance(a, rooms.Joined)]
    full = [a for a in answers if isinstance(a, rooms.Full)]
    assert len(placed) == 8 and len(full) == 42
    assert all(f.waiting == 10 and f.rate == 5.0 for f in full)
    assert await redis.zcard(streams.room_line(EVENT)) == 12
    assert (await rooms.read_state(redis, EVENT, now_ms())).waiting == 10
    # And a buyer who holds a place still gets it at the bound; a refused one left nothing behind
    assert (await join(redis, "b3", max_waiting=10)).rank == 3
    assert await redis.hlen(streams.room_ids(EVENT)) == 12
    # And once more are admitted, a place is free again
    nxt = [b for b, _ in await rooms.next_in_line(redis, EVENT, 2, 1)]
    assert await rooms.admit(
        redis, EVENT, expected=2, on_sale_ms=0, rate=5.0, carry=0.0, sold_out=False, permits=[(nxt[0], "p", exp)]
    ) == 3  # fmt: skip
    assert await rooms.announce(redis, EVENT) == 1
    assert (await join(redis, "late", max_waiting=10)).rank == 12


async def _admit(redis: Redis, expected: int, names: list[str], expires_ms: int) -> int:
    """Admit ``names`` (the next in line after ``expected``), each with permission ``p-<name>``,
    and announce them (as the admitter does once a replica holds them)."""
    got = await rooms.admit(
        redis, EVENT, expected=expected, on_sale_ms=0, rate=4.0, carry=0.0, sold_out=False,
        permits=[(b, f"p-{b}", expires_ms) for b in names],
    )  # fmt: skip
    if got > 0:
        assert await rooms.announce(redis, EVENT) == len(names)
    return got


async def test_a_paused_room_admits_nobody_keeps_its_line_and_tells_its_sockets(redis: Redis) -> None:
    # Given a line of 3 on sale, one of them admitted
    buyers = await _line(redis, 3)
    exp = now_ms() + 60_000

    def admit(expected: int, names: list[str]) -> Awaitable[int]:
        return _admit(redis, expected, names, exp)

    assert await admit(0, buyers[:1]) == 1
    await redis.srem(streams.ROOMS, EVENT)  # as if the admitter had closed the room meanwhile

    # When its organiser pauses it
    got = await rooms.set_paused(redis, EVENT, True)
    # Then the answer counts the line, the admission script refuses, and the line and places stay
    assert (got.paused, got.admitted, got.waiting) == (True, 1, 2)
    assert await admit(1, buyers[1:2]) == -4
    st = await rooms.read_state(redis, EVENT, now_ms())
    assert (st.paused, st.admitted, st.waiting) == (True, 1, 2)
    place = await join(redis, buyers[2])
    assert (place.paused, place.rank - place.admitted + 1) == (True, 2)
    # And the room's sockets get one update with the state as it is and the flag
    ticks: list[Any] = list(await redis.xrange(streams.room_updates(EVENT)) or [])
    last = ticks[-1][1]
    assert (last[b"paused"], last[b"admitted"], last[b"rate"], last[b"drawn"]) == (b"1", b"1", b"4.000", b"1")

    # When it is resumed
    got = await rooms.set_paused(redis, EVENT, False)
    # Then admission goes on from where it stopped, and the admitters tick the room again
    assert not got.paused and not (await rooms.read_state(redis, EVENT, now_ms())).paused
    assert await rooms.rooms(redis) == [EVENT]
    assert await admit(1, buyers[1:2]) == 2
    ticks = list(await redis.xrange(streams.room_updates(EVENT)) or [])
    assert [t[1].get(b"paused") for t in ticks[-2:]] == [b"0", None]


async def test_a_closed_room_takes_no_one_admits_no_one_and_stays_closed(redis: Redis) -> None:
    # Given a line of 3 on sale, one of them admitted, the room ticked by the admitters
    buyers = await _line(redis, 3)
    exp = now_ms() + 60_000

    def admit(expected: int, names: list[str]) -> Awaitable[int]:
        return _admit(redis, expected, names, exp)

    assert await admit(0, buyers[:1]) == 1
    assert await rooms.rooms(redis) == [EVENT]

    # When its organiser closes it for good
    got = await rooms.close_for_good(redis, EVENT)
    # Then the answer counts the line, the admitters stop ticking it, and the script refuses
    assert (got.closed, got.paused, got.admitted, got.waiting) == (True, False, 1, 2)
    assert await rooms.rooms(redis) == []
    assert await admit(1, buyers[1:2]) == -5
    assert (await rooms.read_state(redis, EVENT, now_ms())).closed
    # And a new buyer gets no place (nor puts the room back), one with a place is told,
    # and the admitted one keeps their permission
    new = await rooms.join(redis, EVENT, "newcomer", on_sale_ms=0, early=0.5, new_id=new_id("qu"), max_waiting=9)
    assert isinstance(new, rooms.Closed)
    assert await redis.zscore(streams.room_line(EVENT), "newcomer") is None
    assert await rooms.rooms(redis) == []
    waiting = await join(redis, buyers[2])
    assert waiting.closed and waiting.permit is None
    assert (await join(redis, buyers[0])).permit == (f"p-{buyers[0]}", exp)
    # And its sockets hear it in one update
    ticks: list[Any] = list(await redis.xrange(streams.room_updates(EVENT)) or [])
    assert (ticks[-1][1][b"closed"], ticks[-1][1][b"admitted"]) == (b"1", b"1")

    # When it is resumed, paused or closed again: it stays as it is, and nothing is published
    for again in (rooms.set_paused(redis, EVENT, False), rooms.set_paused(redis, EVENT, True)):
        got = await again
        assert (got.closed, got.paused, got.admitted) == (True, False, 1)
    assert (await rooms.close_for_good(redis, EVENT)).closed
    assert await rooms.rooms(redis) == []
    assert len(list(await redis.xrange(streams.room_updates(EVENT)) or [])) == len(ticks)
    assert await admit(1, buyers[1:2]) == -5


async def test_tickets_coming_back_put_an_open_room_back_to_ticking_only(redis: Redis) -> None:
    # Given an event whose room nobody joined: tickets coming back start no admitter
    await rooms.tickets_back(redis, EVENT)
    assert await rooms.rooms(redis) == []
    # Given a room the admitters stopped ticking (sold out): they tick it again
    await _line(redis, 2)
    await rooms.stop_ticking(redis, EVENT)
    await rooms.tickets_back(redis, EVENT)
    assert await rooms.rooms(redis) == [EVENT]
    # Given a room closed for good: it stays out
    await rooms.close_for_good(redis, EVENT)
    await rooms.tickets_back(redis, EVENT)
    assert await rooms.rooms(redis) == []
