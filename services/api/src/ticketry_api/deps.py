"""Request-scoped dependencies: the app state and the caller."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from redis.asyncio import Redis
from ticketry.auth import AuthError, Principal, Role, decode_token
from ticketry.codes import Keyring
from ticketry.emit import Emitter

from ticketry_api.config import ApiSettings
from ticketry_api.errors import Problem


@dataclass
class AppState:
    settings: ApiSettings
    redis: Redis
    keyring: Keyring
    emitter: Emitter


def get_state(request: Request) -> AppState:
    state: AppState = request.app.state.ticketry
    return state


_bearer = HTTPBearer(auto_error=False)


def get_principal(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if creds is None or creds.scheme.lower() != "bearer":
        raise Problem(401, "unauthorized", "a bearer token is required", {"WWW-Authenticate": "Bearer"})
    s = get_state(request).settings
    try:
        return decode_token(creds.credentials, key=s.jwt_key, algorithm=s.jwt_algorithm, leeway_s=s.jwt_leeway_s)
    except AuthError:
        raise Problem(401, "unauthorized", "invalid or expired token", {"WWW-Authenticate": "Bearer"}) from None


def require(*roles: Role) -> Callable[..., Coroutine[Any, Any, Principal]]:
    """Dependency: the caller, who must hold one of ``roles`` (admin always may)."""
    allowed = set(roles) | {"admin"}

    async def dep(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
        if principal.role not in allowed:
            raise Problem(403, "forbidden", "your role may not do this")
        return principal

    return dep


State = Annotated[AppState, Depends(get_state)]
AnyUser = Annotated[Principal, Depends(get_principal)]
