"""The outbox's in-flight members (``streams.in_flight_member``): what the
sweep reads back from one, members of older formats included; and giving an
order up (``orders.give_back``) on a real redis-server: the buyer's held count
goes down once, however many give the same order up at once."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis
from ticketry import streams
from ticketry_api.service_layer import orders

EVENT = "ev_" + "ab" * 10
ORDER = "or_" + "cd" * 10


@pytest.mark.parametrize("owner", ["buyer-1", "alice x", " two  spaces ", "auth0|5f3a"])
def test_a_member_gives_back_what_it_was_made_of(owner: str) -> None:
    member = streams.in_flight_member(ORDER, EVENT, 7, "vip", owner)
    assert streams.parse_in_flight_member(member) == (ORDER, EVENT, 7, "vip", owner)


@pytest.mark.parametrize(
    ("member", "parsed"),
    [
        (f"{ORDER} {EVENT} 3", (ORDER, EVENT, 3, "standard", None)),  # before tiers
        (f"{ORDER} {EVENT} 3 vip", (ORDER, EVENT, 3, "vip", None)),  # before owners
        (streams.in_flight_member(ORDER, EVENT, 3, "vip"), (ORDER, EVENT, 3, "vip", None)),
    ],
)
def test_members_of_older_formats_still_parse(member: str, parsed: tuple[object, ...]) -> None:
    assert streams.parse_in_flight_member(member) == parsed


async def test_an_order_given_up_at_once_by_many_is_taken_off_the_count_once(redis: Redis) -> None:
    # Given a buyer who holds 5 tickets, 2 of them in an order still in flight
    member = streams.in_flight_member(ORDER, EVENT, 2, "vip", "alice x")
    held = streams.held(EVENT, "vip", "alice x")
    await redis.zadd(streams.ORDERS_IN_FLIGHT, {member: 1})
    await redis.set(held, 5)
    # When the request and two sweeps give it up at the same time
    removed = await asyncio.gather(*(orders.give_back(redis, member, held, 2) for _ in range(3)))
    # Then one of them did, and the count went down by the order's 2 only
    assert sorted(removed) == [False, False, True]
    assert int(await redis.get(held) or 0) == 3
    assert await redis.zscore(streams.ORDERS_IN_FLIGHT, member) is None
    # And giving it up again changes nothing
    assert not await orders.give_back(redis, member, held, 2)
    assert int(await redis.get(held) or 0) == 3


async def test_giving_up_leaves_an_expired_count_and_other_orders_alone(redis: Redis) -> None:
    member = streams.in_flight_member(ORDER, EVENT, 2, "vip", "bob")
    other = streams.in_flight_member("or_" + "ef" * 10, EVENT, 1, "vip", "bob")
    held = streams.held(EVENT, "vip", "bob")
    await redis.zadd(streams.ORDERS_IN_FLIGHT, {member: 1, other: 1})
    # A count that expired is not brought back as a negative one without a TTL
    assert await orders.give_back(redis, member, held, 2)
    assert await redis.exists(held) == 0
    # A tier without max_per_buyer has no count: the member goes, nothing else
    assert await orders.give_back(redis, other, None, 1)
    assert await redis.zcard(streams.ORDERS_IN_FLIGHT) == 0
