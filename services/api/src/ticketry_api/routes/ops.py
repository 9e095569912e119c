"""The operator's console: the page at ``/ops`` (admin token from
``/ops#token=<JWT>``, kept in the tab's sessionStorage and sent in the
Authorization header) and the admin-only JSON it reads, which calls the same
functions as ``ticketryctl`` (``ticketry_api.ops``): the stack's state, the
dead letters with show / re-drive / re-drive all of a reason / delete (each
written to the audit log, listed here), and a live feed of Server-Sent Events
built from one shared poll per api process (``ops.feed``).

Not part of the OpenAPI: the page is the client, and the feed never ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, Field
from ticketry import streams
from ticketry.auth import Principal

from ticketry_api.adapters.replicas import replicated
from ticketry_api.core.problem import Problem
from ticketry_api.deps import AppState, State, require
from ticketry_api.ops import audit, feed, render_dead, throughput
from ticketry_api.web.assets import load_assets
from ticketry_api.webhooks import deadletters as webhook_dead

router = APIRouter(include_in_schema=False)
Admin = Annotated[Principal, Depends(require())]
Kind = Literal["render", "webhooks"]
_ASSETS = load_assets()
# The console: our own scripts and styles (uPlot sets styles from script, which a CSP allows), our api.
OPS_PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_LIST = {"render": render_dead.list_dead_letters, "webhooks": webhook_dead.list_dead}
_ACT: dict[str, dict[audit.Action, audit.DeadLetterAction]] = {
    "render": {"redrive": render_dead.redrive, "delete": render_dead.delete},
    "webhooks": {"redrive": webhook_dead.redrive, "delete": webhook_dead.delete},
}


@router.get("/ops")
async def ops_page() -> Response:
    asset = _ASSETS["ops.html"]
    return Response(
        asset.body, media_type=asset.media_type,
        headers={"Content-Security-Policy": OPS_PAGE_CSP, "Permissions-Policy": "camera=(), microphone=()",
                 "Cache-Control": "no-store"},
    )  # fmt: skip


@router.get("/v1/ops/status")
async def ops_status(request: Request, _: Admin, state: State) -> dict[str, Any]:
    """What ``ticketryctl status`` shows, with each group's consumers, the
    scaler's last decisions, the sales panel's rows and the throughput of the
    last 15 minutes (rates between the samples kept in Redis)."""
    shared = _feed_of(request, state)
    snap = await feed.snapshot(state.redis, state.store, shared.sales, shared.first_ticket)
    feed.annotate(snap, None, 0.0, state.settings.ops_drain_target_s)
    snap["throughput"] = await throughput.recent(state.redis)  # the chart's last 15 minutes
    return snap


@router.get("/v1/ops/dead-letters")
async def dead_letters(_: Admin, state: State) -> dict[str, list[dict[str, Any]]]:
    return {kind: await listing(state.redis) for kind, listing in _LIST.items()}


def _checked(dead_id: str) -> str:
    try:
        streams.parse_stream_id(dead_id)
    except streams.BadStreamId:
        raise Problem(404, "dead letter not found") from None
    return dead_id


async def _one(state: AppState, kind: Kind, dead_id: str) -> dict[str, Any]:
    if kind == "render":
        found = await render_dead.show_dead_letter(state.redis, _checked(dead_id))
    else:
        found = next((d for d in await webhook_dead.list_dead(state.redis) if d["id"] == _checked(dead_id)), None)
    if found is None:
        raise Problem(404, "dead letter not found")
    return found


@router.get("/v1/ops/dead-letters/{kind}/{dead_id}")
async def dead_letter(kind: Kind, dead_id: str, _: Admin, state: State) -> dict[str, Any]:
    return await _one(state, kind, dead_id)


async def _act(
    state: AppState, who: Principal, action: audit.Action, kind: Kind, ids: Sequence[str], target: str = ""
) -> dict[str, str]:
    outcome = await audit.audited(state.redis, who.sub, action, kind, _ACT[kind][action], ids, target)
    await replicated(state.redis, state.settings)  # said done only once a replica has it
    return outcome


class Outcomes(BaseModel):
    outcomes: dict[str, str] = Field(description="Dead-letter id → what happened.")


@router.post("/v1/ops/dead-letters/{kind}/{dead_id}/redrive")
async def redrive_one(kind: Kind, dead_id: str, who: Admin, state: State) -> Outcomes:
    """Re-drive one dead letter: 404 when it is not there (another admin's
    re-drive of it, at once or before, leaves nothing to re-drive)."""
    outcome = await _act(state, who, "redrive", kind, [_checked(dead_id)])
    said = outcome[dead_id]
    if said.startswith("not found"):
        raise Problem(404, "dead letter not found", said)
    if not said.startswith("re-driven"):
        raise Problem(409, "not re-drivable", said)
    return Outcomes(outcomes=outcome)


class Reason(BaseModel):
    reason: str = Field(min_length=1, max_length=2000, description="Every dead letter with exactly this reason.")


@router.post("/v1/ops/dead-letters/{kind}/redrive-reason")
async def redrive_reason(kind: Kind, body: Reason, who: Admin, state: State) -> Outcomes:
    ids = [d["id"] for d in await _LIST[kind](state.redis) if d["reason"] == body.reason and d["redrivable"]]
    if not ids:
        raise Problem(404, "no re-drivable dead letter has this reason")
    return Outcomes(outcomes=await _act(state, who, "redrive", kind, ids, f"reason:{body.reason}"))


@router.delete("/v1/ops/dead-letters/{kind}/{dead_id}")
async def delete_one(kind: Kind, dead_id: str, who: Admin, state: State) -> Outcomes:
    outcome = await _act(state, who, "delete", kind, [_checked(dead_id)])
    if outcome[dead_id] != "deleted":
        raise Problem(404, "dead letter not found")
    return Outcomes(outcomes=outcome)


@router.get("/v1/ops/audit")
async def audit_log(_: Admin, state: State) -> list[dict[str, Any]]:
    """The newest 50 operator actions, newest first."""
    return await audit.recent(state.redis)


def _feed_of(request: Request, state: AppState) -> feed.Feed:
    found: feed.Feed | None = getattr(request.app.state, "ops_feed", None)
    if found is None:
        found = feed.Feed(
            state.redis, state.store, state.settings.ops_feed_interval_s, state.settings.ops_drain_target_s
        )
        request.app.state.ops_feed = found
    return found


@router.get("/v1/ops/feed")
async def ops_feed(request: Request, _: Admin, state: State) -> StreamingResponse:
    """Server-Sent Events: one ``data:`` line of the console's snapshot per poll."""
    frames = _feed_of(request, state).frames()

    async def events() -> AsyncIterator[bytes]:
        try:
            async for data in frames:
                yield b"data: " + data + b"\n\n"
        finally:
            await frames.aclose()

    return StreamingResponse(
        events(), media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )  # fmt: skip
