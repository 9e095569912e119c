"""The bookkeeping of "download all" joins (ticketry_api.web.joins)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from ticketry_api.web.joins import JoinGate, Joins, JoinsBusy, PartCache, part_key

from tests.helpers import until


def test_the_gate_bounds_joins_in_all_and_per_order() -> None:
    gate = JoinGate(slots=2, queue=1, per_order=2)
    assert gate.enter("a") is None and gate.enter("a") is None
    assert gate.enter("a") == "this order's downloads already take their share of join slots"
    assert gate.enter("b") is None
    assert gate.enter("c") == "every join slot is taken"
    gate.leave("a")
    assert gate.enter("c") is None
    for order in ("a", "b", "c"):
        gate.leave(order)
    assert gate.entered == 0 and gate.of_order == {}


def test_the_cache_keeps_the_recently_used_within_its_bytes() -> None:
    cache = PartCache(max_bytes=10)
    cache.put("a", b"1234")
    cache.put("b", b"1234")
    assert cache.get("a") == b"1234"  # a is now the most recent
    cache.put("c", b"1234")
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (b"1234", None, b"1234")
    cache.put("huge", b"x" * 11)
    assert cache.get("huge") is None and cache.size == 8


def test_a_part_key_names_its_tickets_in_any_order() -> None:
    assert part_key("o", 0, ["t1", "t2"]) == part_key("o", 0, ["t2", "t1"])
    assert part_key("o", 0, ["t1"]) != part_key("o", 0, ["t1", "t2"])
    assert part_key("o", 0, ["t1"]) != part_key("o", 1, ["t1"])


async def test_identical_downloads_share_one_join_and_others_are_refused_before_reading() -> None:
    joins = Joins(slots=2, queue=0, per_order=1, cache_bytes=1024)
    release = asyncio.Event()
    calls: list[str] = []

    def joiner(name: str) -> Callable[[], Awaitable[bytes]]:
        async def join() -> bytes:
            calls.append(name)
            await release.wait()
            return name.encode()

        return join

    # Given 60 downloads of one part, and one of another order, being joined
    same = [asyncio.create_task(joins.joined("o1", "k1", joiner("k1"))) for _ in range(60)]
    other = asyncio.create_task(joins.joined("o2", "k2", joiner("k2")))
    await until(lambda: sorted(calls) == ["k1", "k2"])
    # Then another part of the first order, and a third order, find no slot:
    # refused without reading anything
    with pytest.raises(JoinsBusy, match="share"):
        await joins.joined("o1", "k3", joiner("k3"))
    with pytest.raises(JoinsBusy, match="every join slot"):
        await joins.joined("o3", "k4", joiner("k4"))
    release.set()
    # And the 60 got one join's answer, which is kept for the next
    assert await asyncio.gather(*same) == [b"k1"] * 60 and await other == b"k2"
    assert await joins.joined("o1", "k1", joiner("again")) == b"k1"
    assert sorted(calls) == ["k1", "k2"]
    assert joins.gate.entered == 0


async def test_a_failed_join_frees_its_slot_and_is_not_kept() -> None:
    joins = Joins(slots=1, queue=0, per_order=1, cache_bytes=1024)

    async def broken() -> bytes:
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        await joins.joined("o1", "k1", broken)

    async def fine() -> bytes:
        return b"pdf"

    assert await joins.joined("o1", "k1", fine) == b"pdf"
    assert joins.gate.entered == 0
