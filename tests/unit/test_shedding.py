"""The in-flight bound of POST /v1/orders (ticketry_api.middleware.shedding): slots, the
FIFO queue, shedding, and the capacity meter, on a clock the test moves."""

from __future__ import annotations

import asyncio

import pytest
from ticketry_api.middleware.shedding import CapacityMeter, Shed, Shedding


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        # (completions, saturated) per whole second → capacity after them
        ([], 50.0),
        ([(80, False)], 80.0),  # an idle-ish second shows "at least 80"
        ([(30, False)], 50.0),  # ... and never lowers the estimate
        ([(30, True)], 40.0),  # a saturated second is what it sustains (EWMA 0.5)
        ([(30, True), (30, True), (30, True)], 32.5),
        ([(200, False), (100, True)], 150.0),
    ],
)
def test_capacity_meter(seconds: list[tuple[int, bool]], expected: float) -> None:
    meter = CapacityMeter(initial=50.0)
    t = 100.0
    for done, saturated in seconds:
        if saturated:
            meter.saturated(t)
        for i in range(done):
            meter.completed(t + i / (done + 1))
        t += 1.0
    assert meter.rate(t) == pytest.approx(expected)


async def test_slots_then_queue_in_order_then_shed() -> None:
    clock = Clock()
    adm = Shedding(2, max_queued=2, queue_s=10.0, initial_rate=1.0, clock=clock)
    # Given two orders in flight (the bound)
    await adm.enter()
    await adm.enter()
    # When two more arrive they wait, in order; the fifth is shed at once
    order: list[int] = []

    async def queued(i: int) -> None:
        await adm.enter()
        order.append(i)

    waiting = [asyncio.create_task(queued(i)) for i in (1, 2)]
    await asyncio.sleep(0)
    assert len(adm.waiters) == 2
    with pytest.raises(Shed) as shed:
        await adm.enter()
    assert shed.value.retry_after_s >= 1
    # Then each slot given back goes to the first waiter
    adm.leave(accepted=True)
    await waiting[0]
    assert order == [1] and adm.inflight == 2
    adm.leave(accepted=True)
    await waiting[1]
    assert order == [1, 2] and adm.inflight == 2
    adm.leave(accepted=False)
    adm.leave(accepted=False)
    assert adm.inflight == 0 and adm.accepted == 2 and adm.shed == 1


async def test_queue_only_while_the_expected_wait_fits() -> None:
    # At 1 order/s and 2 s of queue, the third waiter would wait 3 s: shed.
    adm = Shedding(1, max_queued=100, queue_s=2.0, initial_rate=1.0, clock=Clock())
    await adm.enter()
    waiting = [asyncio.create_task(adm.enter()) for _ in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(Shed) as shed:
        await adm.enter()
    assert shed.value.retry_after_s == 3  # three ahead at 1/s
    for _ in range(3):
        adm.leave(accepted=True)
        await asyncio.sleep(0)
    await asyncio.gather(*waiting)
    assert adm.inflight == 0


async def test_no_queue_sheds_past_the_bound() -> None:
    adm = Shedding(1, max_queued=0, queue_s=2.0, clock=Clock())
    await adm.enter()
    with pytest.raises(Shed):
        await adm.enter()
    adm.leave(accepted=True)
    await adm.enter()  # the slot is free again
    adm.leave(accepted=True)


async def test_a_cancelled_waiter_gives_its_place_up() -> None:
    adm = Shedding(1, max_queued=5, queue_s=100.0, clock=Clock())
    await adm.enter()
    first = asyncio.create_task(adm.enter())
    second = asyncio.create_task(adm.enter())
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    adm.leave(accepted=True)
    await second  # the slot skipped the cancelled waiter
    adm.leave(accepted=True)
    assert adm.inflight == 0 and not adm.waiters


async def test_a_waiter_whose_slot_never_comes_is_shed_not_failed() -> None:
    # Given the one slot held for good and a queue that promises a short wait
    adm = Shedding(1, max_queued=5, queue_s=0.1, initial_rate=100.0)
    await adm.enter()
    # When a waiter's bound (1.5 x the promise + 0.5 s) passes, it gets Shed (a 503), nothing else
    with pytest.raises(Shed):
        await adm.enter()
    assert not adm.waiters and adm.shed == 1 and adm.inflight == 1


async def test_waiters_the_measured_rate_cannot_serve_in_time_are_shed_at_once() -> None:
    # Given 20 waiters queued at a measured 4 orders/s (each promised at most 5 s)
    adm = Shedding(1, max_queued=100, queue_s=5.0, initial_rate=4.0, clock=Clock())
    await adm.enter()
    waiting = [asyncio.create_task(adm.enter()) for _ in range(20)]
    await asyncio.sleep(0)
    assert len(adm.waiters) == 20
    # When the rate turns out to be 1/s: a waiter's bound (1.5 x 5 s + 0.5 s) holds 8 of them
    adm.meter.capacity = 1.0
    adm.leave(accepted=True)
    # Then the first waiter has the slot, the next 8 still wait, the newest 11 are shed at once
    assert adm.shed == 11 and len(adm.waiters) == 8
    for _ in range(9):  # the slot, then the 8, served in turn
        adm.leave(accepted=True)
    done = await asyncio.gather(*waiting, return_exceptions=True)
    assert all(d is None for d in done[:9]) and all(isinstance(d, Shed) for d in done[9:])
    assert adm.inflight == 0
