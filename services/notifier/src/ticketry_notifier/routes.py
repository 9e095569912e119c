"""``/v1/orders/{id}/progress`` (WebSocket), health and metrics."""

from __future__ import annotations

import asyncio
import logging

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, Gauge, generate_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.websockets import WebSocket, WebSocketDisconnect
from ticketry import streams
from ticketry.auth import AuthError, TokenVerifier
from ticketry.db import as_text, entries_of
from ticketry.documents import Order, OrderState, is_placed
from ticketry.events import DecodeError, TicketEvent, decode_ticket_event
from ticketry.ids import is_valid_id
from ticketry.tracing import context_from, tracer

from ticketry_notifier.config import NotifierSettings
from ticketry_notifier.hub import Hub, stream_id_key

log = logging.getLogger(__name__)
_TRACER = tracer(__name__)

CONNECTIONS = Gauge("ticketry_notifier_connections", "Open progress WebSockets")

# Close codes: 4401 unauthenticated, 4404 no such order (or not yours).


async def progress(ws: WebSocket) -> None:
    settings: NotifierSettings = ws.app.state.settings
    hub: Hub = ws.app.state.hub
    order_id = ws.path_params["order_id"]
    token = ws.query_params.get("token", "")
    after = ws.query_params.get("after")
    await ws.accept()
    try:
        who = _verifier(ws, settings).verify(token)
    except AuthError:
        await ws.close(4401, "unauthorized")
        return
    owner = await _owner(hub, order_id)
    if owner is None or not who.owns(owner):
        await ws.close(4404, "order not found")
        return
    if after is not None:
        try:
            stream_id_key(after)
        except ValueError:
            await ws.close(4400, "invalid after")
            return

    sub = hub.subscribe(order_id)
    CONNECTIONS.inc()
    try:
        # Snapshot and the stream position it corresponds to, read atomically.
        async with hub.redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(streams.order_progress(order_id))
            pipe.xrevrange(streams.TICKET_EVENTS, count=1)
            progress_hash, last = await pipe.execute()
        upto = last[0][0].decode() if last else "0-0"
        p = {k.decode(): v.decode() for k, v in progress_hash.items()}
        if not p:
            p = await _snapshot_from_db(order_id)
        await ws.send_bytes(
            orjson.dumps(
                {
                    "type": "snapshot", "id": upto, "order_id": order_id,
                    "total": int(p.get("total", 0)), "rendered": int(p.get("rendered", 0)),
                    "failed": int(p.get("failed", 0)), "completed": bool(p.get("completed")),
                }
            )
        )  # fmt: skip
        sent_upto = stream_id_key(upto)
        if after is not None:
            # Replay what this order missed between ``after`` and the snapshot.
            start = after
            while True:
                chunk = entries_of(await hub.redis.xrange(streams.TICKET_EVENTS, min=f"({start}", max=upto, count=2000))
                if not chunk:
                    break
                for raw_id, fields in chunk:
                    if fields.get(b"order_id", b"").decode() == order_id:
                        try:
                            missed = decode_ticket_event(raw_id, fields)
                        except DecodeError:
                            continue
                        await ws.send_bytes(orjson.dumps(missed.to_ws()))
                start = chunk[-1][0].decode()
        # Watch the client side too, so a socket the client closed is released
        # now, not when its order's next event happens to arrive.
        closed = asyncio.create_task(_until_closed(ws))
        try:
            while True:
                get = asyncio.ensure_future(sub.queue.get())
                await asyncio.wait({get, closed}, return_when=asyncio.FIRST_COMPLETED)
                if closed.done():
                    get.cancel()
                    return
                ev = get.result()
                if ev is None:
                    await ws.close(4008, "too slow; resume with ?after=")
                    return
                if stream_id_key(ev.id) <= sent_upto:
                    continue
                await _push(ws, ev)
        finally:
            closed.cancel()
    except WebSocketDisconnect:
        pass
    finally:
        hub.unsubscribe(sub)
        CONNECTIONS.dec()


async def _push(ws: WebSocket, ev: TicketEvent) -> None:
    """Send one live event; a traced ticket's trace ends here, at the buyer's socket."""
    if not ev.traceparent:
        await ws.send_bytes(orjson.dumps(ev.to_ws()))
        return
    attributes = {"order.id": ev.order_id, "ticket.id": ev.ticket_id or "", "event.type": ev.type}
    with _TRACER.start_as_current_span("progress.push", context=context_from(ev.traceparent), attributes=attributes):
        await ws.send_bytes(orjson.dumps(ev.to_ws()))


async def _until_closed(ws: WebSocket) -> None:
    """Returns when the client disconnects (clients send nothing we need)."""
    while (await ws.receive())["type"] != "websocket.disconnect":
        pass


def _verifier(ws: WebSocket, settings: NotifierSettings) -> TokenVerifier:
    """The same verification as the api (TICKETRY_JWT_*), built once per app."""
    verifier: TokenVerifier | None = getattr(ws.app.state, "token_verifier", None)
    if verifier is None:
        verifier = ws.app.state.token_verifier = TokenVerifier.from_env(fallback_secret=settings.jwt_key)
    return verifier


async def _owner(hub: Hub, order_id: str) -> str | None:
    if not is_valid_id(order_id, "or"):
        return None
    owner = await hub.redis.hget(streams.order_progress(order_id), "owner")
    if owner:
        return as_text(owner)
    order = await _order_head(order_id)
    return None if order is None else str(order["owner_id"])


async def _order_head(order_id: str) -> dict[str, object] | None:
    """The order's owner and size, without its list of ticket ids (10,000 in a
    big order); None for no order."""
    doc = await Order.get_pymongo_collection().find_one({"_id": order_id}, {"owner_id": 1, "quantity": 1, "status": 1})
    return doc if doc is not None and is_placed(doc["status"]) else None


async def _snapshot_from_db(order_id: str) -> dict[str, str]:
    """The snapshot once the order's progress hash has expired: its outcome as
    the projector recorded it (``OrderState``; none yet means still rendering)."""
    order = await _order_head(order_id)
    if order is None:
        return {}
    state = await OrderState.get(order_id)
    if state is None:
        return {"total": str(order["quantity"])}
    return {
        "total": str(state.total), "rendered": str(state.rendered), "failed": str(state.failed), "completed": "1",
    }  # fmt: skip


async def healthz(_: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> JSONResponse:
    try:
        await request.app.state.hub.redis.ping()
        await Order.get_pymongo_collection().database.command("ping")
    except Exception as exc:
        return JSONResponse(
            {"status": 503, "title": "not ready", "detail": type(exc).__name__},
            status_code=503, media_type="application/problem+json",
        )  # fmt: skip
    return JSONResponse({"status": "ready"})


async def metrics(_: Request) -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
