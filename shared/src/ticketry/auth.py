"""Bearer tokens: verification pinned to one algorithm, ``exp`` required.

HS256 with a shared secret is the default. Shops with an identity provider set
``TICKETRY_JWT_ALGORITHM=RS256`` (or ES256/EdDSA) and either
``TICKETRY_JWT_PUBLIC_KEY`` (PEM text or a path to a PEM file) or
``TICKETRY_JWT_JWKS_FILE`` (a JWKS document, keys picked by the token's ``kid``).
Whatever is configured, a token signed with any other algorithm — ``none``,
HS512, an RS256 token presented to an HS256 service (the classic key-confusion
attack) — is refused: the accepted algorithm list always has exactly one entry
and the key type must fit it.

``TICKETRY_JWT_JWKS_URL`` fetches the JWKS from the identity provider instead
(PyJWT's ``PyJWKClient``; refreshed every ``TICKETRY_JWT_JWKS_CACHE_S``, and on
an unknown ``kid`` at most every 30 s; a failed refresh keeps the last good
set). ``TICKETRY_JWT_ISSUER`` / ``TICKETRY_JWT_AUDIENCE``, when set, must match
the token's ``iss`` / ``aud`` (both then required). An HS secret shorter than
its hash (32 bytes for HS256, RFC 7518 §3.2) is refused.

A staff token is bound: to an organizer's events (claim ``org``, the
organizer's ``sub``) or to events (claim ``events``, their ids), or both. One
with neither is refused at verification (:class:`UnboundStaffError`, a 403
wherever it is presented): deny by default.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import urlsplit

import jwt
from jwt.algorithms import get_default_algorithms
from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

log = logging.getLogger(__name__)

Role = Literal["buyer", "organizer", "staff", "admin"]
ROLES: frozenset[str] = frozenset({"buyer", "organizer", "staff", "admin"})
SYMMETRIC: frozenset[str] = frozenset({"HS256", "HS384", "HS512"})
ASYMMETRIC: frozenset[str] = frozenset({"RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"})
# RFC 7518 §3.2: an HMAC key at least as long as the hash's output.
MIN_SECRET_BYTES: dict[str, int] = {"HS256": 32, "HS384": 48, "HS512": 64}
# Bounds of a staff token's bindings: at most this many ``events``, each id
# (and ``org``, an organizer's ``sub``) at most this many characters.
MAX_EVENTS_CLAIM = 1000
MAX_ID_CLAIM = 128
# The JWK key type each asymmetric algorithm takes (other keys of a JWKS are skipped).
_KEY_TYPE = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}


class AuthError(Exception):
    """Missing, malformed, expired or otherwise unacceptable token."""


class UnboundStaffError(AuthError):
    """A genuine staff token bound to no organizer (``org``) and no events
    (``events``): refused everywhere (403), so a forgotten claim never opens
    every organizer's doors."""


class ConfigurationError(RuntimeError):
    """The environment does not describe a runnable service. (Not a pydantic
    ValueError: pydantic would print the offending input, a secret among them.)"""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the token's ``sub`` and ``role``; ``events`` limits a
    token to those events and ``org`` to the events of that organizer (None:
    no such limit; a staff token always has one or both, see :func:`_principal`);
    ``exp`` is when the token expires (Unix seconds; 0 when unknown)."""

    sub: str
    role: Role
    events: frozenset[str] | None = None
    exp: int = 0
    org: str | None = None
    # ``order:<id>``: an order link's token (:func:`issue_order_link`), good
    # only for reading that one order. Any other value limits nothing.
    scope: str | None = None

    def may_use_order(self, order_id: str) -> bool:
        """False when this is an order link's token for another order: a scoped
        token reads its own order (its page, PDFs and progress), nothing else."""
        return self.scope is None or not self.scope.startswith(ORDER_SCOPE) or self.scope == ORDER_SCOPE + order_id

    def may_scan_for(self, event_id: str, organizer_id: str) -> bool:
        """True if this caller may check tickets in for the event ``event_id``
        of ``organizer_id``: within its ``events`` and ``org``, each a limit
        when present. A staff token with neither never gets this far."""
        if self.role == "staff" and self.events is None and self.org is None:
            return False  # deny by default, should a Principal be built by hand
        return (self.events is None or event_id in self.events) and (self.org is None or self.org == organizer_id)

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
        not isinstance(events, list)
        or len(events) > MAX_EVENTS_CLAIM
        or not all(isinstance(e, str) and 0 < len(e) <= MAX_ID_CLAIM for e in events)
    ):
        raise AuthError("invalid events claim")
    org = claims.get("org")
    if org is not None and (not isinstance(org, str) or not org or len(org) > MAX_ID_CLAIM or not org.isprintable()):
        raise AuthError("invalid org claim")
    if role == "staff" and not events and org is None:
        # An empty ``events`` list binds to nothing too: the same refusal.
        raise UnboundStaffError("staff token bound to no organizer or events")
    exp = claims.get("exp")
    # An identity provider's OAuth ``scope`` ("openid profile") is no error: only ``order:`` limits.
    scope = claims.get("scope")
    return Principal(
        sub=sub,
        role=cast(Role, role),
        events=None if events is None else frozenset(events),
        exp=exp if isinstance(exp, int) else 0,
        org=org,
        scope=scope if isinstance(scope, str) and len(scope) <= 128 else None,
    )


def decode_token(
    token: str,
    *,
    key: Any,
    algorithm: str = "HS256",
    leeway_s: int = 30,
    issuer: str | None = None,
    audience: str | None = None,
) -> Principal:
    """Verify a JWT and return its principal. Only ``algorithm`` is accepted;
    ``exp`` and ``sub`` are required, ``nbf``/``iat`` are checked when present
    (with ``leeway_s`` of clock skew); ``iss`` and ``aud`` are required and must
    match when ``issuer`` / ``audience`` are given. A token with an ``aud`` is
    refused when no ``audience`` is given (PyJWT's rule; order links rely on it)."""
    if algorithm not in SYMMETRIC | ASYMMETRIC:
        raise AuthError("algorithm not allowed")
    if len(token) > 8192:
        raise AuthError("token too long")
    required = ["exp", "sub"] + (["iss"] if issuer else []) + (["aud"] if audience else [])
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[algorithm],
            options={"require": required, "verify_signature": True},
            leeway=leeway_s,
            issuer=issuer,
            audience=audience,
        )
    except jwt.PyJWTError as exc:
        raise AuthError(str(exc)) from exc
    return _principal(claims)


def is_loopback_url(url: str) -> bool:
    """True when ``url``'s host is this machine (``localhost``, 127.0.0.0/8, ::1)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class JwtSettings(BaseSettings):
    """The token-verification part of the environment (read by every service)."""

    model_config = SettingsConfigDict(env_prefix="TICKETRY_", extra="ignore")

    jwt_algorithm: str = Field(
        default="HS256",
        description="how buyers' and staff tokens are signed: HS256/HS384/HS512 with TICKETRY_JWT_SECRET, or "
        "RS256/RS384/RS512/PS256/ES256/ES384/EdDSA with the identity provider's public key, JWKS file or URL",
    )
    jwt_secret: SecretStr | None = Field(
        default=None,
        description="the HMAC secret of HS tokens, which also signs order links: at least the hash's length "
        "(32 bytes for HS256; `openssl rand -hex 32`); the api and the notifier need it outside dev mode",
    )
    jwt_public_key: str | None = Field(
        default=None,
        description="the identity provider's public key (PEM text, or a PEM file's path) for RS/PS/ES/EdDSA tokens",
    )
    jwt_jwks_file: Path | None = Field(
        default=None, description="a JWKS file of the identity provider's signing keys, picked by a token's `kid`"
    )
    jwt_jwks_url: str | None = Field(
        default=None,
        description="the identity provider's JWKS endpoint (https; http only on loopback), fetched at start, "
        "when the keys are TICKETRY_JWT_JWKS_CACHE_S old, and when a token names an unknown `kid`",
    )
    jwt_jwks_cache_s: float = Field(
        default=300.0, gt=0, description="how long keys fetched from TICKETRY_JWT_JWKS_URL are used before a refetch"
    )
    jwt_jwks_min_refresh_s: float = Field(
        default=30.0,
        gt=0,
        description="the least time between two fetches of TICKETRY_JWT_JWKS_URL, however many tokens name "
        "an unknown `kid` (so made-up kids cannot make the service hammer the provider)",
    )
    jwt_issuer: str | None = Field(default=None, description="the `iss` every token must carry; none: not checked")
    jwt_audience: str | None = Field(
        default=None, description="the `aud` every token must carry (never the order links' own); none: not checked"
    )
    jwt_leeway_s: int = Field(
        default=30, ge=0, le=3600, description="clock difference allowed with the token issuer (`exp`, `nbf`, `iat`)"
    )

    @model_validator(mode="after")
    def _safe(self) -> JwtSettings:
        if self.jwt_secret is not None:
            # The secret signs HS tokens (when the algorithm is one) and order
            # links (HS256) in every mode: never shorter than the hash.
            need = max(MIN_SECRET_BYTES.get(self.jwt_algorithm, 0), MIN_SECRET_BYTES["HS256"])
            have = len(self.jwt_secret.get_secret_value().encode())
            if have < need:
                raise ConfigurationError(
                    f"TICKETRY_JWT_SECRET has {have} bytes; {self.jwt_algorithm} needs at least {need} "
                    "(RFC 7518 §3.2). Make one with: openssl rand -hex 32"
                )
        if self.jwt_jwks_url is not None:
            scheme = urlsplit(self.jwt_jwks_url).scheme
            if scheme != "https" and not (scheme == "http" and is_loopback_url(self.jwt_jwks_url)):
                raise ValueError("TICKETRY_JWT_JWKS_URL must be https:// (http:// only on loopback)")
        if self.jwt_audience == ORDER_LINK_AUDIENCE:
            raise ValueError(f"TICKETRY_JWT_AUDIENCE may not be {ORDER_LINK_AUDIENCE!r} (the order links' own)")
        return self


class RemoteJwks:
    """The signing keys an identity provider publishes at a JWKS URL, fetched
    with PyJWT's :class:`jwt.PyJWKClient`.

    Fetched at construction (a wrong URL fails the service's start, not its
    first request), again once ``cache_s`` old, and when a token names a ``kid``
    the set lacks (key rotation at the provider) — but never more than once
    every ``min_refresh_s``, so tokens with made-up ``kid``s cannot make the
    service hammer the provider. A failed refresh keeps the last good keys.

    After construction a refresh runs on a thread of its own, never on the
    caller's event loop, and one at a time: every caller that needs it waits
    for that one fetch (bounded by ``timeout_s``). A set ``cache_s`` old keeps
    verifying while its refresh runs; a caller whose ``kid`` is unknown waits
    for the refresh in :meth:`key` (without blocking its loop), and is told
    "unknown" at once by :meth:`key_for` on an event loop's thread."""

    def __init__(
        self, url: str, algorithm: str, *, cache_s: float = 300.0, min_refresh_s: float = 30.0, timeout_s: float = 5.0
    ) -> None:
        self.url, self.algorithm = url, algorithm
        self.cache_s, self.min_refresh_s = cache_s, min_refresh_s
        self._client = jwt.PyJWKClient(url, cache_jwk_set=False, cache_keys=False, timeout=int(max(1, timeout_s)))
        self.keys: dict[str, Any] = {}
        self.default: Any = None
        self.fetched_at = self.tried_at = float("-inf")
        self._lock = threading.Lock()
        self._pending: Future[None] | None = None
        self.refresh()

    def refresh(self) -> None:
        """Fetch the set now, on this thread; raises :class:`jwt.PyJWTError` when it cannot."""
        self.tried_at = time.monotonic()
        jwk_set = self._client.get_jwk_set(refresh=True)
        kty = _KEY_TYPE[self.algorithm[:2]]
        keys: dict[str, Any] = {}
        default: Any = None
        for jwk in jwk_set.keys:
            if jwk.public_key_use not in (None, "sig") or jwk.key_type != kty:
                continue
            if jwk.key_id:
                keys[jwk.key_id] = jwk.key
            elif default is None:
                default = jwk.key
        if not keys and default is None:
            raise jwt.PyJWKSetError(f"no {kty} signing key for {self.algorithm} at {self.url}")
        self.keys, self.default, self.fetched_at = keys, default, time.monotonic()

    def _known(self, kid: str | None) -> bool:
        return (kid in self.keys) if kid is not None else self.default is not None

    def _lookup(self, kid: str | None) -> Any:
        return self.keys.get(kid) if kid is not None else self.default

    def _refreshing(self, kid: str | None) -> Future[None] | None:
        """The refresh under way (started now if one is due and allowed), or
        None when the set is fresh and knows ``kid`` or none may start yet."""
        now = time.monotonic()
        if self._known(kid) and now - self.fetched_at <= self.cache_s:
            return None
        with self._lock:
            if self._pending is None and now - self.tried_at >= self.min_refresh_s:
                self.tried_at = now
                self._pending = Future()
                threading.Thread(target=self._refresh_in_background, name="jwks-refresh", daemon=True).start()
            return self._pending

    def _refresh_in_background(self) -> None:
        try:
            self.refresh()
        except Exception as exc:  # the last good keys stay; the next allowed refresh tries again
            log.warning("JWKS refresh failed; keeping the last good keys", extra={"error": str(exc)})
        with self._lock:
            done, self._pending = self._pending, None
        if done is not None:
            done.set_result(None)

    def key_for(self, kid: str | None) -> Any:
        """The key for ``kid`` (None: the set's key without a ``kid``), or None.
        Starts a refresh when one is due; waits for it only when ``kid`` is
        unknown and this thread runs no event loop."""
        pending = self._refreshing(kid)
        if pending is not None and not self._known(kid) and not _on_event_loop():
            pending.result()
        return self._lookup(kid)

    async def key(self, kid: str | None) -> Any:
        """:meth:`key_for`, waiting for a refresh of an unknown ``kid`` without
        blocking the event loop (however many callers wait, one fetch)."""
        pending = self._refreshing(kid)
        if pending is not None and not self._known(kid):
            # shield: a caller that gives up does not cancel the others' refresh
            await asyncio.shield(asyncio.wrap_future(pending))
        return self._lookup(kid)


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


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
    issuer: str | None = None
    audience: str | None = None
    # Keys from the identity provider's JWKS URL, looked up before ``keys``/``key``.
    remote: RemoteJwks | None = None

    def __post_init__(self) -> None:
        if self.algorithm not in SYMMETRIC | ASYMMETRIC:
            raise ValueError(f"JWT algorithm {self.algorithm!r} is not allowed")
        if self.key is None and not self.keys and self.remote is None:
            raise ValueError(f"no verification key configured for {self.algorithm}")

    def verify(self, token: str) -> Principal:
        key = self.key
        if self.keys or self.remote is not None:
            kid = _kid(token)
            found = self.remote.key_for(kid) if self.remote is not None else None
            if found is None and kid is not None:
                found = self.keys.get(kid)
            if found is not None:
                key = found
            elif key is None:
                raise AuthError("unknown key id")
        return decode_token(
            token, key=key, algorithm=self.algorithm, leeway_s=self.leeway_s, issuer=self.issuer, audience=self.audience
        )

    async def verify_async(self, token: str) -> Principal:
        """:meth:`verify`, first waiting (off the event loop) for the remote
        set's refresh when the token names a ``kid`` it lacks."""
        if self.remote is not None:
            await self.remote.key(_kid(token))
        return self.verify(token)

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
            return cls(alg, key=secret, leeway_s=s.jwt_leeway_s, issuer=s.jwt_issuer, audience=s.jwt_audience)
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
        remote = None
        if s.jwt_jwks_url is not None:
            try:
                remote = RemoteJwks(
                    s.jwt_jwks_url, alg, cache_s=s.jwt_jwks_cache_s, min_refresh_s=s.jwt_jwks_min_refresh_s
                )
            except jwt.PyJWTError as exc:
                raise ValueError(f"TICKETRY_JWT_JWKS_URL: {exc}") from exc
        if key is None and not keys and remote is None:
            raise ValueError(f"{alg} needs TICKETRY_JWT_PUBLIC_KEY, TICKETRY_JWT_JWKS_FILE or TICKETRY_JWT_JWKS_URL")
        return cls(
            alg, key=key, keys=keys, leeway_s=s.jwt_leeway_s, issuer=s.jwt_issuer, audience=s.jwt_audience,
            remote=remote,
        )  # fmt: skip


def _kid(token: str) -> str | None:
    """The ``kid`` a token's header names (None: none, or not a short string)."""
    try:
        kid = jwt.get_unverified_header(token).get("kid")
    except jwt.PyJWTError as exc:
        raise AuthError(str(exc)) from exc
    return kid if isinstance(kid, str) and len(kid) <= 256 else None


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
    org: str | None = None,
) -> str:
    """Mint a token (dev mode, tests, the demo). ``events`` (event ids) and
    ``org`` (an organizer's ``sub``) bind a staff token; one without either is
    refused wherever it is presented."""
    now = int(time.time())
    claims: dict[str, Any] = {"sub": sub, "role": role, "iat": now, "nbf": now + not_before_s, "exp": now + ttl_s}
    if events is not None:
        claims["events"] = events
    if org is not None:
        claims["org"] = org
    return jwt.encode(claims, key, algorithm, headers={"kid": kid} if kid else None)


# Links: the token in a buyer's ``status_page_url``: an order's
# (``…/o/<order>#t=<jwt>``) or a waiting-room place's (``…/q/<queue id>#t=<jwt>``).
ORDER_SCOPE = "order:"
QUEUE_SCOPE = "queue:"
ORDER_LINK_AUDIENCE = "ticketry:order-link"  # the audience of every link, an order's or a place's
_ORDER_LINK_KEY_LABEL = b"ticketry order link v1"


def order_link_key(secret: str) -> bytes:
    """The HS256 key of links, derived from the services' shared secret
    (``TICKETRY_JWT_SECRET``, which every service has in any JWT mode). A
    key of its own, so a link never verifies as a bearer token (nor a
    bearer token as a link), even where a verifier forgot the audience."""
    return hmac.new(secret.encode(), _ORDER_LINK_KEY_LABEL, hashlib.sha256).digest()


def issue_link(scope: str, sub: str, *, secret: str, ttl_s: int) -> str:
    """A token that lets its bearer read one thing (``scope``: ``order:<id>`` or
    ``queue:<id>``) as its buyer ``sub``, and nothing else: an ``aud`` that
    bearer-token verification refuses, a key of its own and the scope."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "sub": sub, "role": "buyer", "scope": scope, "aud": ORDER_LINK_AUDIENCE,
        "iat": now, "nbf": now, "exp": now + ttl_s,
    }  # fmt: skip
    return jwt.encode(claims, order_link_key(secret), "HS256")


def verify_link(token: str, scope: str, *, secret: str, leeway_s: int = 30) -> Principal:
    """The buyer a link speaks for, if ``token`` is a genuine, unexpired link
    for exactly ``scope``; else :class:`AuthError`."""
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
    if principal.role != "buyer" or principal.scope != scope:
        raise AuthError("not a link to this " + scope.rstrip(":").split(":")[0])
    return principal


def bearer_of(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value (the
    scheme in any case), or None for none, another scheme or an empty token."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def verify_bearer_or_link(verifier: TokenVerifier, secret: str, token: str, scope: str) -> Principal:
    """Who ``token`` speaks for: a bearer token, or a link for exactly ``scope``
    (``order:<id>`` or ``queue:<id>``: the buyer's page of that order or place);
    :class:`AuthError` otherwise."""
    try:
        return verifier.verify(token)
    except UnboundStaffError:
        raise
    except AuthError:
        return verify_link(token, scope, secret=secret, leeway_s=verifier.leeway_s)


def issue_order_link(order_id: str, sub: str, *, secret: str, ttl_s: int) -> str:
    """A link to one order: its page, its PDFs and its progress socket."""
    return issue_link(ORDER_SCOPE + order_id, sub, secret=secret, ttl_s=ttl_s)


def issue_queue_link(queue_id: str, sub: str, *, secret: str, ttl_s: int) -> str:
    """A link to one waiting-room place: its page and its queue socket."""
    return issue_link(QUEUE_SCOPE + queue_id, sub, secret=secret, ttl_s=ttl_s)
