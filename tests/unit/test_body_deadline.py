"""The pure pieces that keep slow request bodies from holding anything:
the per-address count of bodies in transit, what counts as a body, the
bearer token read before an order's body, and the order refused before it
is read (ticketry_api.middleware)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from starlette.types import Message, Scope
from ticketry.auth import AuthError, Principal, UnboundStaffError
from ticketry_api.middleware.bodies import BodyDeadline, ClientBodies, has_body
from ticketry_api.middleware.shedding import VERIFIED, OrderGate, Shedding, bearer_token


def test_client_bodies_are_bounded_per_address_and_forgotten_when_done() -> None:
    bodies = ClientBodies(per_client=2)
    assert bodies.start("10.0.0.1") and bodies.start("10.0.0.1")
    assert not bodies.start("10.0.0.1")  # a third from the same address
    assert bodies.start("10.0.0.2")  # another address has its own count
    assert bodies.total == 3
    bodies.end("10.0.0.1")
    assert bodies.start("10.0.0.1")  # a place freed is a place again
    for _ in range(2):
        bodies.end("10.0.0.1")
    bodies.end("10.0.0.2")
    assert bodies.reading == {} and bodies.total == 0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([], False),
        ([(b"content-length", b"0")], False),
        ([(b"content-length", b"12")], True),
        ([(b"transfer-encoding", b"chunked")], True),
        ([(b"content-type", b"application/json")], False),
    ],
)
def test_has_body(headers: list[tuple[bytes, bytes]], expected: bool) -> None:
    assert has_body({"type": "http", "headers": headers}) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (b"Bearer abc.def.ghi", "abc.def.ghi"),
        (b"bearer  abc ", "abc"),
        (b"Basic dXNlcjpwYXNz", None),
        (b"Bearer", None),
        (b"Bearer ", None),
    ],
)
def test_bearer_token(value: bytes | None, expected: str | None) -> None:
    headers = [] if value is None else [(b"authorization", value)]
    assert bearer_token({"type": "http", "headers": headers}) == expected


async def test_refuse_now_only_when_enter_would_shed_at_once() -> None:
    shedding = Shedding(1, max_queued=1, queue_s=10.0)
    assert shedding.refuse_now() is None  # a free slot
    await shedding.enter()
    assert shedding.refuse_now() is None  # no slot, but a place in the queue
    waiting = asyncio.create_task(shedding.enter())
    while not shedding.waiters:
        await asyncio.sleep(0)
    retry_after = shedding.refuse_now()  # the queue is full: refused, and counted
    assert retry_after is not None and retry_after >= 1 and shedding.shed == 1
    shedding.leave(accepted=True)
    await waiting
    shedding.leave(accepted=True)
    assert shedding.refuse_now() is None and shedding.inflight == 0


def _scope(client: str = "10.0.0.1") -> Scope:
    return {"type": "http", "method": "POST", "path": "/v1/x", "headers": [(b"content-length", b"10")],
            "client": (client, 1234)}  # fmt: skip


async def test_body_deadline_hands_the_app_the_whole_body_in_one_message() -> None:
    inner: dict[str, Any] = {}

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        inner["first"] = await receive()

    mw = BodyDeadline(app, timeout_s=5, per_client=1)
    parts = [{"type": "http.request", "body": b"01234", "more_body": True},
             {"type": "http.request", "body": b"56789", "more_body": False}]  # fmt: skip

    async def receive() -> Message:
        return parts.pop(0)

    async def send(msg: Message) -> None:
        raise AssertionError(msg)

    await mw(_scope(), receive, send)
    assert inner["first"] == {"type": "http.request", "body": b"0123456789", "more_body": False}
    assert mw.clients.total == 0


async def test_body_deadline_answers_408_and_closes_when_the_body_is_late() -> None:
    async def app(scope: Scope, receive: Any, send: Any) -> None:
        raise AssertionError("the app ran without the whole body")

    mw = BodyDeadline(app, timeout_s=0.05, per_client=1)
    sent: list[Message] = []

    async def receive() -> Message:
        if not sent:
            await asyncio.Event().wait()  # the rest never comes
        return {"type": "http.disconnect"}

    async def send(msg: Message) -> None:
        sent.append(msg)

    await mw(_scope(), receive, send)
    start = sent[0]
    assert start["status"] == 408
    headers = dict(start["headers"])
    assert headers[b"connection"] == b"close" and headers[b"content-type"] == b"application/problem+json"
    assert orjson.loads(sent[1]["body"])["status"] == 408
    assert mw.clients.total == 0  # the address's place is given back


async def test_body_deadline_refuses_an_address_over_its_bound_with_429() -> None:
    started = asyncio.Event()

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        raise AssertionError("no body was complete")

    mw = BodyDeadline(app, timeout_s=60, per_client=1)

    async def slow_receive() -> Message:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError

    async def nothing(msg: Message) -> None:
        raise AssertionError(msg)

    first = asyncio.create_task(mw(_scope(), slow_receive, nothing))
    await started.wait()
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.disconnect"}

    async def send(msg: Message) -> None:
        sent.append(msg)

    await mw(_scope(), receive, send)
    assert sent[0]["status"] == 429 and int(dict(sent[0]["headers"])[b"retry-after"]) >= 1
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert mw.clients.total == 0


@pytest.mark.parametrize(
    ("authorization", "verdict", "expected"),
    [
        (None, None, 401),  # no token: refused, verify never asked
        (b"Bearer good", None, "app"),
        (b"Bearer bad", AuthError("bad signature"), 401),
        (b"Bearer unbound", UnboundStaffError("no org"), "app"),  # the route answers 403 itself
        (b"Basic dXNlcjpwYXNz", None, 401),
    ],
)
async def test_order_gate_refuses_without_a_valid_token_before_the_body(
    authorization: bytes | None, verdict: Exception | None, expected: int | str
) -> None:
    ran: list[str] = []

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        ran.append("app")

    def verify(token: str) -> object:
        if verdict is not None:
            raise verdict
        return token

    async def receive() -> Message:
        raise AssertionError("the gate read the body")

    sent: list[Message] = []

    async def send(msg: Message) -> None:
        sent.append(msg)

    headers = [(b"content-length", b"2000000")] + ([(b"authorization", authorization)] if authorization else [])
    scope = {"type": "http", "method": "POST", "path": "/v1/orders", "headers": headers}
    await OrderGate(app, Shedding(1, max_queued=0, queue_s=1.0), verify)(scope, receive, send)
    if expected == "app":
        assert ran == ["app"] and not sent
    else:
        assert not ran and sent[0]["status"] == expected
        head = dict(sent[0]["headers"])
        assert head[b"www-authenticate"] == b"Bearer" and head[b"connection"] == b"close"
        assert orjson.loads(sent[1]["body"])["status"] == expected


async def test_order_gate_sheds_first_when_no_slot_or_place_is_left() -> None:
    shedding = Shedding(1, max_queued=0, queue_s=1.0)
    await shedding.enter()  # the one slot taken, no queue

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        raise AssertionError("ran")

    def verify(token: str) -> object:
        raise AssertionError("a request that is shed anyway needs no token check")

    sent: list[Message] = []

    async def send(msg: Message) -> None:
        sent.append(msg)

    async def receive() -> Message:
        raise AssertionError("read")

    scope = {"type": "http", "method": "POST", "path": "/v1/orders", "headers": []}
    await OrderGate(app, shedding, verify)(scope, receive, send)
    assert sent[0]["status"] == 503 and int(dict(sent[0]["headers"])[b"retry-after"]) >= 1


async def test_order_gate_hands_the_token_it_verified_and_its_principal_to_the_route() -> None:
    who = Principal(sub="buyer-1", role="buyer")
    seen: list[object] = []

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        seen.append(scope.get(VERIFIED))

    async def receive() -> Message:
        raise AssertionError("no body read")

    async def send(msg: Message) -> None:
        raise AssertionError("nothing sent")

    def verify(token: str) -> Principal:
        assert token == "good"
        return who

    scope = {"type": "http", "method": "POST", "path": "/v1/orders", "headers": [(b"authorization", b"Bearer good")]}
    await OrderGate(app, Shedding(1, max_queued=0, queue_s=1.0), verify)(scope, receive, send)
    assert seen == [("good", who)]
