"""``/v1/orders/{id}/progress`` (WebSocket), health and metrics.

The handshake (see ``handshake`` for the close codes): accept (answering the
``ticketry`` subprotocol when the token came that way), verify the token, parse
``after``, admit (process and buyer bounds), subscribe, read the snapshot in a
coalesced round trip (``lookups``), check the owner, send the snapshot and the
``after=`` replay, then deliver live until the client goes, the token expires,
the order is cancelled or the socket falls too far behind. Every failure closes
with a code and a reason; none escapes as an exception.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, generate_latest
from pymongo.errors import PyMongoError
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.websockets import WebSocket
from ticketry import streams
from ticketry.auth import AuthError, Principal, TokenVerifier, verify_order_link
from ticketry.db import as_text, entries_of
from ticketry.documents import Order, OrderState, is_placed
from ticketry.events import DecodeError, decode_ticket_event
from ticketry.ids import is_valid_id

from ticketry_notifier import handshake
from ticketry_notifier.config import NotifierSettings
from ticketry_notifier.handshake import Close, StreamKey
from ticketry_notifier.hub import Hub, outgoing, stream_id_key
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
    try:
        return app.verifier.verify(token)
    except AuthError:
        return verify_order_link(token, order_id, secret=app.settings.jwt_key, leeway_s=app.verifier.leeway_s)


async def _open(
    app: Notifier, ws: WebSocket, session: Session, owns: Callable[[str], bool], after: StreamKey | None
) -> Close | None:
    """Snapshot and replay; the close that ends the socket instead, if any."""
    order_id = session.order_id
    try:
        progress, upto = await app.reads.read(order_id)
        owner = progress.get("owner")
        head = None
        if not owner:
            head = await _order_head(order_id)
            owner = None if head is None else str(head["owner_id"])
        if owner is None or not owns(owner):
            return handshake.NOT_FOUND
        if not progress.get("total"):  # the hash expired (or holds only a late field)
            final = {k: v for k, v in progress.items() if k in ("completed", "cancelled")}
            progress = {**await _snapshot_from_db(order_id, head), **final}
        await ws.send_text(handshake.snapshot_text(order_id, upto, progress))
        upto_key = stream_id_key(upto)
        session.delivered(upto_key, upto)
        if after is not None and after < upto_key and await _replay(app, ws, order_id, after, upto):
            return handshake.CANCELLED
    except (Unavailable, RedisError, PyMongoError) as exc:
        log.warning("progress socket: store unavailable", extra={"order_id": order_id, "error": str(exc)[:200]})
        return handshake.UNAVAILABLE
    if handshake.snapshot_status(progress) == "cancelled":
        return handshake.CANCELLED
    return None


async def _replay(app: Notifier, ws: WebSocket, order_id: str, after: StreamKey, upto: str) -> bool:
    """Send what this order missed in ``(after, upto]``; True if that ends with its cancellation."""
    start = handshake.next_stream_id(after)
    while start is not None:
        chunk = entries_of(
            await app.hub.redis.xrange(
                streams.TICKET_EVENTS, min=handshake.format_stream_id(start), max=upto, count=REPLAY_CHUNK
            )
        )
        if not chunk:
            break
        for raw_id, fields in chunk:
            if fields.get(b"order_id", b"").decode(errors="replace") != order_id:
                continue
            try:
                missed = outgoing(decode_ticket_event(raw_id, fields))
            except DecodeError:
                continue
            await ws.send_text(missed.text)
            if missed.final:
                return True
        start = handshake.next_stream_id(stream_id_key(as_text(chunk[-1][0])))
    return False


async def _refuse(ws: WebSocket, close: Close) -> None:
    _count_close(close)
    try:
        await ws.close(close.code, close.reason)
    except (*SEND_ERRORS, RuntimeError):
        pass  # gone, or closed already


def _count_close(close: Close) -> None:
    CLOSES.labels(close.label).inc()


async def _order_head(order_id: str) -> dict[str, Any] | None:
    """The order's owner, size and status, without its list of ticket ids
    (10,000 in a big order); None for no order."""
    doc = await Order.get_pymongo_collection().find_one({"_id": order_id}, {"owner_id": 1, "quantity": 1, "status": 1})
    return doc if doc is not None and is_placed(doc["status"]) else None


async def _snapshot_from_db(order_id: str, head: dict[str, Any] | None) -> dict[str, str]:
    """The snapshot once the order's progress hash has expired: its outcome as
    the projector recorded it (``OrderState``; none yet means still rendering),
    and ``cancelled`` from the order itself."""
    order = head if head is not None else await _order_head(order_id)
    if order is None:
        return {}
    cancelled = {"cancelled": "1"} if order.get("status") == "cancelled" else {}
    state = await OrderState.get(order_id)
    if state is None:
        return {"total": str(order["quantity"]), **cancelled}
    return {
        "total": str(state.total), "rendered": str(state.rendered), "failed": str(state.failed), "completed": "1",
        **cancelled,
    }  # fmt: skip


async def healthz(_: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> JSONResponse:
    try:
        await request.app.state.notifier.hub.redis.ping()
        await Order.get_pymongo_collection().database.command("ping")
    except Exception as exc:
        return JSONResponse(
            {"status": 503, "title": "not ready", "detail": type(exc).__name__},
            status_code=503, media_type="application/problem+json",
        )  # fmt: skip
    return JSONResponse({"status": "ready"})


async def metrics(_: Request) -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
