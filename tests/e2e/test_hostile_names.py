"""Holder names as an attack, on the real stack: orders of thousands of
distinct names, each to be shaped, do not stall the api for everyone else, and
each counts against its buyer's rate limit whatever its answer."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from redis.asyncio import Redis
from ticketry import streams
from ticketry.replies import as_text
from ticketry_devstack.procs import Stack

from tests.conftest import TokenFactory, stack_of_its_own
from tests.helpers import bearer, create_event, eventually, place_order, wait_rendered

pytestmark = pytest.mark.e2e

ATTACKER = "hostile-names-attacker"
ORDERS_PER_WINDOW = 6  # the attacker's rate limit in this stack
HEAVY = 4  # heavy orders sent at once
QUANTITY = 10_000  # tickets per attack order, one distinct name each
UNDRAWABLE = "Runes ᚠᚢᚦ"  # Runic: not in the ticket's font chain


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    env = {
        "TICKETRY_RATE_ORDERS_PER_MIN": str(ORDERS_PER_WINDOW),
        "TICKETRY_RATE_TICKETS_PER_MIN": "1000000",  # only the order count limits here
        "TICKETRY_RATE_WINDOW_S": "3600",  # one window for the whole test, however slow the host
        # Every name of a 10,000-name order is checked (the cap is tested on the shared stack),
        # and the budget is far above need: the attack is answered for what the names are.
        "TICKETRY_MAX_DISTINCT_NAMES": str(QUANTITY + 1),  # holders and the buyer's holder_name
        "TICKETRY_NAME_CHECK_BUDGET_S": "60",
    }
    with stack_of_its_own(tmp_path_factory, "hostile-names", 1, env) as s:
        yield s


def distinct_names(tag: str, last: str | None = None) -> list[str]:
    """10,000 distinct names that print, the last one ``last`` if given."""
    names = [f"{tag} holder {i:05d} of a ticket to the night of tests" for i in range(QUANTITY)]
    return [*names[:-1], last] if last is not None else names


async def counted(redis: Redis) -> int:
    raw = await redis.get(streams.rate_limit("orders", ATTACKER))
    return int(raw) if raw is not None else 0


def assert_problem(r: httpx.Response, status: int, title: str) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["status"] == status and r.json()["title"] == title and r.json()["detail"], r.text


async def test_orders_of_thousands_of_hostile_names_stall_nobody_and_are_counted(
    hostile: Stack, token: TokenFactory
) -> None:
    org, attacker, buyer = token("hostile-names-org", "organizer"), token(ATTACKER, "buyer"), token("honest", "buyer")
    redis = Redis.from_url(hostile.env["TICKETRY_REDIS_URL"])
    async with httpx.AsyncClient(base_url=hostile.api_url, timeout=120) as api:
        event = await create_event(api, org, capacity=100)

        # When the attacker sends four orders of 10,000 distinct names at once, the
        # costliest kind: every name prints, so each one is shaped
        heavy = [
            asyncio.create_task(place_order(api, attacker, event["id"], QUANTITY, holders=distinct_names(f"h{k}")))
            for k in range(HEAVY)
        ]
        # And all four have been counted against its rate limit (so their names are being checked now)
        await eventually(lambda: _at_least(redis, HEAVY), "the heavy orders are counted")

        # Then meanwhile the api answers its probes and accepts another buyer's order
        healthz = await api.get("/healthz")
        readyz = await api.get("/readyz")
        honest = await place_order(api, buyer, event["id"], 1)
        still_checking = sum(not t.done() for t in heavy)
        assert healthz.status_code == 200, healthz.text
        assert readyz.status_code == 200, readyz.text
        assert honest.status_code == 202, honest.text
        assert still_checking >= 1, "the probes were answered only once the attack was over"

        # And each heavy order is refused once its names are checked: the event has 100 tickets
        for r in await asyncio.gather(*heavy):
            assert_problem(r, 409, "sold out")

        # And when it goes on with orders of 10,000 distinct names, one undrawable, at once, each is refused
        undrawable = await asyncio.gather(
            *(
                place_order(api, attacker, event["id"], QUANTITY, holders=distinct_names(f"u{k}", UNDRAWABLE))
                for k in range(ORDERS_PER_WINDOW - HEAVY)
            )
        )
        for r in undrawable:
            assert_problem(r, 422, "name cannot be printed")
            assert "U+16A0" in r.json()["detail"]
        # And once past its limit it is refused before its names are looked at: every 422 counted
        assert await counted(redis) == ORDERS_PER_WINDOW
        r = await place_order(api, attacker, event["id"], QUANTITY, holders=distinct_names("x", UNDRAWABLE))
        assert_problem(r, 429, "too many requests")
        assert int(r.headers["retry-after"]) >= 1

        # And the other buyer's order completes, and only it sold
        await wait_rendered(api, honest.json()["id"], buyer)
        got = await api.get(f"/v1/events/{event['id']}", headers=bearer(org))
        assert got.json()["sold"] == 1
        # And none of the refused orders stays in flight (each was noted before its names were
        # checked, and refused after): the outbox sweep has nothing of the attacker's to give back
        members = [
            streams.parse_in_flight_member(as_text(m)) for m in await redis.zrange(streams.ORDERS_IN_FLIGHT, 0, -1)
        ]
        assert [m for m in members if m[4] == ATTACKER] == []
    await redis.aclose()


async def _at_least(redis: Redis, n: int) -> bool:
    return await counted(redis) >= n


async def test_distinct_names_are_capped_and_repeated_ones_are_not(api: httpx.AsyncClient, token: TokenFactory) -> None:
    # Given an event of one ticket on the shared stack (the default cap: 2,000 distinct names)
    org, buyer = token("names-cap-org", "organizer"), token("names-cap-buyer", "buyer")
    event = await create_event(api, org, capacity=1)

    # When a buyer orders 2,001 tickets with 2,001 distinct names
    r = await place_order(api, buyer, event["id"], 2001, holders=[f"Holder {i:04d}" for i in range(2001)])

    # Then 422 names the cap
    assert_problem(r, 422, "too many names")
    assert "2000" in r.json()["detail"]

    # And 2,001 tickets with two names pass the names (and are only too many for the event)
    r = await place_order(api, buyer, event["id"], 2001, holders=["Ada Lovelace"] * 2000 + ["Grace Hopper"])
    assert_problem(r, 409, "sold out")
