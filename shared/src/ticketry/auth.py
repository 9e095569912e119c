"""Bearer tokens: verification pinned to one algorithm, ``exp`` required."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal, cast

import jwt

Role = Literal["buyer", "organizer", "staff", "admin"]
ROLES: frozenset[str] = frozenset({"buyer", "organizer", "staff", "admin"})


class AuthError(Exception):
    """Missing, malformed, expired or otherwise unacceptable token."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the token's ``sub`` and ``role``."""

    sub: str
    role: Role

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def owns(self, owner_id: str) -> bool:
        """True for the owner; admin may act on anything."""
        return self.is_admin or self.sub == owner_id


def decode_token(token: str, *, key: str, algorithm: str = "HS256", leeway_s: int = 30) -> Principal:
    """Verify a JWT and return its principal. Only ``algorithm`` is accepted."""
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[algorithm],
            options={"require": ["exp", "sub"]},
            leeway=leeway_s,
        )
    except jwt.PyJWTError as exc:
        raise AuthError(str(exc)) from exc
    sub, role = claims.get("sub"), claims.get("role")
    if not isinstance(sub, str) or not sub or len(sub) > 128:
        raise AuthError("invalid sub")
    if role not in ROLES:
        raise AuthError("invalid role")
    return Principal(sub=sub, role=cast(Role, role))


def issue_token(sub: str, role: Role, *, key: str, ttl_s: int = 3600, algorithm: str = "HS256") -> str:
    """Mint a token (dev mode, tests, the demo)."""
    now = int(time.time())
    return jwt.encode({"sub": sub, "role": role, "iat": now, "nbf": now, "exp": now + ttl_s}, key, algorithm)
