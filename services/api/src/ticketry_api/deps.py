"""Request-scoped dependencies: the app state, the caller and their limits."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from redis.asyncio import Redis
from ticketry.auth import AuthError, Principal, Role, TokenVerifier, UnboundStaffError
from ticketry.codes import Keyring
from ticketry.pdfstores import open_store
from ticketry.storage import PdfStore

from ticketry_api.adapters import ratelimit
from ticketry_api.config import ApiSettings
from ticketry_api.core.devices import scope_parts
from ticketry_api.core.problem import Problem
from ticketry_api.middleware.shedding import VERIFIED
from ticketry_api.service_layer import devices
from ticketry_api.store import Store
from ticketry_api.wallet import Wallet
from ticketry_api.web.joins import Joins
from ticketry_api.web.links import LinkSettings
from ticketry_api.webhooks.config import WebhookSettings


@dataclass
class AppState:
    settings: ApiSettings
    redis: Redis
    keyring: Keyring
    store: Store  # the process's writer, capacity ledgers and events read (ticketry_api.store)
    # Built on first use from the same environment (TICKETRY_JWT_*), so main.py
    # does not need to know how tokens are verified.
    verifier: TokenVerifier | None = None
    rates: ratelimit.RateSettings = field(default_factory=ratelimit.RateSettings)
    # Where PDFs are (TICKETRY_STORAGE_BACKEND); opened on first use, closed by the lifespan.
    pdfs: PdfStore | None = None
    # Read from the environment with the rest of the state, in the lifespan (a bad value fails the start).
    links: LinkSettings = field(default_factory=LinkSettings)
    webhooks: WebhookSettings = field(default_factory=WebhookSettings)
    # "Download all" joins (web/joins.py): built on first use from the settings.
    joins: Joins | None = None
    # The wallet credentials, loaded in the lifespan (none: no passes, 503).
    wallet: Wallet = field(default_factory=Wallet)

    def pdf_store(self) -> PdfStore:
        if self.pdfs is None:
            self.pdfs = open_store(self.settings)
        return self.pdfs

    def part_joins(self) -> Joins:
        if self.joins is None:
            s = self.settings
            self.joins = Joins(
                slots=s.max_concurrent_joins,
                queue=s.max_queued_joins,
                per_order=s.max_joins_per_order,
                cache_bytes=s.joined_pdf_cache_mb * 1024 * 1024,
            )
        return self.joins

    def token_verifier(self) -> TokenVerifier:
        if self.verifier is None:
            self.verifier = TokenVerifier.from_env(fallback_secret=self.settings.jwt_key)
        return self.verifier


def app_state(request: Request) -> AppState:
    state: AppState = request.app.state.ticketry
    return state


# Dependencies are ``async def`` on purpose: FastAPI runs a plain ``def`` one in
# its thread pool, thread hops per request for no blocking work (~10% of the
# api's CPU under POST load).
async def get_state(request: Request) -> AppState:
    return app_state(request)


_bearer = HTTPBearer(auto_error=False)
_UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}
UNBOUND_STAFF = "a staff token must name its organizer (claim org) or its events (claim events)"


async def get_principal(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if creds is None or creds.scheme.lower() != "bearer":
        raise Problem(401, "unauthorized", "a bearer token is required", _UNAUTHORIZED)
    verified = request.scope.get(VERIFIED)  # POST /v1/orders: OrderGate verified this very token
    if verified is not None and verified[0] == creds.credentials and isinstance(verified[1], Principal):
        return verified[1]
    state = app_state(request)
    verifier = state.token_verifier()
    try:
        return await verifier.verify_async(creds.credentials)
    except UnboundStaffError:
        raise Problem(403, "forbidden", UNBOUND_STAFF) from None
    except AuthError:
        pass
    # Not a bearer token: a scanner device's access token, if its device is not revoked.
    try:
        who = devices.verify_token(creds.credentials, secret=state.settings.jwt_key, leeway_s=verifier.leeway_s)
    except AuthError:
        # No reason given: "expired" vs "bad signature" helps nobody but an attacker.
        raise Problem(401, "unauthorized", "invalid or expired token", _UNAUTHORIZED) from None
    device = await state.store.devices.get(who.sub)
    if device is None or device.revoked_at is not None:
        raise devices.revoked(device)
    return who


def _allowed(principal: Principal, roles: set[str], devices_may: bool) -> None:
    if principal.role not in roles:
        raise Problem(403, "forbidden", "your role may not do this")
    if not devices_may and scope_parts(principal.scope) is not None:
        raise Problem(403, "forbidden", "a scanner device may only scan")


def require(*roles: Role, devices: bool = False) -> Callable[..., Coroutine[Any, Any, Principal]]:
    """Dependency: the caller, who must hold one of ``roles`` (admin always may);
    a scanner device's token only where ``devices`` (the routes a scanner uses)."""
    allowed = set(roles) | {"admin"}

    async def dep(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
        _allowed(principal, allowed, devices)
        return principal

    return dep


def rate_limited(
    scope: ratelimit.Scope, *roles: Role, devices: bool = False
) -> Callable[..., Coroutine[Any, Any, Principal]]:
    """Like :func:`require`, then counts the call against the caller's per-minute
    limit for ``scope`` (``checkins``; orders count theirs in ``place_order``);
    429 with Retry-After when over."""
    allowed = set(roles) | {"admin"}

    # Annotations name module globals only: FastAPI resolves them from there.
    async def dep(request: Request, principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
        _allowed(principal, allowed, devices)
        state = app_state(request)
        limit = state.rates.limit(scope)
        await ratelimit.enforce(state.redis, scope, principal.sub, limit, state.rates.rate_window_s)
        return principal

    return dep


State = Annotated[AppState, Depends(get_state)]
AnyUser = Annotated[Principal, Depends(get_principal)]
