"""Several api processes on one port (``TICKETRY_API_WORKERS``): both serve,
an order placed through either lands once, a scrape answered by either sums
both (a killed worker's counts included), SIGTERM stops them all."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import httpx
import pytest
from ticketry_devstack.procs import Stack

from tests.conftest import TokenFactory, stack_of_its_own
from tests.helpers import bearer, create_event, eventually, metric_one, metric_samples, place_order, wait_rendered

pytestmark = pytest.mark.e2e

WAIT_S = 120  # a bound on a hang, far above need
ORDERS = 12


def workers_of(stack: Stack) -> set[int]:
    """The api supervisor's worker processes (multiprocessing's spawned children;
    its resource tracker is a child too, and is no worker)."""
    popen = stack.procs["api"].popen
    assert popen is not None
    try:
        children = Path(f"/proc/{popen.pid}/task/{popen.pid}/children").read_text().split()
    except OSError:
        return set()
    out = set()
    for child in children:
        try:
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                out.add(int(child))
        except OSError:
            continue
    return out


def gone(pid: int) -> bool:
    """``pid`` exited (a zombie left for a reaper counts as exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


async def scrape(stack: Stack) -> tuple[int, str]:
    """A scrape on a new connection: the pid of the worker that answered it, and its text."""
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=30) as fresh:
        r = await fresh.get("/metrics")
    assert r.status_code == 200, r.text
    (info,) = metric_samples(r.text, "ticketry_api_process_info")
    return int(info.labels["pid"]), r.text


async def serving_pid(stack: Stack) -> int:
    """The pid of the worker that answers a scrape on a new connection."""
    return (await scrape(stack))[0]


async def sums_from_each(stack: Stack, pids: set[int]) -> dict[int, tuple[float, float]]:
    """Scrapes until each of ``pids`` answered one: per worker, the accepted
    orders and the serving processes its answer counted."""
    answered: dict[int, tuple[float, float]] = {}

    async def each_answered() -> bool:
        pid, text = await scrape(stack)
        answered[pid] = (
            metric_one(text, "ticketry_orders_total", outcome="accepted"),
            metric_one(text, "ticketry_api_processes"),
        )
        return pids <= set(answered)

    await eventually(each_answered, f"each of {pids} answering a scrape", WAIT_S, interval_s=0.05)
    return {p: answered[p] for p in pids}


@pytest.mark.timeout(600)
async def test_two_workers_serve_place_once_and_stop_on_sigterm(
    tmp_path_factory: pytest.TempPathFactory, token: TokenFactory
) -> None:
    with stack_of_its_own(tmp_path_factory, "workers", 1, {"TICKETRY_API_WORKERS": "2"}) as stack:

        async def two_workers() -> set[int] | None:
            found = await asyncio.to_thread(workers_of, stack)
            return found if len(found) == 2 else None

        pids: set[int] = await eventually(two_workers, "two api workers", WAIT_S)

        # Both answer: each scrape on a new connection names the process that took it.
        seen: set[int] = set()

        async def both_seen() -> bool:
            seen.add(await serving_pid(stack))
            return seen == pids

        await eventually(both_seen, f"both workers {pids} answering (seen {seen})", WAIT_S, interval_s=0.05)

        # Orders placed on new connections (so through either worker), each
        # replayed with its key: one order per key, every ticket rendered once.
        org, buyer = token("workers-org", "organizer"), token("workers-buyer", "buyer")
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api:
            event = await create_event(api, org, capacity=ORDERS * 2)
        ids = []
        for i in range(ORDERS):
            answers = []
            for _ in range(2):
                async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as fresh:
                    r = await place_order(fresh, buyer, event["id"], 1, idempotency_key=f"workers-{i}")
                assert r.status_code == 202, r.text
                answers.append(r.json()["id"])
            assert answers[0] == answers[1]
            ids.append(answers[0])
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as api:
            listed = (await api.get("/v1/orders", params={"limit": 100}, headers=bearer(buyer))).json()
            assert sorted(o["id"] for o in listed["items"]) == sorted(ids)
            for oid in ids:
                done = await wait_rendered(api, oid, buyer, WAIT_S)
                assert done["status"] == "completed" and done["rendered"] == 1, done
            got = (await api.get(f"/v1/events/{event['id']}", headers=bearer(org))).json()
        assert got["sold"] == ORDERS, got  # each key's ticket counted once

        # Whichever worker answers a scrape counts both workers' answers (each
        # order was answered twice, 202 both times) and both serving processes.
        assert set((await sums_from_each(stack, pids)).values()) == {(2 * ORDERS, 2)}

        # A worker killed outright is replaced; its counts stay in the sums, and
        # it is no longer counted as serving (only the live workers' gauges are summed).
        victim = min(pids)
        os.kill(victim, signal.SIGKILL)

        async def replaced() -> set[int] | None:
            found = await asyncio.to_thread(workers_of, stack)
            return found if len(found) == 2 and victim not in found else None

        pids = await eventually(replaced, f"worker {victim} replaced", WAIT_S)
        assert set((await sums_from_each(stack, pids)).values()) == {(2 * ORDERS, 2)}

        # SIGTERM to the supervisor stops every worker, and the supervisor exits.
        api_proc = stack.procs["api"]
        assert api_proc.popen is not None
        api_proc.signal(signal.SIGTERM)
        assert await asyncio.to_thread(api_proc.popen.wait, WAIT_S) == 0

        async def all_gone() -> bool:
            return all(gone(p) for p in pids)

        await eventually(all_gone, f"workers {pids} gone", WAIT_S)
