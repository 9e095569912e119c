"""Liveness, readiness and metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from ticketry.documents import Event

from ticketry_api.deps import State
from ticketry_api.errors import Problem, problems

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses=problems(503))
async def readyz(state: State) -> dict[str, str]:
    try:
        await state.redis.ping()
        await Event.get_pymongo_collection().database.command("ping")
    except Exception as exc:
        raise Problem(503, "not ready", type(exc).__name__) from None
    return {"status": "ready"}


@router.get("/metrics", include_in_schema=False)
async def metrics() -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
