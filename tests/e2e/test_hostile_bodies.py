"""Slow request bodies against the real stack: clients that declare a 2 MB
body and trickle it a byte a second, with and without a token, from many
addresses and from one. None of them may hold an order slot: a normal buyer's
order still goes through while they hang on, the ones without a token are
refused before their body is read, one address gets only its share, and the
rest are cut off with 408 at the body deadline."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpx
import orjson
import pytest
from ticketry_devstack.procs import Stack

from tests.conftest import TokenFactory, stack_of_its_own
from tests.helpers import create_event, eventually, metric_sum, place_order, wait_rendered

pytestmark = pytest.mark.e2e

# Far above what the honest order and the checks below take, so that the slow
# clients are certainly still sending while they run; only then do they get 408.
BODY_TIMEOUT_S = 30
PER_CLIENT = 4  # bodies one address may be sending at once
DECLARED = 2_000_000  # under the api's 2 MiB body cap: only its pace is hostile


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    env = {
        "TICKETRY_BODY_READ_TIMEOUT_S": str(BODY_TIMEOUT_S),
        "TICKETRY_MAX_SLOW_BODIES_PER_CLIENT": str(PER_CLIENT),
    }
    with stack_of_its_own(tmp_path_factory, "hostile-bodies", 1, env) as s:
        yield s


@pytest.fixture
async def hapi(hostile: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=hostile.api_url, timeout=60) as client:
        yield client


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: dict[str, object]
    closed: bool  # the api closed the connection after answering


async def _answer(reader: asyncio.StreamReader) -> Answer:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
    body = orjson.loads(await reader.readexactly(int(headers["content-length"])))
    closed = True
    try:
        # Either the end comes (the connection closed) or nothing does: the
        # bound only ends the wait for something that will not happen.
        closed = await asyncio.wait_for(reader.read(1), timeout=60) == b""
    except TimeoutError:
        closed = False
    except ConnectionError:
        pass  # reset: closed too
    return Answer(status, headers, body, closed)


async def slow_post(port: int, path: str, token: str | None, source: str, trickling: asyncio.Event) -> Answer:
    """The attack: a POST declaring a 2 MB body from ``source`` (an address of
    the loopback net), of which one byte a second follows, until the api
    answers. ``trickling`` is set once two bytes went out (or the answer came)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
    writer.write(f"{head}Content-Length: {DECLARED}\r\n{auth}\r\n{{".encode())
    answer = asyncio.create_task(_answer(reader))
    sent = 0
    try:
        while not answer.done():
            try:
                writer.write(b" ")
                await writer.drain()
            except ConnectionError:
                break  # the api hung up: its answer is in the reader
            sent += 1
            if sent >= 2:
                trickling.set()
            await asyncio.wait({answer}, timeout=1.0)  # the attacker's pace, not a synchronisation
        return await answer
    finally:
        trickling.set()
        answer.cancel()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def metric(api: httpx.AsyncClient, name: str) -> float:
    text = (await api.get("/metrics")).text
    return metric_sum(text, name)


def _problem(answer: Answer, status: int) -> None:
    assert answer.status == status, answer
    assert answer.headers["content-type"] == "application/problem+json", answer
    assert answer.body["status"] == status and answer.body["title"] and answer.body["detail"], answer
    assert answer.closed, f"the api kept the connection of a {status} open: {answer}"


async def test_slow_bodies_hold_no_order_slot_and_end_with_408(
    hostile: Stack, hapi: httpx.AsyncClient, token: TokenFactory
) -> None:
    # Given an event, a buyer, and an api that keeps 32 orders in flight (its default)
    org, buyer = token("hostile-org", "organizer"), token("hostile-buyer", "buyer")
    event = await create_event(hapi, org, capacity=100)
    port = hostile.api_port
    shed_before = await metric(hapi, "ticketry_orders_shed_total")

    # When 54 connections declare a 2 MB body and trickle it: 8 without a token
    # from one address, 36 buyers with valid tokens from as many addresses (more
    # than the 32 slots), 8 buyers from one address (twice its share), and 2
    # organisers' POST /v1/events
    started: list[asyncio.Event] = []

    def attack(path: str, tok: str | None, source: str) -> asyncio.Task[Answer]:
        started.append(asyncio.Event())
        return asyncio.create_task(slow_post(port, path, tok, source, started[-1]))

    no_token = [attack("/v1/orders", None, "127.0.0.9") for _ in range(8)]
    spread = [attack("/v1/orders", token(f"hostile-slow-{i}", "buyer"), f"127.0.0.{10 + i}") for i in range(36)]
    crowd = [attack("/v1/orders", token(f"hostile-crowd-{i}", "buyer"), "127.0.0.60") for i in range(8)]
    events = [attack("/v1/events", org, f"127.0.1.{1 + i}") for i in range(2)]
    slow = [*spread, *events]
    try:
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), timeout=120)

        # Then a normal buyer's order is accepted while every slow body is still being sent
        r = await place_order(hapi, buyer, event["id"], 1)
        assert r.status_code == 202, r.text
        assert not any(t.done() for t in slow), [t.result() for t in slow if t.done()]
        # And the api is ready
        ready = await hapi.get("/readyz")
        assert ready.status_code == 200, ready.text

        # And the ones without a token were refused before their body was read, and
        # one address got only its share: 4 are read, 4 refused with 429
        no_token_answers = await asyncio.wait_for(asyncio.gather(*no_token), timeout=120)
        for a in no_token_answers:
            _problem(a, 401)
            assert a.headers["www-authenticate"] == "Bearer"

        async def crowd_refused() -> list[asyncio.Task[Answer]]:
            done = [t for t in crowd if t.done()]
            return done if len(done) == len(crowd) - PER_CLIENT else []

        for t in await eventually(crowd_refused, "the crowd over its share refused"):
            _problem(t.result(), 429)
            assert int(t.result().headers["retry-after"]) >= 1

        # And the slow bodies are being read while no order slot is held by any of them,
        # nor was any order shed (the capacity the waiting room admits at is untouched)
        reading = len(slow) + PER_CLIENT

        async def all_reading() -> bool:
            return await metric(hapi, "ticketry_request_bodies_reading") == reading

        await eventually(all_reading, f"{reading} bodies being read")
        assert await metric(hapi, "ticketry_orders_inflight") == 0
        assert await metric(hapi, "ticketry_orders_shed_total") == shed_before
        assert not any(t.done() for t in slow), "a slow body was cut off before its deadline"

        # And at the deadline every slow body is answered 408 and its connection closed
        rest = [t for t in crowd if not t.done()]
        for a in await asyncio.wait_for(asyncio.gather(*slow, *rest), timeout=BODY_TIMEOUT_S + 120):
            _problem(a, 408)
    finally:
        for t in [*no_token, *spread, *crowd, *events]:
            t.cancel()
        await asyncio.gather(*no_token, *spread, *crowd, *events, return_exceptions=True)

    # And the normal buyer's order completes
    got = await wait_rendered(hapi, r.json()["id"], buyer)
    assert got["status"] == "completed", got
    assert await metric(hapi, "ticketry_request_bodies_reading") == 0


async def test_an_order_without_a_valid_token_is_refused_before_its_body(
    hostile: Stack, hapi: httpx.AsyncClient, token: TokenFactory
) -> None:
    # Given POSTs of orders that declare a 2 MB body and send none of it, one
    # without a token, one with a forged one, one with a token of another scheme
    forged = token("hostile-forger", "buyer")[:-4] + "AAAA"
    for auth in ("", f"Authorization: Bearer {forged}\r\n", "Authorization: Basic dXNlcjpwYXNz\r\n"):
        reader, writer = await asyncio.open_connection("127.0.0.1", hostile.api_port)
        writer.write(
            f"POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {DECLARED}\r\n{auth}\r\n".encode()
        )
        try:
            # When the api answers (the bound is on a hang: with no body it cannot read one)
            a = await asyncio.wait_for(_answer(reader), timeout=BODY_TIMEOUT_S + 60)
        finally:
            writer.close()
        # Then it is 401 problem+json, before the body, with the connection closed
        _problem(a, 401)
        assert a.headers["www-authenticate"] == "Bearer"
    # And no order slot is held
    assert await metric(hapi, "ticketry_orders_inflight") == 0
