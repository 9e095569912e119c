"""Request bodies: a size cap, a read deadline, and a bound per client."""

from __future__ import annotations

import asyncio
import math

from prometheus_client import Counter, Gauge
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ticketry_api.http.errors import problem_response


class BodyLimit:
    """Refuse request bodies above ``max_bytes`` with 413 (declared or streamed)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await problem_response(413, "request body too large")(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge()
            return msg

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await problem_response(413, "request body too large")(scope, receive, send)


class _TooLarge(HTTPException):
    """An HTTPException so that FastAPI's body parser passes it through (it turns
    any other error while reading the body into a 400)."""

    def __init__(self) -> None:
        super().__init__(413, "request body too large")


BODIES_READING = Gauge(
    "ticketry_request_bodies_reading", "Request bodies being received now (not yet whole)", multiprocess_mode="livesum"
)
BODIES_REFUSED = Counter(
    "ticketry_request_bodies_refused", "Requests refused while or before receiving their body", ["reason"]
)


class ClientBodies:
    """How many request bodies each client address is sending now, bounded
    per address. Pure: the caller says when a body starts and ends."""

    def __init__(self, per_client: int) -> None:
        self.per_client = per_client
        self.reading: dict[str, int] = {}

    def start(self, client: str) -> bool:
        """Count one more body from ``client``; False (nothing counted) past the bound."""
        n = self.reading.get(client, 0)
        if n >= self.per_client:
            return False
        self.reading[client] = n + 1
        return True

    def end(self, client: str) -> None:
        n = self.reading.get(client, 0) - 1
        if n > 0:
            self.reading[client] = n
        else:  # an address with nothing in transit takes no memory
            self.reading.pop(client, None)

    @property
    def total(self) -> int:
        return sum(self.reading.values())


def has_body(scope: Scope) -> bool:
    """Whether the request says a body follows (HTTP/1.1: a non-zero
    Content-Length, or Transfer-Encoding)."""
    for name, value in scope.get("headers") or []:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


_CLOSE = {"Connection": "close"}


class BodyDeadline:
    """Every request body is received whole, within ``timeout_s`` of the
    request's start, before the app sees the request; the app then gets it in
    one message. So nothing inside (the order slots of ``shedding``, a route's
    work) is ever held by a client that trickles its body: the body is already
    here, or the client got 408 and its connection is closed (else the server
    would go on receiving, and dropping, the rest it trickles).

    A client address may be sending at most ``per_client`` bodies at once
    (429 with Retry-After past it): one address cannot hold the api's
    connections open in bulk. The address is the ASGI client host, which
    uvicorn takes from ``X-Forwarded-For`` only when the peer is one of its
    trusted proxies (``--proxy-headers`` with ``--forwarded-allow-ips`` /
    ``FORWARDED_ALLOW_IPS``, loopback by default): a deployment behind a proxy
    elsewhere must list that proxy there, or every buyer counts as the proxy's
    one address. The header is never read here: a client could write any
    address in it."""

    def __init__(self, app: ASGIApp, timeout_s: float, per_client: int) -> None:
        self.app, self.timeout_s = app, timeout_s
        self.clients = ClientBodies(per_client)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not has_body(scope):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        host = str(client[0]) if client else ""
        if not self.clients.start(host):
            BODIES_REFUSED.labels("per_client").inc()
            wait_s = str(max(1, math.ceil(self.timeout_s)))
            detail = "this address is already sending as many request bodies as it may; retry after the time given"
            await problem_response(429, "too many bodies in transit", detail, {"Retry-After": wait_s, **_CLOSE})(
                scope, receive, send
            )
            return
        BODIES_READING.set(self.clients.total)
        try:
            async with asyncio.timeout(self.timeout_s):
                body = await _whole_body(receive)
        except TimeoutError:
            BODIES_REFUSED.labels("timeout").inc()
            detail = f"the request body did not arrive within {self.timeout_s:g} s"
            await problem_response(408, "request timeout", detail, _CLOSE)(scope, receive, send)
            return
        finally:
            self.clients.end(host)
            BODIES_READING.set(self.clients.total)
        if body is None:  # the client went away: there is no one to answer
            return
        given = False

        async def replay() -> Message:
            nonlocal given
            if given:
                return await receive()  # only http.disconnect is left
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def _whole_body(receive: Receive) -> bytes | None:
    """The request body, or None when the client disconnected first."""
    chunks: list[bytes] = []
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return None
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body", False):
            return b"".join(chunks)
