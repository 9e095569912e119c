"""Liveness, readiness and metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST
from ticketry.redis_ha import PrimaryNotFound

from ticketry_api.core.problem import Problem
from ticketry_api.deps import State
from ticketry_api.http.errors import problems
from ticketry_api.middleware.metrics import exposition, scrape_refusal

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


# A dependency that has not answered a ping within this long counts as down;
# /readyz itself never hangs (the client's own timeouts end sooner, this is a bound).
READY_TIMEOUT_S = 3.0


async def _check(ping: Awaitable[object]) -> str:
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


@router.get("/readyz", responses=problems(503))
async def readyz(state: State) -> dict[str, str]:
    """Ready while Redis and the store both answer a ping (checked together);
    503 with Retry-After and each dependency's state otherwise. It recovers by
    itself: every call checks afresh."""
    redis, store = await asyncio.gather(_check(state.redis.ping()), _check(state.store.ping()))
    if redis != "ok" or store != "ok":
        detail = f"redis: {redis}; store: {store}"
        raise Problem(503, "not ready", detail, {"Retry-After": "1"}, extra={"redis": redis, "store": store})
    return {"status": "ready", "redis": redis, "store": store}


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request, state: State) -> Response:
    token = state.settings.metrics_token
    peer = request.client.host if request.client else None
    status = scrape_refusal(token.get_secret_value() if token else None, request.headers.get("authorization"), peer)
    if status == 401:
        raise Problem(401, "unauthorized", "/metrics needs its bearer token", {"WWW-Authenticate": "Bearer"})
    if status is not None:
        raise Problem(403, "forbidden", "/metrics answers loopback clients only (no metrics token is set)")
    return Response(exposition(), media_type=CONTENT_TYPE_LATEST)
