"""Scanner devices' credentials: the access tokens a device's secret buys,
and who such a token speaks for.

An access token is an HS256 JWT under a key of its own, derived from the
services' shared secret (``TICKETRY_JWT_SECRET``) as the order links' is, with
the audience ``ticketry:device``: it never verifies as a staff bearer token,
nor one as it. It speaks for a ``staff`` caller bound to the device's event,
its ``scope`` ``device:<device id>:<list id>``; ``deps`` lets it through only
to the routes a scanner uses (``require(..., devices=True)``) and
``checkins.list_for`` only on its list. Every request with one reads the
device (one point read): a revoked device is refused at once, whatever its
token's lifetime.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import time
from functools import cache
from typing import Any

import jwt
import segno
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from ticketry.auth import AuthError, Principal
from ticketry.device_documents import ScanDevice

from ticketry_api.core import devices
from ticketry_api.core.problem import Problem

DEVICE_AUDIENCE = "ticketry:device"
_KEY_LABEL = b"ticketry device token v1"
_UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}


class DeviceSettings(BaseSettings):
    """How long a pairing code may wait to be used, and how long a device's
    access token lasts (the page refreshes it with its secret well before)."""

    model_config = SettingsConfigDict(env_prefix="TICKETRY_", extra="ignore")

    device_pairing_ttl_s: int = Field(
        default=900, ge=60, le=7 * 24 * 3600,
        description="Seconds (60 to 7 days) a scanner device's one-time pairing code stays usable",
    )  # fmt: skip
    device_token_ttl_s: int = Field(
        default=900, ge=60, le=24 * 3600,
        description="Seconds (60 to 86,400) a scanner device's access token lasts; the page refreshes it before",
    )  # fmt: skip


@cache
def settings() -> DeviceSettings:
    """Read from the environment once per process."""
    return DeviceSettings()


def token_key(secret: str) -> bytes:
    return hmac.new(secret.encode(), _KEY_LABEL, hashlib.sha256).digest()


def issue_token(device: ScanDevice, *, secret: str, ttl_s: int) -> str:
    now = int(time.time())
    claims: dict[str, Any] = {
        "sub": device.id, "role": "staff", "events": [device.event_id],
        "scope": devices.scope(device.id, device.list_id), "aud": DEVICE_AUDIENCE,
        "iat": now, "nbf": now, "exp": now + ttl_s,
    }  # fmt: skip
    return jwt.encode(claims, token_key(secret), "HS256")


def verify_token(token: str, *, secret: str, leeway_s: int) -> Principal:
    """The device a genuine, unexpired access token speaks for; else :class:`AuthError`."""
    if len(token) > 2048:
        raise AuthError("token too long")
    try:
        claims = jwt.decode(
            token, token_key(secret), algorithms=["HS256"], audience=DEVICE_AUDIENCE,
            options={"require": ["exp", "sub", "aud", "scope"]}, leeway=leeway_s,
        )  # fmt: skip
    except jwt.PyJWTError as exc:
        raise AuthError(str(exc)) from exc
    parts = devices.scope_parts(claims.get("scope"))
    events = claims.get("events")
    if parts is None or parts[0] != claims.get("sub") or not isinstance(events, list) or len(events) != 1:
        raise AuthError("not a device token")
    return Principal(
        sub=parts[0], role="staff", events=frozenset([str(events[0])]), exp=int(claims["exp"]), scope=claims["scope"]
    )


def revoked(device: ScanDevice | None) -> Problem:
    """The 401 of a device that is gone or revoked (with its ``revoked_at``, so
    its page can tell which queued scans it made after)."""
    if device is None or device.revoked_at is None:
        return Problem(401, "unauthorized", "invalid or expired token", _UNAUTHORIZED)
    at = device.revoked_at.isoformat().replace("+00:00", "Z")
    if device.revoked_at.tzinfo is None:
        at += "Z"  # the store's times are UTC without a zone
    return Problem(
        401, "device revoked", "this scanner device was revoked: pair it again", _UNAUTHORIZED,
        kind="device-revoked", extra={"revoked_at": at},
    )  # fmt: skip


def qr_png_data_url(url: str) -> str:
    """``url`` as a QR code: a PNG data URL (~1 KB) an organiser's page shows as an image."""
    out = io.BytesIO()
    segno.make(url, error="m").save(out, "png", scale=4, border=4)
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()
