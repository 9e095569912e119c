"""problem+json (RFC 9457) for every error the API returns: the edge's mapping
of a domain :class:`~ticketry_api.core.problem.Problem`, of a dependency that
is down, and of FastAPI's own refusals."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pymongo.errors import ConnectionFailure
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from ticketry.storage import StorageUnavailable

from ticketry_api.core.problem import PROBLEM_BASE, Problem

log = logging.getLogger(__name__)

PROBLEM = "application/problem+json"

_PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "status", "title", "detail"],
    "properties": {
        "type": {"type": "string"},
        "status": {"type": "integer"},
        "title": {"type": "string"},
        "detail": {"type": "string"},
    },
}
_DESCRIPTIONS = {
    401: "Missing, invalid or expired bearer token",
    403: "Your role may not do this",
    404: "Not found (or not yours: existence does not leak)",
    409: "Conflict with the current state",
    410: "Gone (revoked)",
    413: "Request body too large",
    422: "Invalid request",
    429: "Rate limit exceeded (see Retry-After)",
    503: "A dependency is unavailable or busy; retry",
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the problem+json errors a route answers."""
    return {
        s: {"description": _DESCRIPTIONS.get(s, "Error"), "content": {PROBLEM: {"schema": _PROBLEM_SCHEMA}}}
        for s in statuses
    }


def problem_response(
    status: int, title: str, detail: str = "", headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    body: dict[str, Any] = {"type": "about:blank", "status": status, "title": title, "detail": detail}
    body.update(extra)
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


# While a dependency is down: how long a client should wait before trying again.
RETRY_AFTER_S = 1


def unavailable(what: str) -> JSONResponse:
    """The answer to a request that needs ``what`` while it is unreachable."""
    return problem_response(
        503,
        "service unavailable",
        f"the {what} is unreachable; retry shortly",
        {"Retry-After": str(RETRY_AFTER_S)},
        type=PROBLEM_BASE + "unavailable",
    )


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def allowed_methods(request: Request) -> str:
    """Every method the request's path is served with (a 405's ``Allow``): each
    method put to the app's routes as they match a request (Starlette names
    only the first route at the path; the pages, the scanner and /metrics are
    in no OpenAPI document)."""
    routes = request.app.router.routes
    allowed = (m for m in _METHODS if any(r.matches({**request.scope, "method": m})[0] is Match.FULL for r in routes))
    return ", ".join(allowed)


def install(app: FastAPI) -> None:
    # Dependencies down: 503 with Retry-After, never a 500. (A handler for a
    # class of its own, not the catch-all below: Starlette re-raises after the
    # catch-all answers, and uvicorn then closes the client's connection.)
    @app.exception_handler(ConnectionFailure)
    async def _store_down(_: Request, exc: ConnectionFailure) -> JSONResponse:
        log.warning("store unreachable: %s", type(exc).__name__)
        return unavailable("store")

    @app.exception_handler(RedisConnectionError)
    @app.exception_handler(RedisTimeoutError)
    async def _redis_down(_: Request, exc: Exception) -> JSONResponse:
        log.warning("redis unreachable: %s", type(exc).__name__)
        return unavailable("queue")

    @app.exception_handler(StorageUnavailable)
    async def _storage_down(_: Request, exc: StorageUnavailable) -> JSONResponse:
        log.warning("PDF storage unavailable: %s", str(exc)[:300])
        return unavailable("storage")

    @app.exception_handler(Problem)
    async def _problem(_: Request, exc: Problem) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, media_type=PROBLEM, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:
            # FastAPI's answer to a body it cannot even decode (not UTF-8, …): to
            # a client that is just another invalid body, so the same 422.
            return problem_response(422, "invalid request", "the request body could not be decoded")
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = allowed_methods(request)
        return problem_response(exc.status_code, str(exc.detail), headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", ""))} for e in exc.errors()]
        return problem_response(422, "invalid request", "the request body or parameters are invalid", errors=errors)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return problem_response(500, "internal error")
