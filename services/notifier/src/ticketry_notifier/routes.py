"""``/v1/orders/{id}/progress`` (WebSocket), health and metrics.

The socket I/O only; what to send is decided by ``core`` (plain data in,
messages out) and the close codes by ``handshake``. The handshake: accept
(answering the ``ticketry`` subprotocol when the token came that way), verify
the token, parse ``after``, admit (process and buyer bounds), subscribe, read
the progress hash in a coalesced round trip (``lookups``) and the store only
when the core asks for it, check the owner, send the snapshot and the
``after=`` replay, then deliver live (``session``) until the client goes, the
token expires, the order is cancelled or the socket falls too far behind.
Every failure closes with a code and a reason; none escapes as an exception.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, generate_latest
from pymongo.errors import PyMongoError
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.websockets import WebSocket
from ticketry import streams
from ticketry.auth import ORDER_SCOPE, AuthError, Principal, TokenVerifier, verify_bearer_or_link
from ticketry.db import entries_of, request_budget
from ticketry.ids import is_valid_id
from ticketry.redis_ha import PrimaryNotFound

from ticketry_notifier import core, handshake, orders
from ticketry_notifier.config import NotifierSettings
from ticketry_notifier.handshake import Close, StreamKey
from ticketry_notifier.hub import Hub
from ticketry_notifier.lookups import ProgressReads, Unavailable
from ticketry_notifier.session import SEND_ERRORS, Session, expiry_timer

log = logging.getLogger(__name__)

CONNECTIONS = Gauge("ticketry_websocket_connections", "Open progress WebSockets (admitted, per process)")
CLOSES = Counter("ticketry_websocket_closes_total", "Progress WebSockets closed by the notifier", ["reason"])

REPLAY_CHUNK = 2000


class Notifier:
    """What the progress endpoint needs, built by the lifespan."""

    def __init__(self, settings: NotifierSettings, hub: Hub, reads: ProgressReads, verifier: TokenVerifier) -> None:
        self.settings = settings
        self.hub = hub
        self.reads = reads
        self.verifier = verifier


async def progress(ws: WebSocket) -> None:
    try:
        await _progress(ws, ws.app.state.notifier)
    except SEND_ERRORS:
        pass  # the client went
    except Exception:
        log.exception("progress socket failed", extra={"order_id": ws.path_params.get("order_id")})
        await _refuse(ws, handshake.INTERNAL)


async def _progress(ws: WebSocket, app: Notifier) -> None:
    creds = handshake.credentials(ws.scope.get("subprotocols", []), ws.query_params.get("token"))
    await ws.accept(subprotocol=creds.subprotocol)
    try:
        who = _verify(app, creds.token, ws.path_params["order_id"])
    except AuthError:
        await _refuse(ws, handshake.UNAUTHORIZED)
        return
    try:
        after = handshake.parse_after(ws.query_params.get("after"))
    except handshake.BadStreamId:
        await _refuse(ws, handshake.BAD_AFTER)
        return
    order_id = ws.path_params["order_id"]
    if not is_valid_id(order_id, "or"):
        await _refuse(ws, handshake.NOT_FOUND)
        return
    refused = app.hub.admit(who.sub)
    if refused is not None:
        await _refuse(ws, refused)
        return
    CONNECTIONS.inc()
    session = Session(ws, order_id, who.sub, app.settings.notifier_socket_queue, _count_close)
    app.hub.subscribe(session)
    timer: asyncio.TimerHandle | None = None
    try:
        with request_budget():  # Redis down: 1013 in about a second, not after ~35 s of retries
            close = await _open(app, ws, session, who.owns, after)
        if close is not None:
            await _refuse(ws, close)
            return
        timer = expiry_timer(creds.token, app.verifier.leeway_s, session.expire)
        session.start()
        # Wait for the client to go (or for a close above to go out): clients
        # send nothing we need.
        while (await ws.receive())["type"] != "websocket.disconnect":
            pass
    finally:
        if timer is not None:
            timer.cancel()
        session.stop()
        app.hub.unsubscribe(session)
        app.hub.release(who.sub)
        CONNECTIONS.dec()


def _verify(app: Notifier, token: str, order_id: str) -> Principal:
    """A bearer token, or the order link of this very order (its buyer's page)."""
    return verify_bearer_or_link(app.verifier, app.settings.jwt_key, token, ORDER_SCOPE + order_id)


async def _open(
    app: Notifier, ws: WebSocket, session: Session, owns: Callable[[str], bool], after: StreamKey | None
) -> Close | None:
    """Snapshot and replay (what to send: ``core``); the close that ends the socket instead, if any."""
    order_id = session.order_id
    try:
        progress, upto = await app.reads.read(order_id)
        head = await orders.order_head(order_id) if core.needs_head(progress) else None
        if not core.may_watch(progress, head, owns):
            return handshake.NOT_FOUND
        outcome = await orders.order_outcome(order_id) if core.needs_outcome(progress, head) else None
        snapshot = core.Snapshot.of(order_id, upto, progress, head, outcome)
        await ws.send_text(snapshot.text)
        session.delivered(snapshot.key, upto)
        replay = core.Replay(order_id, after, snapshot.key)
        while replay.start is not None:
            chunk = await app.hub.redis.xrange(
                streams.TICKET_EVENTS, min=handshake.format_stream_id(replay.start), max=upto, count=REPLAY_CHUNK
            )
            for missed in replay.feed(entries_of(chunk)):
                await ws.send_text(missed.text)
        if replay.cancelled:
            return handshake.CANCELLED
    except (Unavailable, RedisError, PyMongoError) as exc:
        log.warning("progress socket: store unavailable", extra={"order_id": order_id, "error": str(exc)[:200]})
        return handshake.UNAVAILABLE
    return snapshot.close


async def _refuse(ws: WebSocket, close: Close) -> None:
    _count_close(close)
    try:
        await ws.close(close.code, close.reason)
    except (*SEND_ERRORS, RuntimeError):
        pass  # gone, or closed already


def _count_close(close: Close) -> None:
    CLOSES.labels(close.label).inc()


async def healthz(_: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


# A dependency that has not answered a ping within this long counts as down.
READY_TIMEOUT_S = 3.0


async def _state(ping: Awaitable[object]) -> str:
    """``ok``, or why not (the error's class name, or for a primary the
    sentinels cannot name its reason: no addresses leak)."""
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            await ping
    except PrimaryNotFound as exc:
        return f"down ({exc.reason})"
    except Exception as exc:
        return f"down ({type(exc).__name__})"
    return "ok"


async def readyz(request: Request) -> JSONResponse:
    """Ready while Redis and the store both answer a ping; 503 with
    Retry-After naming each dependency's state otherwise (as the api's)."""
    with request_budget():  # a quick answer, not a command retried for ~35 s
        redis, store = await asyncio.gather(_state(request.app.state.notifier.hub.redis.ping()), _state(orders.ping()))
    if redis != "ok" or store != "ok":
        return JSONResponse(
            {"status": 503, "title": "not ready", "detail": f"redis: {redis}; store: {store}",
             "redis": redis, "store": store},
            status_code=503, media_type="application/problem+json", headers={"Retry-After": "1"},
        )  # fmt: skip
    return JSONResponse({"status": "ready", "redis": redis, "store": store})


async def metrics(_: Request) -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
