"""A request's patience with its dependencies."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send
from ticketry.db import request_budget


class DependencyBudget:
    """Runs every HTTP request under :func:`ticketry.db.request_budget`: a
    request that needs Redis while it is down gives up within a second (and
    answers 503) instead of retrying for the whole outage. Background work
    keeps its patient retries."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with request_budget():
            await self.app(scope, receive, send)
