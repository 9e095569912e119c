"""Bearer tokens: verification pinned to one algorithm, ``exp`` required.

HS256 with a shared secret is the default. Shops with an identity provider set
``TICKETRY_JWT_ALGORITHM=RS256`` (or ES256/EdDSA) and either
``TICKETRY_JWT_PUBLIC_KEY`` (PEM text or a path to a PEM file) or
``TICKETRY_JWT_JWKS_FILE`` (a JWKS document, keys picked by the token's ``kid``).
Whatever is configured, a token signed with any other algorithm — ``none``,
HS512, an RS256 token presented to an HS256 service (the classic key-confusion
attack) — is refused: the accepted algorithm list always has exactly one entry
and the key type must fit it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import jwt
from jwt.algorithms import get_default_algorithms
from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

Role = Literal["buyer", "organizer", "staff", "admin"]
ROLES: frozenset[str] = frozenset({"buyer", "organizer", "staff", "admin"})
SYMMETRIC: frozenset[str] = frozenset({"HS256", "HS384", "HS512"})
ASYMMETRIC: frozenset[str] = frozenset({"RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"})


class AuthError(Exception):
    """Missing, malformed, expired or otherwise unacceptable token."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the token's ``sub`` and ``role``; ``events`` limits a
    staff token to those events (None: no limit); ``exp`` is when the token
    expires (Unix seconds; 0 when unknown)."""

    sub: str
    role: Role
    events: frozenset[str] | None = None
    exp: int = 0
    # ``order:<id>``: an order link's token (:func:`issue_order_link`), good
    # only for reading that one order. Any other value limits nothing.
    scope: str | None = None

    def may_use_order(self, order_id: str) -> bool:
        """False when this is an order link's token for another order: a scoped
        token reads its own order (its page, PDFs and progress), nothing else."""
        return self.scope is None or not self.scope.startswith(ORDER_SCOPE) or self.scope == ORDER_SCOPE + order_id

    def may_scan_for(self, event_id: str) -> bool:
        """True if this caller may check tickets in for ``event_id``."""
        return self.events is None or event_id in self.events

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def owns(self, owner_id: str) -> bool:
        """True for the owner; admin may act on anything."""
        return self.is_admin or self.sub == owner_id


def _principal(claims: dict[str, Any]) -> Principal:
    sub, role = claims.get("sub"), claims.get("role")
    if not isinstance(sub, str) or not sub or len(sub) > 128 or not sub.isprintable():
        raise AuthError("invalid sub")
    if role not in ROLES:
        raise AuthError("invalid role")
    events = claims.get("events")
    if events is not None and (
        not isinstance(events, list) or len(events) > 1000 or not all(isinstance(e, str) for e in events)
    ):
        raise AuthError("invalid events claim")
    exp = claims.get("exp")
    # An identity provider's OAuth ``scope`` ("openid profile") is no error: only ``order:`` limits.
    scope = claims.get("scope")
    return Principal(
        sub=sub,
        role=cast(Role, role),
        events=None if events is None else frozenset(events),
        exp=exp if isinstance(exp, int) else 0,
        scope=scope if isinstance(scope, str) and len(scope) <= 128 else None,
    )


def decode_token(token: str, *, key: Any, algorithm: str = "HS256", leeway_s: int = 30) -> Principal:
    """Verify a JWT and return its principal. Only ``algorithm`` is accepted;
    ``exp`` and ``sub`` are required, ``nbf``/``iat`` are checked when present
    (with ``leeway_s`` of clock skew)."""
    if algorithm not in SYMMETRIC | ASYMMETRIC:
        raise AuthError("algorithm not allowed")
    if len(token) > 8192:
        raise AuthError("token too long")
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[algorithm],
            options={"require": ["exp", "sub"], "verify_signature": True},
            leeway=leeway_s,
        )
    except jwt.PyJWTError as exc:
        raise AuthError(str(exc)) from exc
    return _principal(claims)


class JwtSettings(BaseSettings):
    """The token-verification part of the environment (read by every service)."""

    model_config = SettingsConfigDict(env_prefix="TICKETRY_", extra="ignore")

    jwt_algorithm: str = "HS256"
    jwt_secret: SecretStr | None = None
    jwt_public_key: str | None = None
    jwt_jwks_file: Path | None = None
    jwt_leeway_s: int = 30


@dataclass
class TokenVerifier:
    """Verifies bearer tokens with the configured algorithm and key(s).

    ``keys`` maps a JWKS ``kid`` to a key; ``key`` is used for tokens without a
    ``kid`` (or when no JWKS is configured).
    """

    algorithm: str
    key: Any = None
    keys: dict[str, Any] = field(default_factory=dict)
    leeway_s: int = 30

    def __post_init__(self) -> None:
        if self.algorithm not in SYMMETRIC | ASYMMETRIC:
            raise ValueError(f"JWT algorithm {self.algorithm!r} is not allowed")
        if self.key is None and not self.keys:
            raise ValueError(f"no verification key configured for {self.algorithm}")

    def verify(self, token: str) -> Principal:
        key = self.key
        if self.keys:
            try:
                kid = jwt.get_unverified_header(token).get("kid")
            except jwt.PyJWTError as exc:
                raise AuthError(str(exc)) from exc
            if isinstance(kid, str) and kid in self.keys:
                key = self.keys[kid]
            elif key is None:
                raise AuthError("unknown key id")
        return decode_token(token, key=key, algorithm=self.algorithm, leeway_s=self.leeway_s)

    @classmethod
    def from_env(cls, *, fallback_secret: str | None = None) -> TokenVerifier:
        """Build from ``TICKETRY_JWT_*``; ``fallback_secret`` is the HS secret to
        use when none is set (the caller's settings decide whether that is allowed)."""
        return cls.from_settings(JwtSettings(), fallback_secret=fallback_secret)

    @classmethod
    def from_settings(cls, s: JwtSettings, *, fallback_secret: str | None = None) -> TokenVerifier:
        alg = s.jwt_algorithm
        if alg in SYMMETRIC:
            secret = s.jwt_secret.get_secret_value() if s.jwt_secret is not None else fallback_secret
            if not secret:
                raise ValueError(f"{alg} needs TICKETRY_JWT_SECRET")
            return cls(alg, key=secret, leeway_s=s.jwt_leeway_s)
        if alg not in ASYMMETRIC:
            raise ValueError(f"JWT algorithm {alg!r} is not allowed")
        algo = get_default_algorithms()[alg]
        key: Any = None
        keys: dict[str, Any] = {}
        if s.jwt_public_key:
            pem = s.jwt_public_key
            if not pem.lstrip().startswith("-----BEGIN"):
                pem = Path(pem).read_text()
            key = algo.prepare_key(pem)
        if s.jwt_jwks_file is not None:
            jwks = json.loads(s.jwt_jwks_file.read_text())
            for jwk in jwks.get("keys", []):
                if jwk.get("use", "sig") != "sig" or jwk.get("alg", alg) != alg:
                    continue
                kid = jwk.get("kid")
                parsed = algo.from_jwk(jwk)
                if isinstance(kid, str):
                    keys[kid] = parsed
                elif key is None:
                    key = parsed
        if key is None and not keys:
            raise ValueError(f"{alg} needs TICKETRY_JWT_PUBLIC_KEY or TICKETRY_JWT_JWKS_FILE")
        return cls(alg, key=key, keys=keys, leeway_s=s.jwt_leeway_s)


def issue_token(
    sub: str,
    role: Role,
    *,
    key: Any,
    ttl_s: int = 3600,
    algorithm: str = "HS256",
    kid: str | None = None,
    not_before_s: int = 0,
    events: list[str] | None = None,
) -> str:
    """Mint a token (dev mode, tests, the demo); ``events`` limits a staff token."""
    now = int(time.time())
    claims: dict[str, Any] = {"sub": sub, "role": role, "iat": now, "nbf": now + not_before_s, "exp": now + ttl_s}
    if events is not None:
        claims["events"] = events
    return jwt.encode(claims, key, algorithm, headers={"kid": kid} if kid else None)


# Order links: the token in a buyer's ``status_page_url`` (``…/o/<order>#t=<jwt>``).
ORDER_SCOPE = "order:"
ORDER_LINK_AUDIENCE = "ticketry:order-link"
_ORDER_LINK_KEY_LABEL = b"ticketry order link v1"


def order_link_key(secret: str) -> bytes:
    """The HS256 key of order links, derived from the services' shared secret
    (``TICKETRY_JWT_SECRET``, which every service has in any JWT mode). A
    key of its own, so an order link never verifies as a bearer token (nor a
    bearer token as a link), even where a verifier forgot the audience."""
    return hmac.new(secret.encode(), _ORDER_LINK_KEY_LABEL, hashlib.sha256).digest()


def issue_order_link(order_id: str, sub: str, *, secret: str, ttl_s: int) -> str:
    """A token that lets its bearer read one order, as its buyer ``sub``: the
    order's page, its PDFs and its progress socket, and nothing else (an
    ``aud`` that bearer-token verification refuses, a key of its own and
    ``scope: order:<id>``)."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "sub": sub, "role": "buyer", "scope": ORDER_SCOPE + order_id, "aud": ORDER_LINK_AUDIENCE,
        "iat": now, "nbf": now, "exp": now + ttl_s,
    }  # fmt: skip
    return jwt.encode(claims, order_link_key(secret), "HS256")


def verify_order_link(token: str, order_id: str, *, secret: str, leeway_s: int = 30) -> Principal:
    """The buyer an order link speaks for, if ``token`` is a genuine, unexpired
    link to ``order_id``; else :class:`AuthError`."""
    if len(token) > 2048:
        raise AuthError("token too long")
    try:
        claims = jwt.decode(
            token,
            order_link_key(secret),
            algorithms=["HS256"],
            audience=ORDER_LINK_AUDIENCE,
            options={"require": ["exp", "sub", "aud", "scope"]},
            leeway=leeway_s,
        )
    except jwt.PyJWTError as exc:
        raise AuthError(str(exc)) from exc
    principal = _principal(claims)
    if principal.role != "buyer" or principal.scope != ORDER_SCOPE + order_id:
        raise AuthError("not a link to this order")
    return principal
