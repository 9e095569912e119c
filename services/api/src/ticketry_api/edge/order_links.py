"""Who reads an order with its order link (``web.links``): the dependencies of
the buyer's page routes (the link in the Authorization header or in the page's
cookie) and of the "download all" route (a bearer token of the buyer, or the
link); and who reads a waiting-room place with its link. Each reader is
counted against the ``reads`` rate limit."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from ticketry.auth import ORDER_SCOPE, AuthError, Principal, UnboundStaffError, verify_bearer_or_link, verify_link

from ticketry_api.adapters import ratelimit
from ticketry_api.core.problem import Problem
from ticketry_api.deps import UNBOUND_STAFF, AppState, app_state

# The cookie the buyer's page sets (``POST /o/{id}/session``), path-scoped to the order's page.
LINK_COOKIE = "ticketry_order"
bearer_scheme = HTTPBearer(auto_error=False)
_UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}


def bearer_token(creds: HTTPAuthorizationCredentials | None) -> str | None:
    return creds.credentials if creds is not None and creds.scheme.lower() == "bearer" else None


async def counted(state: AppState, who: Principal) -> Principal:
    """``who``, once counted against the ``reads`` rate limit (429 over it)."""
    await ratelimit.enforce(state.redis, "reads", who.sub, state.rates.limit("reads"), state.rates.rate_window_s)
    return who


def link_holder(state: AppState, token: str | None, scope: str) -> Principal:
    """The buyer a link for exactly ``scope`` (``order:<id>``, ``queue:<id>``)
    speaks for; 401 for anything else."""
    if not token:
        raise Problem(401, "unauthorized", "a link is required", _UNAUTHORIZED)
    try:
        return verify_link(token, scope, secret=state.settings.jwt_key, leeway_s=state.token_verifier().leeway_s)
    except AuthError:
        raise Problem(401, "unauthorized", "invalid or expired link", _UNAUTHORIZED) from None


def link_reader(state: AppState, token: str | None, order_id: str) -> Principal:
    """The buyer an order link to ``order_id`` speaks for; 401 for anything else."""
    who = link_holder(state, token, ORDER_SCOPE + order_id)
    assert who.may_use_order(order_id)
    return who


async def page_reader(
    order_id: str, request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)]
) -> Principal:
    """Dependency of the buyer's page routes: the order link in the Authorization
    header or in the page's cookie (what a plain ``<a href>`` download sends)."""
    state = app_state(request)
    return await counted(state, link_reader(state, bearer_token(creds) or request.cookies.get(LINK_COOKIE), order_id))


async def owner_or_link(
    order_id: str, request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)]
) -> Principal:
    """A bearer token of the order's buyer (or an admin), or the order's link."""
    state = app_state(request)
    token = bearer_token(creds)
    if token is None:
        raise Problem(401, "unauthorized", "a bearer token is required", _UNAUTHORIZED)
    try:
        who = verify_bearer_or_link(state.token_verifier(), state.settings.jwt_key, token, ORDER_SCOPE + order_id)
    except UnboundStaffError:
        raise Problem(403, "forbidden", UNBOUND_STAFF) from None
    except AuthError:
        raise Problem(401, "unauthorized", "invalid or expired link", _UNAUTHORIZED) from None
    return await counted(state, who)
